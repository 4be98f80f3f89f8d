"""Lambda's asynchronous retries keep their spacing locally, so a duplicate waits for the first copy.

On AWS, Lambda retries a failed asynchronous invocation after about 1 and then 2 minutes. A
duplicate of a cron wake (Scheduler delivers at least once) that finds the first copy still
running is turned away (its idempotency record is in progress, or SessionBusy), or defers itself
while the session is busy; with Lambda's spacing its retry comes after the first copy has
finished and finds the run done. With no spacing (as this local stack had) the duplicate burned
its retries in milliseconds and put a failure record on CronFailureQueue for a run that succeeded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentwake.domain.models import SessionConfig
from agentwake.domain.run_models import Job
from agentwake.store.dynamo import DynamoStore
from agentwake_local import timing
from agentwake_local.async_invoke import AsyncInvoker
from agentwake_local.functions import EventInvokeConfig, FunctionSpec
from agentwake_local.lambda_runtime import Invocation
from agentwake_local.stack import LocalStackRuntime
from tests.support import processes
from tests.support.builders import OK_SCRIPT, local_stack_rules
from tests.support.receiver import CountingReceiver

ROOT = Path(__file__).resolve().parents[2]
AGENTWAKE_BIN = Path(sys.executable).parent / "agentwake"
WAIT_S = 60  # generous bound for every wait on a condition


def test_async_retries_wait_lambdas_spacing_scaled_down_locally() -> None:
    # GIVEN the local stack's default timing, and a function that always fails
    local = timing.local()
    waits: list[float] = []
    function = FunctionSpec("F", "f", "arn:aws:lambda:us-east-1:123456789012:function:f", "h.h", ROOT)
    function.event_invoke_config = EventInvokeConfig(maximum_retry_attempts=2)
    invoker = AsyncInvoker(
        lambda fn, event, request_id, arn: Invocation("F", request_id, error={"errorType": "SessionBusy"}),
        lambda *args: None,
        retry_delays=local.async_retry_delays,
        sleep=waits.append,
    )

    # WHEN an asynchronous invocation exhausts its retries
    outcome = invoker.invoke(function, {})

    # THEN it waited as Lambda does (1 then 2 minutes), divided by the local speed-up
    assert outcome.condition == "RetriesExhausted" and len(outcome.attempts) == 3
    assert waits == [60 / timing.LOCAL_SPEEDUP, 120 / timing.LOCAL_SPEEDUP]
    assert timing.faithful().async_retry_delays == (60.0, 120.0)


@pytest.fixture
def local(tmp_path: Path) -> Iterator[LocalStackRuntime]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AGENTWAKE_HOME", str(tmp_path))
        runtime = LocalStackRuntime(home=tmp_path, timing=timing.local()).start(ROOT / "template.yaml")
        try:
            yield runtime
        finally:
            runtime.stop()


def test_two_concurrent_async_invokes_of_one_cron_wake_give_one_note_and_no_failure(
    local: LocalStackRuntime, tmp_path: Path
) -> None:
    store = DynamoStore(local.outputs["AgentTableName"], client=local.client("dynamodb"))
    with CountingReceiver() as receiver:
        receiver.hold = gate = threading.Event()  # each delivery waits until the test opens the gate
        # GIVEN a job whose session delivers to a webhook that holds the first copy mid-run
        session, job_id = f"session-{uuid.uuid4().hex[:8]}", f"job-{uuid.uuid4().hex[:8]}"
        store.records.put_session(
            SessionConfig(
                session_id=session,
                providers=[{"type": "scripted", "id": "scripted", "script": OK_SCRIPT}],
                delivery={"type": "webhook", "url": receiver.url},
                retry_base_delay_ms=0,
            ),
            local_stack_rules(),  # written from this process, checked by the local stack's rules
        )
        store.records.put_job(Job(job_id=job_id, session_id=session, name="Nightly", schedule_expression="rate(1 day)"))
        event = {"job_id": job_id, "scheduled_time": "2026-11-30T06:00:00Z"}
        event_file = tmp_path / "cron-wake.json"
        event_file.write_text(json.dumps(event))

        # WHEN the first copy runs (another process: `agentwake invoke --async` on this local stack)
        first = processes.start(
            [str(AGENTWAKE_BIN), "invoke", "CronWakeFunction", "--async", "-e", str(event_file)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, "AGENTWAKE_HOME": str(tmp_path)},
        )
        try:
            assert receiver.arrived.wait(WAIT_S), "the first copy never reached its delivery"
            # AND while it holds the session, a duplicate of the same wake is invoked asynchronously
            retry_wait = threading.Event()
            waited: list[float] = []
            assert local.async_invoker is not None
            real_sleep = local.async_invoker._sleep

            def sleep(seconds: float) -> None:
                waited.append(seconds)
                retry_wait.set()
                real_sleep(seconds)

            local.async_invoker._sleep = sleep
            outcome: list[Any] = []

            def run_duplicate() -> None:
                try:
                    outcome.append(local.run_async("CronWakeFunction", event))
                finally:
                    retry_wait.set()  # (without spacing it never waits: it ends at once)

            duplicate = threading.Thread(target=run_duplicate)
            duplicate.start()
            # its first attempt finds the session busy and waits for its retry: let the first copy finish
            assert retry_wait.wait(WAIT_S), "the duplicate never retried"
            gate.set()
            stdout, stderr = first.communicate(timeout=WAIT_S)
            duplicate.join(WAIT_S)
        finally:
            gate.set()
            if first.poll() is None:
                processes.stop(first, signal.SIGKILL)

    # THEN the first copy succeeded, and the duplicate's retry (Lambda's spacing, scaled down) found
    # the run done: both invocations end in Success
    assert first.returncode == 0, stderr
    assert json.loads(stdout)["condition"] == "Success"
    [dup] = outcome
    assert dup.condition == "Success", dup.attempts
    first_attempt = dup.attempts[0]
    if first_attempt.error is not None:
        # turned away by the first copy's idempotency record or lease: retried after Lambda's spacing
        assert first_attempt.error["errorType"] in ("IdempotencyAlreadyInProgressError", "SessionBusy")
        assert waited[0] == timing.local().async_retry_delays[0]
    else:
        # or it found the session busy and deferred itself without spending a retry
        assert first_attempt.response["status"] == "waiting", first_attempt.response
    # AND there is one note, one delivery, and nothing on CronFailureQueue
    notes = [e for e in store.history.history(session) if e.kind == "note"]
    assert [n.run_id for n in notes] == [f"cron:{job_id}:2026-11-30T06:00:00Z"]
    assert len(receiver.received) == 1
    attributes = local.client("sqs").get_queue_attributes(
        QueueUrl=local.outputs["CronFailureQueueUrl"], AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "0"
