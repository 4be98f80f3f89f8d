"""`make demo` runs in the suite: its outcomes are checked, not only its printed text."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest

from agentwake_local.demo import DemoResult, check, run_demo
from agentwake_local.server import is_reachable


@pytest.fixture(scope="module")
def demo() -> Iterator[tuple[DemoResult, str]]:
    """One run of the demo (about 15 s), in an 80-column terminal: what it did and what it printed."""
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COLUMNS", "80")
        result = run_demo(out)
    yield result, out.getvalue()


def test_demo_scenario_outcomes(demo: tuple[DemoResult, str]) -> None:
    # GIVEN nothing but this repository WHEN the demo scenario runs on the embedded local AWS
    result, text = demo
    # THEN the cron job wrote its note and completed
    assert result.cron_note and "I finished this job, here is the result: " in result.cron_note
    assert result.job_status == "completed"
    # AND the finished background task messaged the user and wrote its note
    assert result.delivered == ["Here is the update you asked for."] * 2  # the cron run, then the task run
    assert result.task_note and result.task_note.startswith("[BackgroundTask] Aurora pricing research")
    # AND the failing task was received MaxReceiveCount (5) times and sits in the DLQ with its reason
    assert result.failing_receives == 5
    assert len(result.dlq_run_ids) == 1 and result.dlq_run_ids[0].startswith("bg:")
    assert result.dlq_reason.startswith("All chat models failed: primary: ServerError")
    assert result.failing_notes == 0
    # AND the redrive resumed the run: one note, the delivery not repeated
    assert result.redrive_moved == 1
    assert result.after_redrive_notes == 1 and result.after_redrive_deliveries == 1
    assert check(result) == []
    # AND the local server is stopped at the end, within the minute the README promises
    assert not is_reachable(result.endpoint_url)
    assert result.seconds < 60
    assert "== 1. The embedded local AWS ==" in text and "Stopping the local stack" in text


def test_demo_reads_as_it_happens(demo: tuple[DemoResult, str]) -> None:
    # GIVEN the demo's printed story
    _, text = demo
    sections = {block.split(" ==")[0]: block for block in text.split("\n== ")[1:]}
    # THEN the failing task's five attempts are told once, not as the same block five times
    failing = next(block for title, block in sections.items() if "wake fails" in title)
    lines = [line for line in failing.splitlines()[1:] if line.strip()]
    assert len(lines) == len(set(lines)) and "received 5 times" in failing
    # AND it does not claim the Scheduler fired the job: the demo invokes it with a fixed time
    assert "Scheduler fires it" not in text and "the demo fires it itself" in text
    # AND the total time is the demo's, on its own line, not a step of stopping the stack
    stopping = next(block for title, block in sections.items() if "Stopping" in title)
    assert "done in" not in stopping
    assert text.rstrip().splitlines()[-1].startswith("The whole demo took ")


def test_demo_fits_an_80_column_terminal(demo: tuple[DemoResult, str]) -> None:
    # GIVEN the demo's printed story in an 80-column terminal, the runs' transcripts with it
    _, text = demo
    lines = text.splitlines()
    assert any(line.lstrip().startswith("step 0: model") for line in lines)
    # THEN no line is wider than the terminal
    wide = [line for line in lines if len(line) > 80]
    assert wide == [], f"{len(wide)} of {len(lines)} lines wider than 80 columns: {wide[:3]}"
    # AND a long command is continued the way a shell reads it, never inside a quoted argument
    assert "--cron \\\n       '0 8 * * ? *'" in text
