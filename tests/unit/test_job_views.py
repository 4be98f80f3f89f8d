"""``agentwake.jobs.views.job_state``: a job's status in words, the one place jobs show, jobs list,
the console's Jobs page and the demo read it from."""

from __future__ import annotations

import pytest

from agentwake.domain.run_models import Job
from agentwake.jobs.views import job_state


def job(**fields: object) -> Job:
    return Job(job_id="job-1", session_id="s1", name="Hourly", schedule_expression="rate(1 hour)", **fields)


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({}, "active; no run yet"),
        ({"status": "running"}, "active; a run is running"),
        ({"status": "completed"}, "active; last run succeeded"),
        ({"status": "failed"}, "active; last run failed"),
        (
            {"status": "failed", "paused_at": "2026-12-01T00:00:00Z", "pause_reason": "3 failed runs in a row"},
            "paused: 3 failed runs in a row; last run failed",
        ),
        ({"status": "completed", "run_once": True, "enabled": False}, "done (one-time job); last run succeeded"),
        ({"status": "completed", "enabled": False}, "disabled; last run succeeded"),
    ],
)
def test_a_jobs_status_says_whether_it_fires_and_what_its_last_run_did(fields: dict[str, object], words: str) -> None:
    # GIVEN a job in one state  WHEN its status is put in words  THEN it says both, never "completed" alone
    assert job_state(job(**fields)) == words
