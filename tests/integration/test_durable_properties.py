"""A hypothesis state machine over random sequences of crash / retry / duplicate / redrive.

Checked after every step: at most one note per run, and none for a run that never reached DONE;
no delivery sent twice (beyond the documented send-before-journal duplicate, which carries the
same delivery id); each delivery in history once. At the end: no message lost — once providers
are fixed and the DLQ redriven, every run succeeds.
"""

from __future__ import annotations

import os
from collections import Counter

import boto3
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from moto import mock_aws

from agentwake.errors import RunFailed
from agentwake.settings import Settings
from agentwake.store.idempotency import run_idempotency
from agentwake.store.models import SessionConfig, Task
from agentwake.wake.background import wake_for_background_result
from agentwake.wake.messages import BackgroundResultMessage
from agentwake.wake.run import WakeDeps
from tests.support.aws import REGION, create_resources
from tests.support.faults import BOUNDARIES, FaultyStore
from tests.support.receiver import CountingReceiver
from tests.support.tasks import token_for, token_hash_for

TASKS = ("t0", "t1", "t2")
SESSION_OF = {"t0": "s0", "t1": "s0", "t2": "s1"}
MAX_RECEIVES = 3


def script(broken: bool) -> list[dict]:
    send = {"tool_calls": [{"name": "send_message_to_user", "arguments": {"text": "progress"}}]}
    return [send, {"error": "auth"}] if broken else [send, {"text": "done"}]


class DurableRuns(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self._env = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
        os.environ.update(
            {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": REGION}
        )
        self.mock = mock_aws()
        self.mock.start()
        res = create_resources()
        ddb = boto3.client("dynamodb", region_name=REGION)
        self.store = FaultyStore(res.table, client=ddb)
        self.receiver = CountingReceiver().__enter__()
        self.deps = WakeDeps(
            store=self.store,
            settings=Settings(table_name=res.table),
            idempotency=run_idempotency(res.idempotency_table, client=ddb),
        )
        self.broken = {"s0": False, "s1": False}
        for s in self.broken:
            self._put_session(s)
        for t in TASKS:
            self.store.put_task(Task(task_id=t, session_id=SESSION_OF[t], tool_name="job", token_sha256=token_hash_for(t)))
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

    def _attempt(self, task_id: str, crash: str | None) -> None:
        self.store.arm(crash)
        try:
            outcome = wake_for_background_result(self._message(task_id), self.deps)
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
        finally:
            self.store.arm(None)
        run = self.store.get_run(f"bg:{task_id}")
        if run is not None and run.status == "succeeded":
            self.where[task_id] = "done"

    @rule(task=st.sampled_from(TASKS), crash=st.none() | st.sampled_from(BOUNDARIES))
    def receive(self, task: str, crash: str | None) -> None:
        """SQS delivers the message (a first delivery, a retry, or a duplicate copy)."""
        if self.where[task] == "dlq":
            return
        self._attempt(task, crash)

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
                    self._attempt(task, None)
                assert self.where[task] == "done", task
                self.at_most_one_note_and_only_for_done_runs()
        finally:
            self.receiver.__exit__(None, None, None)
            self.mock.stop()
            for k, v in self._env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


DurableRuns.TestCase.settings = settings(
    max_examples=int(os.environ.get("AGENTWAKE_HYPOTHESIS_EXAMPLES", "15")),
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestDurableRuns = DurableRuns.TestCase
