"""A hypothesis state machine over random sequences of crash / retry / duplicate / redrive /
burst / busy session.

Checked after every step: at most one note per run, and none for a run that never reached DONE;
no delivery sent twice (beyond the documented send-before-journal duplicate, which carries the
same delivery id); each delivery in history once; a session's notes are in the order its runs
committed. A wake that finds its session busy goes through the real waiting logic
(``wake.session_wait``, with in-memory queues): it writes nothing and spends no receive, and past
the wait limit it is dead-lettered with a SessionBusy failure. At the end: no message lost — once
providers are fixed and the DLQ redriven, every run succeeds.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from typing import Any

import boto3
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from moto import mock_aws

from agentwake.errors import RunFailed, SessionBusy
from agentwake.settings import Settings, get_settings
from agentwake.store.models import SessionConfig, Task
from agentwake.wake.background import Resend, wait_for_session, wake_for_background_result
from agentwake.wake.messages import BackgroundResultMessage
from agentwake.wake.session_wait import ParkedRecord, WaitState
from agentwake.wake.spec import WakeDeps
from tests.support.aws import REGION, create_resources
from tests.support.faults import BOUNDARIES, FaultyStore
from tests.support.receiver import CountingReceiver
from tests.support.store_writes import acquire_lease
from tests.support.tasks import token_for, token_hash_for

TASKS = ("t0", "t1", "t2", "t3")
SESSION_OF = {"t0": "s0", "t1": "s0", "t2": "s1", "t3": "s0"}
MAX_RECEIVES = 3
#: the stack's SessionWaitLimit in this model (seconds of the model's own clock)
WAIT_LIMIT_S = 60


class Parked:
    """The result queue and the DLQ as the waiting logic sees them: what it sent, in memory."""

    def __init__(self) -> None:
        self.resent: list[dict[str, Any]] = []
        self.dead: list[dict[str, Any]] = []

    def send_later(self, **kw: Any) -> str:
        self.resent.append(kw)
        return f"m{len(self.resent)}"

    def send(self, **kw: Any) -> str:
        self.dead.append(kw)
        return f"d{len(self.dead)}"


class HeldStore:
    """The store as one run sees it: that run, once it holds the session's lease, stops right after
    the write that took it (and counted the attempt) until ``release`` is set. Everything else is
    the store."""

    def __init__(self, inner: FaultyStore, entered: threading.Event, release: threading.Event) -> None:
        self._inner, self._entered, self._release = inner, entered, release

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def begin_run(self, **kw: Any) -> Any:
        # the lease and the attempt are one write: hold the run right after it
        lease = self._inner.begin_run(**kw)
        self._entered.set()
        assert self._release.wait(30), "the burst never released its first run"
        return lease


def script(broken: bool) -> list[dict]:
    send = {"tool_calls": [{"name": "send_message_to_user", "arguments": {"text": "progress"}}]}
    return [send, {"error": "auth"}] if broken else [send, {"text": "done"}]


class DurableRuns(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self._env = {
            k: os.environ.get(k)
            for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AGENTWAKE_TABLE")
        }
        os.environ.update(
            {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": REGION}
        )
        self.mock = mock_aws()
        self.mock.start()
        res = create_resources()
        # the function's environment names its table: the runtime reads its outbound policy from
        # those Settings (the suite's AGENTWAKE_OUTBOUND_ALLOW_*, as on the local stack)
        os.environ["AGENTWAKE_TABLE"] = res.table
        get_settings.cache_clear()
        ddb = boto3.client("dynamodb", region_name=REGION)
        self.store = FaultyStore(res.table, client=ddb)
        self.receiver = CountingReceiver().__enter__()
        self.deps = WakeDeps(
            store=self.store,
            settings=Settings(table_name=res.table, session_wait_limit_s=WAIT_LIMIT_S, session_wait_max_delay_s=30),
        )
        self.now = 1_800_000_000.0  # the model's wall clock, moved by the rules
        self.parked = Parked()
        self.waiting = dict.fromkeys(TASKS, WaitState())
        self.commit_order: dict[str, list[str]] = {"s0": [], "s1": []}
        self.broken = {"s0": False, "s1": False}
        for s in self.broken:
            self._put_session(s)
        for t in TASKS:
            self.store.put_task(
                Task(task_id=t, session_id=SESSION_OF[t], tool_name="job", token_sha256=token_hash_for(t))
            )
        self.where = dict.fromkeys(TASKS, "queue")  # queue | dlq | done
        self.receives = Counter[str]()
        self.resent_allowance = Counter[str]()

    def _put_session(self, session_id: str) -> None:
        self.store.put_session(
            SessionConfig(
                session_id=session_id,
                providers=[{"type": "scripted", "id": "p", "script": script(self.broken[session_id])}],
                delivery={"type": "webhook", "url": self.receiver.url},
                retry_base_delay_ms=0,
            )
        )

    def _message(self, task_id: str) -> BackgroundResultMessage:
        return BackgroundResultMessage(
            task_id=task_id,
            session_id=SESSION_OF[task_id],
            task_token=token_for(task_id),
            tool_name="job",
            status="succeeded",
            result_text="r",
            summary_name="Job",
            finished_at="2026-11-30T05:00:00Z",
        )

    def _attempt(self, task_id: str, crash: str | None, deps: WakeDeps | None = None) -> None:
        self.store.arm(crash)
        try:
            self._settle(task_id, crash, lambda: wake_for_background_result(self._message(task_id), deps or self.deps))
        finally:
            self.store.arm(None)

    def _settle(self, task_id: str, crash: str | None, wake: Any) -> None:
        """Run one receive of the task's message and move it as SQS and the handler would."""
        try:
            outcome = wake()
        except SessionBusy as busy:
            self._wait(task_id, busy)
        except (RunFailed, Exception):
            if crash == "after_send_before_journal" and self.store.armed is None:
                self.resent_allowance[f"bg:{task_id}#0#0"] += 1
            if self.where[task_id] != "done":  # a crash after the commit landed is still a success
                self.receives[task_id] += 1
                if self.receives[task_id] >= MAX_RECEIVES:
                    self.where[task_id] = "dlq"
        else:
            if self.where[task_id] == "done":
                assert outcome.status == "already_succeeded"
            self.where[task_id] = "done"
        self._note_commit(task_id)

    def _note_commit(self, task_id: str) -> None:
        run = self.store.get_run(f"bg:{task_id}")
        if run is not None and run.status == "succeeded":
            self.where[task_id] = "done"
            order = self.commit_order[SESSION_OF[task_id]]
            if f"bg:{task_id}" not in order:
                order.append(f"bg:{task_id}")

    def _wait(self, task_id: str, busy: SessionBusy) -> None:
        """The handler's answer to a busy session: re-send later, or dead-letter past the limit."""
        run_before = self.store.get_run(f"bg:{task_id}")
        record = ParkedRecord(
            body=self._message(task_id).model_dump_json(),
            message_id=f"msg-{task_id}",
            source="arn:aws:sqs:us-east-1:123456789012:results",
            receive_count=str(self.receives[task_id] + 1),
            attributes={},
            state=self.waiting[task_id],
        )
        result = wait_for_session(
            busy, record, store=self.store, settings=self.deps.settings, task_id=task_id, now=lambda: self.now
        )
        result.send(self.parked)  # as the handler does: re-sent (the result queue) or dead-lettered
        status = "waiting" if isinstance(result, Resend) else "dead-lettered"
        run = self.store.get_run(f"bg:{task_id}")
        if status == "waiting":
            # waiting spends no receive and writes nothing for the run
            self.waiting[task_id] = WaitState.from_attributes(self.parked.resent[-1]["wait"])
            assert (run is None) == (run_before is None)
            assert run is None or (run.attempts, run.status) == (run_before.attempts, run_before.status)  # type: ignore[union-attr]
        else:
            assert status == "dead-lettered" and self.parked.dead[-1]["error_type"] == "SessionBusy"
            assert busy.holder and busy.holder in self.parked.dead[-1]["reason"]
            assert self.store.failures(f"bg:{task_id}")[-1].error_type == "SessionBusy"
            self.where[task_id] = "dlq"

    @rule(task=st.sampled_from(TASKS), crash=st.none() | st.sampled_from(BOUNDARIES))
    def receive(self, task: str, crash: str | None) -> None:
        """SQS delivers the message (a first delivery, a retry, or a duplicate copy)."""
        if self.where[task] == "dlq":
            return
        self._attempt(task, crash)

    @rule(task=st.sampled_from(TASKS), pause=st.sampled_from([1.0, 30.0, 90.0]))
    def busy(self, task: str, pause: float) -> None:
        """The task's message arrives while another run (not one of ours) holds its session."""
        if self.where[task] == "dlq":
            return
        self.now += pause
        session = SESSION_OF[task]
        token = acquire_lease(self.store, session, "bg:intruder", 600)
        assert token is not None
        try:
            self._attempt(task, None)
        finally:
            self.store.release_lease(session, token)

    @rule(session=st.sampled_from(["s0", "s1"]))
    def burst(self, session: str) -> None:
        """Every queued task of a session finishes at once: the first holds the session while it
        runs, and each other one finds it busy and waits (no receive spent, no overlap)."""
        queued = [t for t in TASKS if SESSION_OF[t] == session and self.where[t] == "queue"]
        if not queued:
            return
        first, rest = queued[0], queued[1:]
        entered, release = threading.Event(), threading.Event()
        gated = WakeDeps(
            store=HeldStore(self.store, entered, release),  # type: ignore[arg-type]
            settings=self.deps.settings,
        )
        first_result: list[tuple[bool, Any]] = []

        def run_first() -> None:
            try:
                first_result.append((True, wake_for_background_result(self._message(first), gated)))
            except BaseException as exc:  # settled below, in this thread
                first_result.append((False, exc))

        thread = threading.Thread(target=run_first)
        thread.start()
        try:
            assert entered.wait(30), "the first run of the burst never took the session"
            for task in rest:
                before = self.receives[task]
                holders: list[str | None] = []

                def wake(task: str = task, holders: list[str | None] = holders) -> Any:
                    try:
                        return wake_for_background_result(self._message(task), self.deps)
                    except SessionBusy as busy:
                        holders.append(busy.holder)
                        raise

                self._settle(task, None, wake)
                # nobody entered the session while the first run held it, and waiting cost no receive
                assert holders == [f"bg:{first}"], holders
                assert self.receives[task] == before
        finally:
            release.set()
            thread.join(30)

        def first_outcome() -> Any:
            ok, value = first_result[0]
            if not ok:
                raise value
            return value

        self._settle(first, None, first_outcome)

    @rule(session=st.sampled_from(["s0", "s1"]), broken=st.booleans())
    def set_provider(self, session: str, broken: bool) -> None:
        self.broken[session] = broken
        self._put_session(session)

    @precondition(lambda self: "dlq" in self.where.values())
    @rule(data=st.data())
    def redrive(self, data: st.DataObject) -> None:
        task = data.draw(st.sampled_from([t for t, w in self.where.items() if w == "dlq"]))
        self.where[task] = "queue"
        self.receives[task] = 0
        self.waiting[task] = WaitState()  # a redrive drops agentwake's attributes: the wait restarts

    @invariant()
    def at_most_one_note_and_only_for_done_runs(self) -> None:
        for session in ("s0", "s1"):
            history = self.store.history(session)
            notes = Counter(e.run_id for e in history if e.kind == "note")
            assert all(n == 1 for n in notes.values()), notes
            for run_id in notes:
                assert self.store.get_run(run_id).status == "succeeded"  # type: ignore[union-attr]
            delivered = Counter(e.delivery_id for e in history if e.kind == "delivery")
            assert all(n == 1 for n in delivered.values()), delivered
        for task in TASKS:
            run = self.store.get_run(f"bg:{task}")
            has_note = any(e.run_id == f"bg:{task}" and e.kind == "note" for e in self.store.history(SESSION_OF[task]))
            assert has_note == (run is not None and run.status == "succeeded")

    @invariant()
    def history_order_follows_run_order(self) -> None:
        for session, order in self.commit_order.items():
            notes = [e.run_id for e in self.store.history(session) if e.kind == "note"]
            assert notes == order, (session, notes, order)

    @invariant()
    def no_delivery_sent_twice(self) -> None:
        for delivery_id, n in self.receiver.by_delivery_id().items():
            assert n <= 1 + self.resent_allowance[delivery_id], (delivery_id, n)

    def teardown(self) -> None:
        try:
            # no message lost: fix every provider, redrive the DLQ, and every run succeeds
            for s in self.broken:
                self.broken[s] = False
                self._put_session(s)
            for task in TASKS:
                if self.where[task] != "done":
                    self.where[task] = "queue"
                    self.waiting[task] = WaitState()
                    self._attempt(task, None)
                assert self.where[task] == "done", task
                self.history_order_follows_run_order()
                self.at_most_one_note_and_only_for_done_runs()
        finally:
            self.receiver.__exit__(None, None, None)
            self.mock.stop()
            for k, v in self._env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            get_settings.cache_clear()


DurableRuns.TestCase.settings = settings(
    max_examples=int(os.environ.get("AGENTWAKE_HYPOTHESIS_EXAMPLES", "15")),
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestDurableRuns = DurableRuns.TestCase
