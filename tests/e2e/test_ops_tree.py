"""Operators see the tree (issue 33, item 6): ``runs show`` links a run to the run that started its
task or job and to the tasks and wakes it started; ``tasks show`` links a task both ways; ``runs list
--session S --tree`` prints the session's runs as a tree; the console's run and task pages link them.

The records are put as the start and create paths write them (``Task.started_by``, ``Job.created_by_run``
through ``Records.put_task`` / ``put_job``, runs with the keys the wake writes), on the stack's table
on moto."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentwake.domain.models import Task
from agentwake.domain.run_models import Job, RunRecord
from agentwake.store.dynamo import DynamoStore
from agentwake.store.keys import run_key, runs_by_day_set, runs_gsi_pk, runs_gsi_sk
from agentwake_ops.context import OpsContext, resolve_context
from agentwake_ops.tree import run_links, session_tree
from tests.e2e.conftest import Cli, Stack, cli_json
from tests.support.console import ConsoleClient, serving, text_of
from tests.support.probes import DynamoCalls

SESSION = "s-tree"
ROOT = "cron:daily-digest:2026-12-01T09:00:00Z"
FOLLOW_UP = "cron:follow-up:2026-12-01T10:00:00Z"
CALL = f"{ROOT}#001#00"
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def _at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _put_run(store: DynamoStore, run_id: str, kind: str, status: str, minutes: float, **kw: Any) -> None:
    """A run record with the index keys the wake's attempt write gives it."""
    started = _at(minutes)
    run = RunRecord(run_id=run_id, kind=kind, session_id=SESSION, status=status, started_at=started, attempts=1, **kw)  # type: ignore[arg-type]
    _, by_day = runs_by_day_set(started, run_id)
    store.table.db.put_item(
        TableName=store.table.name,
        Item=store.table.item(
            run,
            *run_key(run_id),
            gsi3pk=runs_gsi_pk(SESSION),
            gsi3sk=runs_gsi_sk(started, run_id),
            gsi4pk=by_day[":g4pk"]["S"],
            gsi4sk=by_day[":g4sk"]["S"],
        ),
    )


def seed_tree(store: DynamoStore) -> None:
    """A cron run that hands research to a background subagent (failed, redriven, then succeeded:
    outcome 2), starts a background tool whose URL was refused, and schedules a follow-up wake;
    the subagent's second wake started a tool task that was cancelled; and a product task apart."""
    _put_run(store, ROOT, "cron", "succeeded", 0)
    store.records.put_task(
        Task(
            task_id="t-research",
            session_id=SESSION,
            tool_name="researcher",
            kind="subagent",
            subagent="researcher",
            started_by=ROOT,
            started_by_call=CALL,
            deadline_at=_at(60),
            outcome="succeeded",
            outcomes=2,
            status="woken",
            late_completions=1,
            created_at=_at(1),
        )
    )
    store.records.put_task(
        Task(
            task_id="t-fetch",
            session_id=SESSION,
            tool_name="fetch_page",
            kind="tool",
            started_by=ROOT,
            started_by_call=f"{ROOT}#001#01",
            outcome="failed",
            outcome_reason="refused URL http://169.254.169.254/: a link-local address\nmore detail",
            outcomes=1,
            status="woken",
            created_at=_at(2),
        )
    )
    store.records.put_job(
        Job(
            job_id="follow-up",
            session_id=SESSION,
            name="check the deploy",
            schedule_expression="at(2026-12-01T10:00:00)",
            run_once=True,
            origin="agent",
            created_by_run=ROOT,
            created_by_call=f"{ROOT}#002#00",
            note="check the deploy again; tell the user if it is still red",
            created_at=_at(3),
        )
    )
    _put_run(store, "sub:t-research", "subagent", "succeeded", 4)
    _put_run(store, "bg:t-research", "background", "succeeded", 5)
    _put_run(store, "bg:t-fetch", "background", "succeeded", 6)
    _put_run(store, "bg:t-research:2", "background", "succeeded", 30)
    store.records.put_task(
        Task(
            task_id="t-cancel",
            session_id=SESSION,
            tool_name="slow_export",
            kind="tool",
            started_by="bg:t-research:2",
            started_by_call="bg:t-research:2#000#00",
            status="cancelled",
            cancelled_at=_at(31),
            outcome="failed",
            outcome_reason="cancelled by the operator",
            created_at=_at(31),
        )
    )
    _put_run(store, FOLLOW_UP, "cron", "succeeded", 60)
    store.records.put_task(Task(task_id="t-product", session_id=SESSION, tool_name="import", created_at=_at(70)))
    _put_run(store, "bg:t-product", "background", "failed", 71, last_error_type="ProviderError")


@pytest.fixture
def tree(stack: Stack) -> Stack:
    seed_tree(stack.store)
    return stack


def _narrow(cli: Cli, monkeypatch: pytest.MonkeyPatch, *args: str) -> str:
    monkeypatch.setenv("COLUMNS", "80")
    out = str(cli(*args).stdout)
    assert max(len(line) for line in out.splitlines()) <= 80, out
    return out


def test_runs_show_lists_the_tasks_and_wakes_a_run_started_in_80_columns(
    cli: Cli, tree: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # WHEN the cron run that started two tasks and scheduled a wake is shown at 80 columns
    out = _narrow(cli, monkeypatch, "runs", "show", ROOT)
    # THEN it lists each task with its kind, its outcome and the runs it caused, and the wake
    assert "tasks this run started (2)" in out and "wakes this run scheduled (1)" in out
    for text in ("t-research", "t-fetch", "sub:t-research", "bg:t-research:2", "bg:t-fetch", "follow-up"):
        assert text in out, text
    assert "failed: refused" in out and "more detail" not in out  # the reason's first line only
    assert "started by" not in out  # an operator's job started this run: nothing above it


def test_runs_show_json_carries_the_links(cli: Cli, tree: Stack) -> None:
    # WHEN the root, a subagent run, a wake of a task and a fire of an agent's wake are shown as JSON
    root = cli_json(cli, "runs", "show", ROOT)["links"]
    sub = cli_json(cli, "runs", "show", "sub:t-research")["links"]
    wake2 = cli_json(cli, "runs", "show", "bg:t-research:2")["links"]
    fire = cli_json(cli, "runs", "show", FOLLOW_UP)["links"]
    # THEN the root lists what it started, in the order it started them, with each task's wake runs
    assert [t["task_id"] for t in root["started_tasks"]] == ["t-research", "t-fetch"]
    research = root["started_tasks"][0]
    assert research["sub_run"] == {"run_id": "sub:t-research", "status": "succeeded"}
    assert [r["run_id"] for r in research["wake_runs"]] == ["bg:t-research", "bg:t-research:2"]
    assert root["started_tasks"][1]["outcome"] == "failed"
    assert [j["job_id"] for j in root["started_jobs"]] == ["follow-up"]
    assert root["started_jobs"][0]["note"].startswith("check the deploy again")
    assert root["started_by"] is None
    # AND a subagent run names the run (and call) that started its task and the wakes it caused
    assert sub["started_by"] == ROOT and sub["started_by_call"] == CALL
    assert [r["run_id"] for r in sub["caused_wakes"]] == ["bg:t-research", "bg:t-research:2"]
    # AND the second wake of that task links back to the same starter, and to the task it cancelled
    assert wake2["started_by"] == ROOT and wake2["task"]["task_id"] == "t-research"
    assert [t["task_id"] for t in wake2["started_tasks"]] == ["t-cancel"]
    assert wake2["started_tasks"][0]["wake_runs"] == [{"run_id": "bg:t-cancel", "status": None}]
    # AND a fire of the wake the agent scheduled names its job and the run that created it
    assert fire["job_id"] == "follow-up" and fire["started_by"] == ROOT
    # AND a product task's wake has no starter
    assert cli_json(cli, "runs", "show", "bg:t-product")["links"]["started_by"] is None


def test_runs_show_of_a_subagent_run_names_its_starter_and_the_wake_it_caused(
    cli: Cli, tree: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _narrow(cli, monkeypatch, "runs", "show", "sub:t-research")
    assert ROOT in out and CALL in out
    assert "wake it caused" in out and "bg:t-research:2 (succeeded)" in out
    assert "This run started no task and scheduled no wake." in out


def test_tasks_show_links_the_starting_run_the_subagent_run_and_both_wakes(
    cli: Cli, tree: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # WHEN a subagent task that succeeded after a redrive is shown at 80 columns and as JSON
    out = _narrow(cli, monkeypatch, "tasks", "show", "t-research")
    data = cli_json(cli, "tasks", "show", "t-research")
    # THEN it names the starting run and call, its subagent's run, both wake runs, its deadline,
    # its outcome and its late completion
    for text in (ROOT, "sub:t-research (succeeded)", "bg:t-research:2 (succeeded)", "succeeded after a redrive"):
        assert text in out, text
    assert "2026-12-01 10:00:00" in out  # the deadline
    links = data["links"]
    assert links["started_by"] == ROOT and links["started_by_call"] == CALL
    assert links["started_by_status"] == "succeeded"
    assert links["sub_run"]["run_id"] == "sub:t-research"
    assert [r["run_id"] for r in links["wake_runs"]] == ["bg:t-research", "bg:t-research:2"]
    assert links["late_completions"] == 1 and links["deadline_at"] == _at(60)
    assert data["run_id"] == "bg:t-research:2" and data["run_status"] == "succeeded"
    # AND a cancelled task says it wakes nothing, and when it was cancelled and why
    cancelled = _narrow(cli, monkeypatch, "tasks", "show", "t-cancel")
    assert "none (cancelled)" in cancelled and "2026-12-01 09:31:00" in cancelled
    assert "cancelled by the operator" in cancelled


def _tree_lines(out: str) -> list[tuple[int, str]]:
    """(depth, first word after the guides) of each line of the tree."""
    lines = []
    for line in out.splitlines():
        stripped = line.lstrip(" │├└─┣┗┃━")
        depth = (len(line) - len(stripped)) // 4
        if stripped and not line.startswith(("session ", "Show one")):
            lines.append((depth, stripped))
    return lines


def test_runs_list_tree_prints_the_session_as_a_tree_in_80_columns(
    cli: Cli, tree: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # WHEN the session's runs are listed as a tree at 80 columns
    out = _narrow(cli, monkeypatch, "runs", "list", "--session", SESSION, "--tree")
    # THEN each run is under the task or wake that caused it, each task and wake under the run that
    # started it, oldest first at every level; the product's task's run is a root of its own
    expected = [
        (0, ROOT),
        (1, "task t-research  subagent researcher  succeeded after a redrive"),
        (2, "sub:t-research  succeeded"),
        (2, "bg:t-research  succeeded"),
        (2, "bg:t-research:2  succeeded"),
        (3, "task t-cancel  tool slow_export  cancelled"),
        (1, "task t-fetch  tool fetch_page  failed: refused URL"),
        (2, "bg:t-fetch  succeeded"),
        (1, "wake follow-up  once at(2026-12-01T10:00:00)  scheduled, fired 0"),
        (2, FOLLOW_UP),
        (0, "bg:t-product  failed"),
    ]
    got = [(d, text) for d, text in _tree_lines(out) if text.split()[0] in ("task", "wake") or ":" in text.split()[0]]
    assert [(d, t[: len(e)]) for (d, t), (_, e) in zip(got, expected, strict=False)] == expected, out
    assert len(got) == len(expected), out
    assert "ProviderError" in out and "note:" in out


def test_runs_list_tree_json_nests_runs_tasks_and_wakes(cli: Cli, tree: Stack) -> None:
    data = cli_json(cli, "runs", "list", "--session", SESSION, "--tree")
    roots = data["tree"]
    assert [r["id"] for r in roots] == [ROOT, "bg:t-product"] and data["runs_listed"] == 7
    research, fetch, wake = roots[0]["children"]
    assert (research["kind"], fetch["kind"], wake["kind"]) == ("task", "task", "job")
    assert research["task"]["kind"] == "subagent" and fetch["task"]["outcome"] == "failed"
    assert wake["job"]["origin"] == "agent" and wake["job"]["created_by_run"] == ROOT
    assert [c["id"] for c in research["children"]] == ["sub:t-research", "bg:t-research", "bg:t-research:2"]
    assert [c["id"] for c in research["children"][2]["children"]] == ["t-cancel"]
    assert [c["id"] for c in wake["children"]] == [FOLLOW_UP]


def test_runs_list_tree_needs_a_session_and_says_so(cli: Cli, tree: Stack) -> None:
    result = cli("runs", "list", "--tree", expect=None)
    assert result.exit_code != 0 and "--tree needs --session" in result.stderr
    result = cli("runs", "list", "--session", SESSION, "--tree", "--status", "failed", expect=None)
    assert result.exit_code != 0 and "--tree takes only --session and --limit" in result.stderr


def test_a_run_cut_from_the_page_leaves_its_children_as_roots_that_name_their_starter(cli: Cli, tree: Stack) -> None:
    # WHEN only the newest runs fit the page (the root cron run is older than them)
    data = cli_json(cli, "runs", "list", "--session", SESSION, "--tree", "--limit", "3")
    # THEN a listed run whose starter is not listed is a root that says which run started it
    roots = {r["id"]: r for r in data["tree"]}
    assert set(roots) == {"bg:t-research:2", FOLLOW_UP, "bg:t-product"}
    assert roots[FOLLOW_UP]["started_by"] == ROOT and roots["bg:t-research:2"]["started_by"] == ROOT
    assert roots["bg:t-product"]["started_by"] is None


def test_the_links_of_a_run_cost_the_same_few_calls_whatever_the_table_holds(tree: Stack) -> None:
    # GIVEN 300 more tasks, started by other runs of this and other sessions
    store = tree.store
    for i in range(300):
        store.records.put_task(
            Task(
                task_id=f"other-{i}",
                session_id=SESSION if i % 2 else f"s-other-{i % 7}",
                tool_name="x",
                started_by=f"bg:elsewhere-{i}",
            )
        )
    calls = DynamoCalls(store.table.db)
    root = store.records.get_run(ROOT)
    assert root is not None
    # WHEN the links of the root run are read
    links = calls.during(lambda: run_links(store, root))
    # THEN: the job it is a fire of, one Query of what it started, one batch read of the runs named
    assert links == ["GetItem", "Query", "BatchGetItem"], links
    # AND the session's tree is read without a Scan either
    tree_calls = calls.during(lambda: session_tree(store, SESSION))
    # (its runs: the keys-only gsi3's Query, their items' batch read, gsi1's Query for runs written
    # before gsi3; everything its runs started; the runs named that are not listed)
    assert tree_calls == ["Query", "BatchGetItem", "Query", "Query", "BatchGetItem"], tree_calls


# --------------------------------------------------------------------------------------------
# the console


@pytest.fixture
def console(tree: Stack) -> Iterator[ConsoleClient]:
    ctx: OpsContext = resolve_context(invoke_async=tree.invoke_async)
    with serving(ctx) as (_, client):
        yield client


def _hrefs(page: str) -> list[str]:
    import re
    from html import unescape

    return [unescape(h) for h in re.findall(r'href="([^"]+)"', page)]


def test_a_run_page_links_to_the_tasks_and_wakes_it_started_and_to_its_starter(console: ConsoleClient) -> None:
    from urllib.parse import urlencode

    # WHEN the root run's page is opened
    root = console.page("/run?" + urlencode({"id": ROOT}))
    hrefs = _hrefs(root)
    # THEN it links to each task it started, to the runs they caused, and to the wake it scheduled
    assert "task?id=t-research" in hrefs and "task?id=t-fetch" in hrefs
    assert "run?" + urlencode({"id": "bg:t-research:2"}) in hrefs
    assert "jobs?id=follow-up" in hrefs
    assert "refused URL" in text_of(root)
    # AND a subagent run's page links to the run that started its task, the task, and the wake it caused
    sub = _hrefs(console.page("/run?" + urlencode({"id": "sub:t-research"})))
    assert "run?" + urlencode({"id": ROOT}) in sub and "task?id=t-research" in sub
    assert "run?" + urlencode({"id": "bg:t-research"}) in sub
    # AND a fire of the agent's wake links to its job and to the run that created it
    fire = _hrefs(console.page("/run?" + urlencode({"id": FOLLOW_UP})))
    assert "jobs?id=follow-up" in fire and "run?" + urlencode({"id": ROOT}) in fire


def test_a_task_page_links_both_ways(console: ConsoleClient) -> None:
    from urllib.parse import urlencode

    page = console.page("/task?id=t-research")
    hrefs = _hrefs(page)
    for run_id in (ROOT, "sub:t-research", "bg:t-research", "bg:t-research:2"):
        assert "run?" + urlencode({"id": run_id}) in hrefs, run_id
    assert "succeeded after a redrive" in text_of(page)
    # AND a task whose wake has not run names it without a link to a page that does not exist
    cancelled = console.page("/task?id=t-cancel")
    assert "run?" + urlencode({"id": "bg:t-cancel"}) not in _hrefs(cancelled)
    assert "none (cancelled)" in text_of(cancelled)
    # AND an unknown task says so
    assert "no task 'nope'" in text_of(console.get("/task?id=nope").text)


def test_tree_links_in_json_name_no_token(cli: Cli, tree: Stack) -> None:
    # a task whose arguments carry a task token: never shown by tasks show's links or runs show
    token = "awt_" + "x" * 43
    tree.store.records.put_task(
        Task(task_id="t-secret", session_id=SESSION, tool_name="x", tool_args={"task_token": token}, started_by=ROOT)
    )
    for args in (
        ("runs", "show", ROOT),
        ("tasks", "show", "t-secret"),
        ("runs", "list", "--session", SESSION, "--tree"),
    ):
        assert token not in json.dumps(cli_json(cli, *args)), args


def _tree_links(page: str) -> list[tuple[int, str]]:
    """(depth of <ul> nesting, href) of each link inside the page's tree."""
    from html.parser import HTMLParser

    found: list[tuple[int, str]] = []

    class Tree(HTMLParser):
        depth = 0

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag == "ul":
                self.depth += 1
            elif tag == "a" and self.depth:
                found.append((self.depth - 1, dict(attrs)["href"] or ""))

        def handle_endtag(self, tag: str) -> None:
            if tag == "ul":
                self.depth -= 1

    Tree().feed(page)
    return found


def test_the_tree_page_nests_each_run_task_and_wake_linked_to_its_page(console: ConsoleClient) -> None:
    from urllib.parse import urlencode

    # GIVEN the runs page of the session links to its tree
    assert "tree?session=s-tree" in _hrefs(console.page("/runs?session=s-tree"))
    # WHEN the tree page is opened
    links = _tree_links(console.page("/tree?session=s-tree"))

    def run(run_id: str) -> str:
        return "run?" + urlencode({"id": run_id})

    # THEN it nests as the CLI's tree does, each node linked to its own page
    assert links == [
        (0, run(ROOT)),
        (1, "task?id=t-research"),
        (2, run("sub:t-research")),
        (2, run("bg:t-research")),
        (2, run("bg:t-research:2")),
        (3, "task?id=t-cancel"),
        (1, "task?id=t-fetch"),
        (2, run("bg:t-fetch")),
        (1, "jobs?id=follow-up"),
        (2, run(FOLLOW_UP)),
        (0, run("bg:t-product")),
    ]
    # AND a bad limit is a clear error
    answer = console.get("/tree?session=s-tree&limit=0")
    assert answer.status == 400 and "limit must be a whole number from 1 to 1000" in text_of(answer.text)
