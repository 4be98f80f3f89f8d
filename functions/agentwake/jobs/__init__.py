"""Cron jobs: the operator's service (``service``: create, pause, resume, backfill, show), a job's fire
times and its pause (``fires``, shared with the cron wake's policies), and what the service answers
(``views``)."""
