"""The domain: what a session, a task, a job, a run and its records are, as plain values
(pydantic models and dataclasses), with the run's identity. No table, no queue, no HTTP."""
