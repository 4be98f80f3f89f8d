"""Build 5: items are bounded by their size in bytes as DynamoDB counts them. An answer or a tool
argument too big for one item is cut with a visible marker; the run ends DONE on its first attempt,
never failing the same way on every retry while re-billing the model."""

from __future__ import annotations

import json

from werkzeug import Request, Response

from agentwake.store.itemsize import MAX_ITEM_BYTES, attribute_size, cut_text, item_size
from agentwake_ops.runs import run_summary
from tests.security.conftest import Cli, Stack
from tests.security.wake import completion_body, handle

EMOJI = "\U0001f600"  # 4 bytes in UTF-8, 12 as an ASCII-escaped JSON string


def serve_replies(httpserver, replies: list[dict]) -> list[int]:
    """An OpenAI-compatible server answering ``replies`` in turn (the last one again after that)."""
    calls: list[int] = []

    def handler(request: Request) -> Response:
        reply = replies[min(len(calls), len(replies) - 1)]
        calls.append(len(request.data))
        body = {"choices": [{"message": reply, "finish_reason": "tool_calls" if reply.get("tool_calls") else "stop"}]}
        return Response(json.dumps(body, ensure_ascii=False), content_type="application/json")

    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(handler)
    return calls


def session_on(cli: Cli, session_id: str, httpserver) -> None:
    provider = {"type": "openai", "id": "big", "base_url": httpserver.url_for("/v1"), "model": "m"}
    cli("sessions", "put", session_id, "--provider", json.dumps(provider))


def every_item(stack: Stack) -> list[dict]:
    return stack.store.table.db.scan(TableName=stack.res.table)["Items"]


def test_an_80000_emoji_final_answer_ends_done_on_the_first_attempt(stack: Stack, cli: Cli, httpserver) -> None:
    # GIVEN a model whose final answer is 80,000 emoji (320 KB of UTF-8, 960 KB ASCII-escaped)
    calls = serve_replies(httpserver, [{"content": EMOJI * 80_000}])
    session_on(cli, "s-emoji", httpserver)
    body = completion_body(stack, "s-emoji")
    task_id = json.loads(body)["task_id"]
    # WHEN the wake runs
    response = handle([body])
    # THEN it succeeded at once: one attempt, one model call, a note that is cut with a visible marker
    assert response["batchItemFailures"] == []
    run = stack.store.records.get_run(f"bg:{task_id}")
    assert run is not None and (run.status, run.attempts) == ("succeeded", 1)
    assert len(calls) == 1
    [note] = [e for e in stack.store.history.history("s-emoji") if e.kind == "note"]
    # (the note keeps the first 4,000 bytes of the answer: wake.usage.NOTE_FINAL_BYTES, issue 37)
    assert (EMOJI * 900 in note.content) and ("truncated" in note.content[-200:])
    # AND every item is within DynamoDB's limit by its own count
    assert max(item_size(i) for i in every_item(stack)) < MAX_ITEM_BYTES


def test_a_450_kb_tool_argument_ends_done_on_the_first_attempt(stack: Stack, cli: Cli, httpserver) -> None:
    # GIVEN a model that calls a tool with a 450 KB argument, then answers
    arguments = json.dumps({"text": "x" * 450_000})
    call = {"id": "c1", "type": "function", "function": {"name": "send_message_to_user", "arguments": arguments}}
    calls = serve_replies(httpserver, [{"content": None, "tool_calls": [call]}, {"content": "I could not send that."}])
    session_on(cli, "s-args", httpserver)
    body = completion_body(stack, "s-args")
    task_id = json.loads(body)["task_id"]
    # WHEN the wake runs
    response = handle([body])
    # THEN the run is DONE at the first attempt; the tool saw an error (too long), not a crash
    assert response["batchItemFailures"] == []
    run = stack.store.records.get_run(f"bg:{task_id}")
    assert run is not None and (run.status, run.attempts) == ("succeeded", 1)
    steps = run_summary(stack.store, f"bg:{task_id}").steps
    tool_step = next(s for s in steps if s["key"].startswith("000.tool"))
    assert tool_step["content"].startswith("error:")
    assert len(calls) == 2  # each model call made once
    # AND the journaled reply keeps a visible marker where its arguments were cut
    reply = next(s for s in steps if s["key"] == "000.reply")
    assert "bytes to fit a DynamoDB item]" in json.dumps(reply)[-300:] or "to fit a DynamoDB item]" in json.dumps(reply)
    assert max(item_size(i) for i in every_item(stack)) < MAX_ITEM_BYTES


def test_sizes_are_counted_in_utf8_bytes_as_dynamodb_counts_them() -> None:
    assert attribute_size({"S": EMOJI * 10}) == 40
    assert attribute_size({"S": "é"}) == 2
    assert attribute_size({"N": "12345"}) == 4
    assert item_size({"pk": {"S": "a"}, "ok": {"BOOL": True}}) == len("pk") + 1 + len("ok") + 1
    cut = cut_text(EMOJI * 1000, 2000)
    assert len(cut.encode()) <= 2000 and cut.endswith("to fit a DynamoDB item]")
    assert cut_text("lone \ud800 surrogate", 100) == "lone \ufffd surrogate"
