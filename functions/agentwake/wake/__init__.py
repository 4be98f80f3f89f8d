"""Use cases: wake for a cron job, wake for a background result, commit on DONE / raise on ERROR."""
