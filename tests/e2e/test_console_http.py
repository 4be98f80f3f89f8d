"""``agentwake console`` over plain HTTP (issue 26): every page, the fix loop (replay → redrive with
a confirmation of the exact count) and the console's guards (token, Host, CSRF, escaping), on the
stack's resources on moto. The same pages in a real browser: tests/e2e/test_console_browser.py."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from html import unescape
from typing import Any

import pytest

from agentwake_ops.context import OpsContext, resolve_context
from tests.e2e.conftest import Cli, Stack, cli_json
from tests.e2e.test_ops_dlq import DELIVERS_THEN_FAILS, FIXED, make_failed_background_run
from tests.support.builders import SCRIPTED_ARGS, seed_job
from tests.support.console import ConsoleClient, csrf_of, serving, text_of


@pytest.fixture
def ctx(stack: Stack) -> OpsContext:
    return resolve_context(invoke_async=stack.invoke_async)


@pytest.fixture
def console(ctx: OpsContext) -> Iterator[ConsoleClient]:
    with serving(ctx) as (_, client):
        yield client


def _dead_lettered_run(cli: Cli, stack: Stack, session: str) -> str:
    task_id = make_failed_background_run(cli, stack, session, DELIVERS_THEN_FAILS)
    stack.poll_until_dead_lettered()
    return f"bg:{task_id}"


def _table_items(stack: Stack) -> int:
    return int(stack.store.table.db.scan(TableName=stack.res.table, Select="COUNT")["Count"])


def _rows(page: str, table_class: str) -> list[list[str]]:
    found = re.search(rf"<table class=[\"']{table_class}[\"']>(.*?)</table>", page, re.S)
    assert found, f"no table {table_class}"
    body = found.group(1).split("<tbody>", 1)[1]
    return [
        [text_of(cell).strip() for cell in re.findall(r"<td>(.*?)</td>", row, re.S)]
        for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)
    ]


def test_the_dlq_page_counts_match_dlq_list_and_each_message_shows_its_run_and_reason(
    cli: Cli, stack: Stack, console: ConsoleClient
) -> None:
    # GIVEN two dead-lettered runs of two sessions
    run_a = _dead_lettered_run(cli, stack, "s-web-a")
    run_b = _dead_lettered_run(cli, stack, "s-web-b")
    listed = cli_json(cli, "dlq", "list")

    # WHEN the DLQ page is opened
    page = console.page("/dlq")

    # THEN its counts by error type are those of `dlq list --json`, and by session too
    expected = Counter(m["error_type"] or "-" for m in listed)
    assert {k: int(v) for k, v in _rows(page, "by-error-type")} == dict(expected)
    assert {k: int(v) for k, v in _rows(page, "by-session")} == {"s-web-a": 1, "s-web-b": 1}
    # AND each message row names its run, attempts, last reason; the source of its age is said once above
    age_from = re.search(r"id='age-from'>(.*?)</p>", page, re.S)
    assert age_from and listed[0]["in_dlq_since_source"] in text_of(age_from.group(1))
    for m in listed:
        row = re.search(rf"<tr data-message-id='{m['message_id']}'>(.*?)</tr>", page, re.S)
        assert row, m["message_id"]
        text = text_of(row.group(1))
        assert m["run_id"] in text and m["error_type"] in text and m["in_dlq_since_source"] not in text
        assert m["error"].splitlines()[0][:40] in text
    # AND the filters narrow it (session, error type, text, age)
    assert "1 message(s) match" in console.page("/dlq?session=s-web-a")
    none = console.page("/dlq?error_type=NoSuchType")
    assert "0 message(s) match" in none and "dlq-messages" not in none  # no empty table
    assert "<th>age from</th>" not in page  # one source of age: said once above, no column
    assert "1 message(s) match" in console.page(f"/dlq?text={run_b}")
    assert "0 message(s) match" in console.page("/dlq?older=2d")
    assert {run_a, run_b} <= set(re.findall(r"bg:task-[0-9a-f]+", page))


def _links(page: str, table_class: str) -> list[str]:
    found = re.search(rf"<table class=[\"']{table_class}[\"']>(.*?)</table>", page, re.S)
    assert found, f"no table {table_class}"
    return [unescape(h) for h in re.findall(r'href="([^"]+)"', found.group(1))]


def test_the_counts_link_to_their_filters(cli: Cli, stack: Stack, console: ConsoleClient) -> None:
    # GIVEN two dead-lettered runs of two sessions
    _dead_lettered_run(cli, stack, "s-web-c1")
    _dead_lettered_run(cli, stack, "s-web-c2")
    page = console.page("/dlq")
    # WHEN each count is followed
    by_session = _links(page, "by-session")
    by_type = _links(page, "by-error-type")
    # THEN the session's and the error type's label and count each open the DLQ filtered on it
    assert sorted(set(by_session)) == ["dlq?session=s-web-c1", "dlq?session=s-web-c2"]
    assert set(by_type) == {"dlq?error_type=AllProvidersFailed"} and len(by_type) == 2
    assert "1 message(s) match" in console.page("/" + by_session[0])
    assert "2 message(s) match" in console.page("/" + by_type[0])


def test_the_dlq_and_runs_pages_refresh_themselves_only_when_asked(
    cli: Cli, stack: Stack, console: ConsoleClient
) -> None:
    # GIVEN a dead-lettered run
    _dead_lettered_run(cli, stack, "s-web-refresh")
    for route in ("/dlq", "/runs"):
        # WHEN the page is opened as it is, then through its "refresh" link
        plain = console.page(route + "?session=s-web-refresh")
        [turn_on] = re.findall(r"id='auto-refresh-off'><a href=\"([^\"]+)\"", plain)
        refreshing = console.page("/" + unescape(turn_on))
        # THEN only the second reloads itself (every 30 s, the script skips it while a form is filled),
        # keeps its filter, and links back to the page without it
        assert "data-seconds" not in plain
        marker = re.search(r"id='auto-refresh' data-seconds='30'>(.*?)</p>", refreshing, re.S)
        assert marker and "every 30 s" in text_of(marker.group(1)), route
        assert "session=s-web-refresh" in turn_on and "refresh=1" in turn_on
        [turn_off] = re.findall(r'href="([^"]+)">stop refreshing', refreshing)
        assert "refresh=1" not in unescape(turn_off) and "session=s-web-refresh" in turn_off
        # AND a period of its own (every=N, 5 to 3600 s) is kept by its links; one out of range is 30
        own = console.page(route + "?session=s-web-refresh&refresh=1&every=5")
        assert "data-seconds='5'>" in own and "every=5" in re.findall(r'href="([^"]+)">stop refreshing', own)[0]
        assert "data-seconds='30'>" in console.page(route + "?refresh=1&every=2")


def test_the_message_and_run_pages_show_attempts_deliveries_and_the_timeline_in_order(
    cli: Cli, stack: Stack, console: ConsoleClient
) -> None:
    # GIVEN a run that delivered once, then failed on every attempt until it was dead-lettered
    run_id = _dead_lettered_run(cli, stack, "s-web-t")
    [row] = cli_json(cli, "dlq", "list")

    # WHEN its message page and its run page are opened
    message = console.page(f"/dlq/message?id={row['message_id']}")
    run = console.page(f"/run?id={run_id}")

    # THEN the message page shows the body with the token masked, every attempt with its reason, the delivery
    assert "[MASKED]" in message and "awt_" not in message
    [attempts] = _rows(message, "attempts")  # the two identical failures once, with their count
    assert attempts[:2] == ["1–2", "×2"] and attempts[4] == "AllProvidersFailed"
    assert [d[2] for d in _rows(message, "deliveries")] == ["Working on your research."]
    # AND the run's timeline lists the steps, the delivery and the failures in time order, with the time between
    timeline = _rows(run, "timeline")
    kinds = [r[2] for r in timeline]
    assert kinds.index("reply") < kinds.index("delivery") < kinds.index("failure")
    assert kinds.count("failure") == 1 and kinds[-1] == "outcome"
    [failure] = [r for r in timeline if r[2] == "failure"]
    assert failure[3] == "attempts 1–2 failed the same way ×2: AllProvidersFailed"
    # AND the failure's reason is on the run's page once, not once per attempt and again as the last error
    assert text_of(run).count("All chat models failed") == 1, text_of(run)
    times = [r[0] for r in timeline if r[0] != "-"]
    assert times == sorted(times)
    assert all(r[1].startswith("+") for r in timeline[1:] if r[0] != "-")
    assert "calls send_message_to_user" in run


def test_the_run_page_of_a_succeeded_run_shows_its_final_answer_from_its_note(
    cli: Cli, stack: Stack, console: ConsoleClient
) -> None:
    # GIVEN a dead-lettered run redriven with a fixed provider, which succeeded (its last reply not journaled)
    run_id = _dead_lettered_run(cli, stack, "s-web-note")
    cli("sessions", "put", "s-web-note", "--provider", json.dumps(FIXED))
    cli("dlq", "redrive", "--all")
    assert stack.poll()[1] == []
    # WHEN its run page is opened
    page = text_of(console.page(f"/run?id={run_id}"))
    # THEN its timeline shows the final answer as the note keeps it, before the outcome
    assert "last reply: the final answer as the run's note keeps it" in page and "All done." in page
    assert page.index("All done.") < page.index("succeeded: the run is done")


def test_replay_from_the_page_shows_done_and_writes_nothing(cli: Cli, stack: Stack, console: ConsoleClient) -> None:
    # GIVEN a dead-lettered run and the table's item count
    run_id = _dead_lettered_run(cli, stack, "s-web-r")
    run_page = console.page(f"/run?id={run_id}")
    items = _table_items(stack)

    # WHEN it is replayed from its page with the fixed provider chain
    answer = console.post(
        "/run/replay",
        [("csrf", csrf_of(run_page)), ("id", run_id), ("providers", json.dumps([FIXED])), ("max_steps", "5")],
    )

    # THEN the outcome is DONE, nothing would be re-sent, and nothing was written
    assert answer.status == 200, answer.text[:2000]
    outcome = re.search(r"id='replay-outcome'>(.*?)</p>", answer.text, re.S)
    assert outcome and "DONE" in text_of(outcome.group(1))
    assert _table_items(stack) == items
    # step 0's delivery is reused from the journal, not re-sent: no (empty) table, a line saying so
    assert 'class="would-deliver"' not in answer.text
    assert "nothing new would be delivered" in text_of(answer.text)
    # AND its transcript says in words which steps came from the journal, never Python's True/False
    events = _rows(answer.text, "replay-events")
    assert {e[2] for e in events} == {"from the journal", "new"}
    assert not re.search(r"\b(True|False)\b", text_of(answer.text))
    # AND a provider chain that is not JSON is one clear error, nothing done
    bad = console.post("/run/replay", [("csrf", csrf_of(run_page)), ("id", run_id), ("providers", "[{")])
    assert bad.status == 400 and "error: the provider chain is not valid JSON" in text_of(bad.text)


def test_the_replay_form_is_at_the_top_of_a_run_page(cli: Cli, stack: Stack, console: ConsoleClient) -> None:
    # GIVEN a dead-lettered run
    run_id = _dead_lettered_run(cli, stack, "s-web-top")
    # WHEN its page is opened
    page = console.page(f"/run?id={run_id}")
    # THEN the replay form comes right after the run's facts, before its timeline
    assert page.index("class='facts'") < page.index("id='replay-form'") < page.index('class="timeline"')


def _session_providers(cli: Cli, session: str) -> list[dict[str, Any]]:
    return list(cli_json(cli, "sessions", "show", session)["providers"])


def test_a_proven_replay_is_applied_to_the_session_after_a_confirmation_then_redriven(
    cli: Cli, stack: Stack, console: ConsoleClient
) -> None:
    # GIVEN a dead-lettered run, replayed from its page with the fixed provider chain
    run_id = _dead_lettered_run(cli, stack, "s-web-apply")
    before = _session_providers(cli, "s-web-apply")
    csrf = csrf_of(console.page(f"/run?id={run_id}"))
    proven = console.post("/run/replay", [("csrf", csrf), ("id", run_id), ("providers", json.dumps([FIXED]))])
    assert "DONE" in text_of(proven.text)

    # WHEN its "apply to the session" form is sent
    fields = re.search(
        r"<form method='post' action='run/apply-confirm' id='apply-form'>(.*?)</form>", proven.text, re.S
    )
    assert fields, "a replay that succeeded offers to apply its config"
    form = [(n, unescape(v)) for n, v in re.findall(r'name="([^"]+)" value="([^"]*)"', fields.group(1))]
    confirm = console.post("/run/apply-confirm", form)

    # THEN the confirmation shows the exact change (the providers, now and after), and nothing is written yet
    assert confirm.status == 200, confirm.text[:2000]
    assert "Change 1 setting(s) of session s-web-apply?" in text_of(confirm.text)
    [change] = _rows(confirm.text, "apply-change")
    assert change[0] == "providers"
    assert json.loads(change[1]) == before and json.loads(change[2]) == [FIXED]
    assert _session_providers(cli, "s-web-apply") == before

    # WHEN it is confirmed
    applied = console.post("/run/apply", form)

    # THEN the session holds the replay's providers (as `sessions put` writes them) and the run's
    # message can be redriven from the page, through the console's confirmation of the exact count
    assert applied.status == 200, applied.text[:2000]
    assert "Session s-web-apply updated: providers." in text_of(applied.text)
    assert _session_providers(cli, "s-web-apply") == [FIXED]
    [message] = cli_json(cli, "dlq", "list")
    redrive_form = re.search(r"<form method='post' action='dlq/confirm'>(.*?)</form>", applied.text, re.S)
    assert redrive_form and message["message_id"] in redrive_form.group(1)
    picked = [(n, unescape(v)) for n, v in re.findall(r'name="([^"]+)" value="([^"]*)"', redrive_form.group(1))]
    confirmed = console.post("/dlq/confirm", picked)
    assert "Redrive exactly 1 message(s)?" in text_of(confirmed.text)
    done = console.post("/dlq/redrive", [("csrf", csrf), ("count", "1"), ("id", message["message_id"])])
    assert "Redrove 1 message(s)." in text_of(done.text)
    ok, failed = stack.poll()
    assert len(ok) == 1 and failed == []
    assert cli_json(cli, "runs", "show", run_id)["run"]["status"] == "succeeded"


def test_applying_a_replay_refuses_bad_input_and_writes_nothing(cli: Cli, stack: Stack, console: ConsoleClient) -> None:
    # GIVEN a dead-lettered run and its session's config
    run_id = _dead_lettered_run(cli, stack, "s-web-bad")
    before = cli_json(cli, "sessions", "show", "s-web-bad")
    csrf = csrf_of(console.page(f"/run?id={run_id}"))
    # WHEN a provider chain that is not JSON, a max steps the config refuses, or a failing replay is applied
    not_json = console.post("/run/apply", [("csrf", csrf), ("id", run_id), ("providers", "[{")])
    too_many = console.post("/run/apply", [("csrf", csrf), ("id", run_id), ("max_steps", "500")])
    unknown = console.post("/run/apply-confirm", [("csrf", csrf), ("id", "bg:nope"), ("max_steps", "3")])
    still_failing = console.post("/run/replay", [("csrf", csrf), ("id", run_id), ("max_steps", "4")])
    # THEN each is one clear error (or no offer to apply), and the session is as it was
    assert not_json.status == 400 and "error: the provider chain is not valid JSON" in text_of(not_json.text)
    assert too_many.status == 400 and "error: invalid session config" in text_of(too_many.text)
    assert "max_steps" in text_of(too_many.text)
    assert unknown.status == 400 and "no run 'bg:nope'" in text_of(unknown.text)
    assert "would fail again" in text_of(still_failing.text) and "apply-form" not in still_failing.text
    # AND a chain that went through a page holds a redacted secret, which is never written back as text
    redacted = [{**FIXED, "headers": {"Authorization": "Bearer [REDACTED]"}}]
    hidden_secret = console.post("/run/apply", [("csrf", csrf), ("id", run_id), ("providers", json.dumps(redacted))])
    assert hidden_secret.status == 400 and "holds a hidden secret" in text_of(hidden_secret.text)
    assert cli_json(cli, "sessions", "show", "s-web-bad") == before


def test_redrive_asks_for_the_exact_count_then_moves_exactly_the_selected_and_the_run_succeeds(
    cli: Cli, stack: Stack, console: ConsoleClient
) -> None:
    # GIVEN two dead-lettered runs, and the first one's session fixed
    run_a = _dead_lettered_run(cli, stack, "s-web-f")
    _dead_lettered_run(cli, stack, "s-web-g")
    cli("sessions", "put", "s-web-f", "--provider", json.dumps(FIXED))
    [chosen] = [m for m in cli_json(cli, "dlq", "list") if m["run_id"] == run_a]
    dlq_page = console.page("/dlq")
    csrf = csrf_of(dlq_page)

    # WHEN the first is selected for a redrive
    confirm = console.post("/dlq/confirm", [("csrf", csrf), ("action", "redrive"), ("id", chosen["message_id"])])

    # THEN the confirmation states the exact count, and nothing moved yet
    assert confirm.status == 200
    assert "Redrive exactly 1 message(s)?" in text_of(confirm.text)
    assert stack.counts(stack.res.dlq_url)[0] == 2
    # AND a form whose count does not match what was confirmed does nothing
    wrong = console.post("/dlq/redrive", [("csrf", csrf), ("count", "2"), ("id", chosen["message_id"])])
    assert wrong.status == 400 and stack.counts(stack.res.dlq_url)[0] == 2

    # WHEN it is confirmed
    done = console.post("/dlq/redrive", [("csrf", csrf), ("count", "1"), ("id", chosen["message_id"])])

    # THEN exactly that message moved, and its run then succeeds
    assert done.status == 200, done.text[:2000]
    assert "Redrove 1 message(s)." in text_of(done.text)
    [moved] = _rows(done.text, "moved")
    assert moved[4] == "done" and not re.search(r"\b(True|False)\b", text_of(done.text))
    assert stack.counts(stack.res.dlq_url)[0] == 1
    [left] = cli_json(cli, "dlq", "list")
    assert left["message_id"] != chosen["message_id"]
    ok, failed = stack.poll()
    assert len(ok) == 1 and failed == []
    assert cli_json(cli, "runs", "show", run_a)["run"]["status"] == "succeeded"


def test_a_refused_verify_moves_nothing(cli: Cli, stack: Stack, console: ConsoleClient) -> None:
    # GIVEN a dead-lettered run whose session is not fixed
    _dead_lettered_run(cli, stack, "s-web-v")
    [row] = cli_json(cli, "dlq", "list")
    csrf = csrf_of(console.page("/dlq"))
    # WHEN it is redriven (with --verify semantics)
    done = console.post("/dlq/redrive", [("csrf", csrf), ("count", "1"), ("id", row["message_id"])])
    # THEN the replay still fails, so nothing moved
    assert done.status == 200 and "Nothing was redriven" in text_of(done.text)
    # AND the page shows no empty table of what moved
    assert "<tbody></tbody>" not in done.text and 'class="moved"' not in done.text
    [verdict] = _rows(done.text, "verdicts")
    assert verdict[2] == "would fail again (ERROR)"
    assert stack.counts(stack.res.dlq_url)[0] == 1


def test_delete_and_export_act_on_exactly_the_confirmed_messages(
    cli: Cli, stack: Stack, console: ConsoleClient
) -> None:
    # GIVEN two dead-lettered runs
    _dead_lettered_run(cli, stack, "s-web-d1")
    _dead_lettered_run(cli, stack, "s-web-d2")
    rows = cli_json(cli, "dlq", "list")
    csrf = csrf_of(console.page("/dlq"))
    out = stack.tmp / "console-export.jsonl"
    # WHEN both are exported, then one is deleted after its confirmation
    exported = console.post("/dlq/export", [("csrf", csrf), ("out", str(out))])
    confirm = console.post("/dlq/confirm", [("csrf", csrf), ("action", "delete"), ("id", rows[0]["message_id"])])
    deleted = console.post("/dlq/delete", [("csrf", csrf), ("count", "1"), ("id", rows[0]["message_id"])])
    # THEN the file holds both, and only the deleted one left the DLQ
    assert "Wrote 2 message(s)" in text_of(exported.text) and len(out.read_text().splitlines()) == 3
    assert "Delete exactly 1 message(s)?" in text_of(confirm.text)
    assert "Deleted 1 message(s)." in text_of(deleted.text)
    assert [m["message_id"] for m in cli_json(cli, "dlq", "list")] == [rows[1]["message_id"]]


def test_runs_sessions_jobs_and_charts_pages(cli: Cli, stack: Stack, console: ConsoleClient) -> None:
    # GIVEN a dead-lettered run and a job
    run_id = _dead_lettered_run(cli, stack, "s-web-p")
    seed_job(stack.store, "job-web-p", "s-web-p")
    # WHEN the other pages are opened
    runs = console.page("/runs")
    failed = console.page("/runs?status=failed")
    sessions = console.page("/sessions")
    session = console.page("/sessions?id=s-web-p")
    jobs = console.page("/jobs")
    charts = console.page("/charts")
    # THEN they show the run, the session's config and history, the job's next fires, and the charts
    assert run_id in runs and run_id in failed
    assert "s-web-p" in sessions
    assert "scripted" in session and "Working on your research." in session
    assert "Nightly report" in jobs and "cron(0 6 * * ? *)" in jobs
    assert "<svg" in charts and "AllProvidersFailed: 1" in text_of(charts)
    # (without CloudWatch, on the local stack, the page says where the DLQs' depth over time is kept)
    assert "shown here when the console finds its stack through CloudFormation" in text_of(charts)
    # AND a bad filter is one clear error on the page
    bad = console.get("/runs?status=nope")
    assert bad.status == 400 and "error: status must be one of" in text_of(bad.text)


ALIAS_ARN = "arn:aws:lambda:us-east-1:123456789012:function:agentwake-CronWakeFunction:live"
ROLE_ARN = "arn:aws:iam::123456789012:role/agentwake-SchedulerRole"
HOSTILE = "<script>alert('job')</script>"


def test_the_jobs_page_shows_why_a_job_paused_by_which_run_since_when_and_its_missed_fires(
    cli: Cli, stack: Stack, ctx: OpsContext, console: ConsoleClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from agentwake.clock import SystemClock
    from agentwake.domain.run_models import FailureRecord, JobFire
    from agentwake.wake.job_policies import count_failed_run
    from agentwake.wake.messages import CronWakeInput

    # GIVEN a job (a real schedule on moto) whose three runs in a row failed with a hostile error,
    # counted as the cron wake counts them, so it paused itself
    monkeypatch.setenv("AGENTWAKE_CRON_FUNCTION_ARN", ALIAS_ARN)
    monkeypatch.setenv("AGENTWAKE_SCHEDULER_ROLE_ARN", ROLE_ARN)
    cli("sessions", "put", "s-web-j", *SCRIPTED_ARGS)
    job_id = str(
        cli_json(cli, "jobs", "create", "--session", "s-web-j", "--name", "Digest", "--cron", "0 6 * * ? *")["job_id"]
    )
    deps = SimpleNamespace(store=stack.store, schedules=ctx.jobs.schedules, clock=SystemClock())
    failed = []
    for day in ("2026-11-27", "2026-11-28", "2026-11-29"):
        wake = CronWakeInput(job_id=job_id, scheduled_time=f"{day}T06:00:00Z", session_id="s-web-j")
        failure = FailureRecord(
            run_id=wake.run_id, session_id="s-web-j", attempt=1, error_type="AllProvidersFailed", detail=HOSTILE
        )
        stack.store.ends.record_failure(failure, job_id=job_id, kind="cron")
        count_failed_run(ctx.jobs.get(job_id), wake, deps, RuntimeError(HOSTILE))  # type: ignore[arg-type]
        failed.append(wake.run_id)
    # AND two fires it missed while paused
    missed_times = ["2026-11-30T06:00:00Z", "2026-12-01T06:00:00Z"]
    for at in missed_times:
        stack.store.jobs.record_job_fire(
            JobFire(
                job_id=job_id,
                scheduled_time=at,
                run_id=f"cron:{job_id}:{at}",
                kind="missed",
                reason="the job was paused",
            )
        )
    paused = ctx.jobs.get(job_id)
    assert paused.paused and paused.pause_run_id == failed[-1] and paused.paused_at
    shown = cli_json(cli, "jobs", "show", job_id)

    # WHEN the jobs page and the job's page are opened
    listing = console.page("/jobs")
    page = console.page(f"/jobs?id={job_id}")

    # THEN the list says it is paused and why, since when, by which run, 3 failures in a row, 2 missed fires
    [row] = [r for r in _rows(listing, "jobs") if r[0] == job_id]
    columns = dict(zip(re.findall(r"<th>(.*?)</th>", listing), row, strict=False))
    assert columns["status"] == f"paused: {paused.pause_reason}; last run failed" and HOSTILE in columns["status"]
    assert columns["paused by run"] == failed[-1] and columns["paused since"] == paused.paused_at.replace("T", " ")[:19]
    assert (columns["failures in a row"], columns["missed fires"], columns["skipped fires"]) == ("3", "2", "0")
    # AND the job's page is `jobs show`: the facts, its last runs with their reason, its missed fires
    facts_html = re.search(r"<table class='facts'>(.*?)</table>", page, re.S)
    assert facts_html
    facts_text = " ".join(text_of(facts_html.group(1)).split())
    assert f"paused by run {failed[-1]}" in facts_text and "failures in a row 3 (last: " + failed[-1] in facts_text
    assert [r[0] for r in _rows(page, "job-runs")] == [r["run_id"] for r in shown["runs"]] == failed[::-1]
    assert all(r[1] == "failed" and r[5] == HOSTILE for r in _rows(page, "job-runs"))
    assert [(r[0], r[2]) for r in _rows(page, "missed-fires")] == [
        (t, "the job was paused") for t in missed_times[::-1]
    ]
    assert 'class="skipped-fires"' not in page and "skipped-fires-empty" in page  # no empty table
    # AND every hostile value is text, never markup
    for html_page in (listing, page):
        assert "<script>alert" not in html_page and "&lt;script&gt;alert(&#x27;job&#x27;)&lt;/script&gt;" in html_page


def test_the_sessions_page_lists_every_session_config_even_one_with_no_runs(
    cli: Cli, stack: Stack, console: ConsoleClient
) -> None:
    # GIVEN a session with a run, and two sessions that never ran, one with a hostile persona and a key
    run_session = "s-web-ran"
    _dead_lettered_run(cli, stack, run_session)
    cli("sessions", "put", "s-web-idle", *SCRIPTED_ARGS)
    secret = "sk-live-abcdefghijklmnopqrstuvwx"
    provider = {"type": "scripted", "id": f"<b>{secret}</b>", "script": [{"text": "hi"}]}
    cli("sessions", "put", "s-web-hostile", "--provider", json.dumps(provider), "--persona", HOSTILE)
    listed = cli_json(cli, "sessions", "list")

    # WHEN the sessions page is opened
    page = console.page("/sessions")

    # THEN it lists every config `sessions list` lists, with its providers, those that never ran included
    rows = _rows(page, "sessions")
    assert [r[0] for r in rows] == [c["session_id"] for c in listed]
    assert {"s-web-idle", "s-web-hostile", run_session} <= {r[0] for r in rows}
    assert f"{len(listed)} session(s)" in page
    # AND nothing in it is markup or a secret: the hostile provider id is text, its key masked
    [hostile] = [r for r in rows if r[0] == "s-web-hostile"]
    assert hostile[1].startswith("<b>") and secret not in hostile[1]
    assert "<b>" not in page and "&lt;b&gt;" in page and secret not in page


def test_hostile_html_and_escape_sequences_in_a_body_render_as_text(
    stack: Stack, console: ConsoleClient, cli: Cli
) -> None:
    # GIVEN a DLQ message whose body holds a script tag and an ESC sequence
    body = '{"task_id": "<script>alert(1)</script>", "note": "\x1b[2J\x1b]0;owned\x07"}'
    stack.sqs.send_message(QueueUrl=stack.res.dlq_url, MessageBody=body)
    [row] = cli_json(cli, "dlq", "list")
    # WHEN the DLQ page and the message page are opened
    pages = [console.page("/dlq"), console.page(f"/dlq/message?id={row['message_id']}")]
    # THEN the markup is inert text: no script element from the body, the ESC bytes written out
    for page in pages:
        assert "<script>alert" not in page and "\x1b" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in pages[1]
    assert "\\x1b[2J" in pages[1]


def test_requests_without_the_token_another_host_or_the_csrf_token_are_refused(
    cli: Cli, stack: Stack, console: ConsoleClient
) -> None:
    _dead_lettered_run(cli, stack, "s-web-x")
    [row] = cli_json(cli, "dlq", "list")
    form = [("action", "redrive"), ("id", row["message_id"]), ("count", "1")]
    csrf = csrf_of(console.page("/dlq"))
    answers: dict[str, Any] = {
        "no token": console.get("/dlq", token=False),
        "wrong token": console.get("/nope/dlq", token=False),
        "the token as a query": console.get(f"/dlq?token={console.token}", token=False),
        "the token as a cookie": console.get(
            "/dlq", token=False, headers={"Cookie": f"agentwake_console={console.token}"}
        ),
        "a prefix of the token": console.get(f"/{console.token[:-1]}/dlq", token=False),
        "static without token": console.get("/static/console.js", token=False),
        "other host": console.get("/dlq", host="evil.example:80"),
        "rebinding": console.get("/dlq", host=f"attacker.example:{console.port}"),
        "post without token": console.post("/dlq/redrive", [*form, ("csrf", csrf)], token=False),
        "post without csrf": console.post("/dlq/redrive", form),
        "post from another site": console.post(
            "/dlq/redrive", [*form, ("csrf", csrf)], headers={"Origin": "http://evil.example"}
        ),
    }
    assert {name: a.status for name, a in answers.items()} == dict.fromkeys(answers, 403)
    # AND nothing moved
    assert stack.counts(stack.res.dlq_url)[0] == 1
    # AND no answer sets a cookie (a cookie would reach every port of 127.0.0.1), nor names the token
    assert all("set-cookie" not in a.headers and console.token not in a.text for a in answers.values())
    assert "default-src 'none'" in console.get("/dlq").headers["content-security-policy"]


def test_every_link_form_and_asset_of_a_page_stays_under_the_token(
    cli: Cli, stack: Stack, console: ConsoleClient
) -> None:
    # GIVEN a dead-lettered run, so the pages have rows, links and forms
    run_id = _dead_lettered_run(cli, stack, "s-web-l")
    [row] = cli_json(cli, "dlq", "list")
    # WHEN the console's root and its pages are opened
    root = console.get("/")
    assert root.status == 303 and root.headers["location"] == f"/{console.token}/dlq"
    for route in ("/dlq", f"/dlq/message?id={row['message_id']}", f"/run?id={run_id}", "/runs", "/sessions", "/jobs"):
        page = console.page(route)
        # THEN each page's base is the token's root, and every link, form and asset is relative to it
        assert f"<base href='/{console.token}/'>" in page, route
        targets = re.findall(r"(?:href|action|src)=[\"']([^\"']*)[\"']", page)
        assert targets and all(not t.startswith(("/", "http:", "https:", "//")) for t in targets[1:]), (route, targets)
        # AND every link and asset answers under the token, as a browser resolves it against the base
        for target in set(re.findall(r"(?:href|src)=[\"']([^\"']*)[\"']", page)[1:]):
            assert console.get("/" + unescape(target)).status == 200, (route, target)


def _raw(port: int, data: bytes) -> bytes:
    """Send ``data`` as it is on one connection to the console; its whole answer."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
        conn.sendall(data)
        conn.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_malformed_http_is_a_400_with_no_traceback_and_no_token_in_the_log(
    ctx: OpsContext, capfd: pytest.CaptureFixture[str]
) -> None:
    with serving(ctx) as (console, client):
        host = f"Host: 127.0.0.1:{console.port}\r\n".encode()
        token = console.token.encode()
        # GIVEN requests a browser never sends: a request line of one word, of four words (holding the
        # token), a bad version, control bytes for a method, a header line too long, a form whose
        # length is not a number
        answers = {
            "one word": _raw(console.port, b"GARBAGE\r\n\r\n"),
            "four words": _raw(console.port, b"GET /" + token + b"/dlq HTTP/1.1 extra\r\n" + host + b"\r\n"),
            "bad version": _raw(console.port, b"GET /" + token + b"/dlq HTTP/x.y\r\n" + host + b"\r\n"),
            "control bytes": _raw(console.port, b"\x1b[2J\x00 /\x1b]0;t\x07 HTTP/1.1\r\n\r\n"),
            "header too long": _raw(
                console.port, b"GET /" + token + b"/dlq HTTP/1.1\r\n" + host + b"X: " + b"a" * 70000 + b"\r\n\r\n"
            ),
            "length not a number": _raw(
                console.port,
                b"POST /" + token + b"/dlq/delete HTTP/1.1\r\n" + host + b"Content-Length: lots\r\n\r\ncsrf=x",
            ),
            "length a superscript digit": _raw(
                console.port,
                b"POST /" + token + b"/dlq/delete HTTP/1.1\r\n" + host + b"Content-Length: \xb2\r\n\r\ncsrf=x",
            ),
        }
        # THEN each is answered with a status line, 400 (431 for the header, 501 for a method it does not
        # serve), and a page that says it was refused without echoing the request (so never the token)
        statuses = {name: a.split(b"\r\n", 1)[0] for name, a in answers.items()}
        assert statuses == {
            **dict.fromkeys(answers, b"HTTP/1.0 400 Bad Request"),
            "control bytes": b"HTTP/1.0 501 Not Implemented",
            "header too long": b"HTTP/1.0 431 Request Header Fields Too Large",
        }
        assert all(b"refused: " in a for a in answers.values())
        assert all(token not in a and b"Traceback" not in a for a in answers.values())
        # AND the console still answers a well-formed request
        assert client.get("/dlq").status == 200
    # AND its log holds no traceback, no token, and no control byte
    log = capfd.readouterr().err
    assert "Traceback" not in log and "Exception" not in log and console.token not in log
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", log)
    assert "GET /dlq 200" in log


def test_on_aws_the_charts_read_the_dlq_depth_from_cloudwatch(stack: Stack, ctx: OpsContext) -> None:
    # GIVEN CloudWatch's SQS metric for the results DLQ: at most 3 visible yesterday, 5 today
    from datetime import UTC, datetime, timedelta

    import boto3

    from agentwake_ops.sqs_scan import queue_name

    cloudwatch = boto3.client("cloudwatch", region_name=stack.store.table.db.meta.region_name)
    # (anchored on today's midnight, so the points fall on two UTC days whatever the hour the test runs)
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    noon_before = midnight - timedelta(hours=12)
    points = [(noon_before, 3.0), (noon_before - timedelta(hours=1), 1.0), (midnight, 5.0), (midnight, 2.0)]
    for moment, value in points:
        cloudwatch.put_metric_data(
            Namespace="AWS/SQS",
            MetricData=[
                {
                    "MetricName": "ApproximateNumberOfMessagesVisible",
                    "Dimensions": [{"Name": "QueueName", "Value": queue_name(stack.res.dlq_url)}],
                    "Timestamp": moment,
                    "Value": value,
                }
            ],
        )
    # WHEN the charts page of a console with a CloudWatch client is opened
    with serving(ctx, metrics=cloudwatch) as (_, client):
        page = client.page("/charts")
    # THEN the DLQ depth per day is each day's maximum, from CloudWatch
    chart = page.split("DLQ depth per day (CloudWatch", 1)[1]
    assert "results: 8" in text_of(chart.split("</svg>", 1)[0])
    # AND the page says it shows them (it said it "does not read them")
    assert "are shown below" in text_of(page) and "does not read them" not in text_of(page)


def test_the_console_reads_cloudwatch_only_for_a_stack_found_through_cloudformation(ctx: OpsContext) -> None:
    from dataclasses import replace

    from agentwake_ops.cli_common import CliState
    from agentwake_ops.commands.console import _cloudwatch

    class Ctx:  # what `state(ctx)` asks of typer's context
        def find_object(self, _cls: type) -> CliState:
            return CliState()

    # GIVEN the same resources found three ways WHEN the console picks its metrics client
    local = _cloudwatch(Ctx(), replace(ctx, description="the local stack at http://127.0.0.1:1 (stack x)"))
    env = _cloudwatch(Ctx(), ctx)
    aws = _cloudwatch(Ctx(), replace(ctx, description="CloudFormation stack 'prod' in us-east-1"))
    # THEN only the CloudFormation one reads CloudWatch, in the stack's region
    assert local is None and env is None
    assert aws is not None and aws.meta.service_model.service_name == "cloudwatch"
    assert aws.meta.region_name == ctx.sqs.meta.region_name
