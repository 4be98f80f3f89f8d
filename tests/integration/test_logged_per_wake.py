"""What a wake logs, through the deployed BackgroundResultFunction handler (issue 37: bytes logged
are billed by CloudWatch Logs). A batch prints one EMF line a provider for all its records' tokens
(each record's tokens a value of it), one line of the invocation's other metrics, and per record its
outcome line: run id, message, session, outcome, error — without the keys every line of the log
group repeats (the function's name, ARN and memory)."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from agentwake.handlers import background_result
from agentwake.observability import SAME_ON_EVERY_LINE, metrics
from agentwake.store.dynamo import DynamoStore
from tests.integration.test_wake_handlers import result_body, sqs_record
from tests.support.aws import FakeLambdaContext
from tests.support.builders import seed_session, seed_task

ONE_STEP = [{"text": "Nothing to tell the user."}]


def _emf(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith('{"_aws"')]


def test_a_batch_logs_one_token_line_a_provider_and_each_records_outcome_with_its_keys(
    side_by_side: None, store: DynamoStore, log_lines: io.StringIO, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN three sessions of one provider whose agents answer in one step, and one whose provider fails
    for s in ("s0", "s1", "s2"):
        seed_session(store, s, providers=[{"type": "scripted", "id": "p", "script": ONE_STEP}], deliver_final="never")
    seed_session(store, "bad", providers=[{"type": "scripted", "id": "p", "script": [{"error": "validation"}]}])
    for s in ("s0", "s1", "s2", "bad"):
        seed_task(store, f"t-{s}", s)
    records = [sqs_record(result_body(f"t-{s}", s), message_id=f"m-{s}") for s in ("s0", "s1", "s2", "bad")]
    metrics.flush_metrics()  # what earlier wakes of this process ran outside a handler left (the tests')
    capsys.readouterr()
    # WHEN the handler takes them in one invocation
    answer = background_result.handler({"Records": records}, FakeLambdaContext())
    assert answer == {"batchItemFailures": [{"itemIdentifier": "m-bad"}]}
    emf = _emf(capsys.readouterr().out)
    # THEN the tokens of the three runs that called the model are one line of provider p, a value each
    [tokens] = [b for b in emf if "provider" in b]
    assert tokens["provider"] == "p" and ["provider", "service"] in tokens["_aws"]["CloudWatchMetrics"][0]["Dimensions"]
    assert len(tokens["InputTokens"]) == len(tokens["OutputTokens"]) == 3 and min(tokens["InputTokens"]) > 0
    # AND the invocation's other metrics are one line without the provider dimension, a value a record
    [other] = [b for b in emf if "provider" not in b]
    assert other["RunSucceeded"] == [1.0, 1.0, 1.0] and sorted(other["Steps"]) == [0.0, 1.0, 1.0, 1.0]
    assert len(emf) == 2
    # AND each record's outcome is logged with its run, message and session; the failure with its error
    lines = [json.loads(line) for line in log_lines.getvalue().splitlines() if line.startswith('{"level"')]
    succeeded = sorted(
        (line["run_id"], line["message_id"], line["session_id"]) for line in lines if line["message"] == "run succeeded"
    )
    assert succeeded == [(f"bg:t-{s}", f"m-{s}", s) for s in ("s0", "s1", "s2")]
    failed = [line for line in lines if line.get("run_id") == "bg:t-bad" and line["level"] in ("WARNING", "ERROR")]
    assert failed and any("ValidationError" in json.dumps(line) for line in failed), lines
    # AND every line names its invocation (as Lambda's REPORT line does) and none repeats what the log
    # group says on every line
    assert all(line["function_request_id"] == FakeLambdaContext.aws_request_id for line in lines)
    assert not [line for line in lines if set(SAME_ON_EVERY_LINE) & set(line)]


def test_token_lines_are_printed_once_by_the_invocations_flush(capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN two runs' tokens of two providers added outside any handler
    from agentwake.observability import add_provider_metrics

    metrics.flush_metrics()  # (what earlier tests' wakes left)
    capsys.readouterr()
    add_provider_metrics("a", {"InputTokens": 10, "OutputTokens": 1})
    add_provider_metrics("b", {"InputTokens": 20, "OutputTokens": 2})
    add_provider_metrics("a", {"InputTokens": 30, "OutputTokens": 3})
    assert _emf(capsys.readouterr().out) == []  # nothing printed before the flush
    # WHEN the invocation's metrics are flushed (metrics.log_metrics does it as the handler returns)
    metrics.flush_metrics()
    emf = {b["provider"]: (b["InputTokens"], b["OutputTokens"]) for b in _emf(capsys.readouterr().out)}
    # THEN one line a provider, each with its values
    assert emf == {"a": ([10.0, 30.0], [1.0, 3.0]), "b": ([20.0], [2.0])}
    # AND a second flush prints none of them again
    metrics.flush_metrics()
    assert [b for b in _emf(capsys.readouterr().out) if "provider" in b] == []


def test_a_provider_line_that_cannot_be_printed_fails_no_invocation(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN tokens of a provider whose line's flush raises
    from aws_lambda_powertools.metrics import EphemeralMetrics

    from agentwake.observability import add_provider_metrics

    metrics.flush_metrics()
    capsys.readouterr()
    add_provider_metrics("a", {"InputTokens": 10, "OutputTokens": 1})

    def broken(self: Any, *args: Any, **kwargs: Any) -> None:
        raise ValueError("injected")

    monkeypatch.setattr(EphemeralMetrics, "flush_metrics", broken)
    # WHEN the invocation's metrics are flushed THEN the flush returns (the error is logged, not raised)
    metrics.flush_metrics()
    monkeypatch.undo()
    # AND the line is gone: the next flush does not try it again
    metrics.flush_metrics()
    assert [b for b in _emf(capsys.readouterr().out) if "provider" in b] == []
