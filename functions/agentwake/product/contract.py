"""The producer contract as JSON Schema, generated from the pydantic models that parse it.

``schemas/*.schema.json`` are this module's output, checked in so a producer in any language can
validate what it sends, and so is ``schemas/product-api.openapi.json``, the product API's OpenAPI
document (from ``agentwake.product.api``'s resolver). ``make schemas`` rewrites them; a test fails when a model changed and the
files were not regenerated (docs/producers.md describes every field).

    python -m agentwake.product.contract [--check] [DIR]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agentwake.wake.messages import BackgroundResultMessage, CronWakeInput

DRAFT = "https://json-schema.org/draft/2020-12/schema"
ID_BASE = "https://agentwake.dev/schemas/"


#: what each field means, for producers (kept here so the runtime models stay terse); a field of a
#: contract model without an entry here fails the contract test
FIELD_DOCS: dict[str, dict[str, str]] = {
    "background-result.schema.json": {
        "task_id": "The id `register_task` returned. The run this message wakes is bg:{task_id}.",
        "session_id": "The session the task was registered for; any other session is a permanent input error.",
        "task_token": "The secret token `register_task` returned (only its hash is stored). A message without "
        "the task's own token is a ForgedCompletion: dead-lettered at once, nothing changes.",
        "tool_name": "The tool that started the task (the wake shows the registered task's tool, not this field).",
        "tool_args": "The tool's arguments (the wake shows the registered task's arguments, not this field).",
        "status": "How the task ended: succeeded or failed. A failed task still wakes the agent, which tells the user.",
        "result_text": "The task's result (or its error), shown to the agent. At most 200,000 characters; "
        "the history note keeps the first 20,000.",
        "note": "Optional context for the agent (why the task ran, what the user asked).",
        "summary_name": "A short human name for the task, used in the history note.",
        "finished_at": "When the task finished, ISO-8601 (e.g. 2026-11-30T05:00:00Z).",
        "subagent_name": "Optional: the sub-agent that ran the task.",
        "outcome": "Which outcome of the task this is: 1 (the default; a producer always sends 1). agentwake "
        "itself sends 2 when a background tool or subagent whose work failed was redriven and then succeeded "
        "(its wake is bg:{task_id}:2).",
    },
    "cron-wake.schema.json": {
        "job_id": "The job that came due (agentwake jobs create printed it).",
        "scheduled_time": "The firing's scheduled time (<aws.scheduler.scheduled-time>); with the job id it names "
        "the run cron:{job_id}:{scheduled_time}, stable across retries.",
        "session_id": "Optional: the job's session, which `agentwake jobs create` puts in the schedule's input so "
        "the wake reads the session config in its one batch read. The job's own session is what counts; without "
        "this field the wake reads it from the job (one read more).",
    },
}


#: where the published contract is stricter than the parser. The parser accepts a completion without
#: ``task_token`` so that it can dead-letter it as a ForgedCompletion (with that reason) instead of an
#: InvalidMessage; a producer must always send it, so the schema requires it.
REQUIRED_BY_CONTRACT: dict[str, dict[str, dict[str, Any]]] = {
    "background-result.schema.json": {"task_token": {"type": "string", "minLength": 1, "maxLength": 256}},
}


def _models() -> dict[str, tuple[type[BaseModel], str]]:
    return {
        "background-result.schema.json": (
            BackgroundResultMessage,
            "The completion message a producer sends to the background-result queue (SQS body, UTF-8 JSON) "
            "when a background task finishes. It wakes the session's agent for run bg:{task_id}.",
        ),
        "cron-wake.schema.json": (
            CronWakeInput,
            "The input EventBridge Scheduler passes to CronWakeFunction when a job comes due "
            "(agentwake writes it into each job's schedule; scheduled_time is <aws.scheduler.scheduled-time>).",
        ),
    }


def schema_for(model: type[BaseModel], description: str, file_name: str) -> dict[str, Any]:
    """The JSON Schema of ``model`` (validation mode), with a $schema, $id and description."""
    body = model.model_json_schema(mode="validation")
    docs = FIELD_DOCS.get(file_name, {})
    for field_name, prop in body.get("properties", {}).items():
        prop.pop("title", None)
        if field_name in docs:
            prop["description"] = docs[field_name]
    for field_name, stricter in REQUIRED_BY_CONTRACT.get(file_name, {}).items():
        prop = body["properties"][field_name]
        body["properties"][field_name] = {"description": prop.get("description", ""), **stricter}
        body["required"] = [*body.get("required", []), field_name]
    return {"$schema": DRAFT, "$id": ID_BASE + file_name, **body, "description": description}


def render() -> dict[str, str]:
    """file name -> the exact text of the schema file (stable: sorted keys, trailing newline)."""
    out = {}
    for name, (model, description) in _models().items():
        out[name] = json.dumps(schema_for(model, description, name), indent=2, sort_keys=True) + "\n"
    return out


#: the product API's OpenAPI document, generated from its resolver's routes and pydantic models
OPENAPI_FILE = "product-api.openapi.json"


def render_all() -> dict[str, str]:
    """Every file of schemas/: the JSON Schemas and the product API's OpenAPI document."""
    from agentwake.product.api import openapi_json

    return {**render(), OPENAPI_FILE: openapi_json()}


def write(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render_all().items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def drift(directory: Path) -> list[str]:
    """The schema files in ``directory`` that differ from the models (missing files included)."""
    stale = []
    for name, text in render_all().items():
        path = directory / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            stale.append(name)
    return stale


def main(argv: list[str] | None = None, echo: Callable[[str], None] = print) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    directory = Path(args[0] if args else "schemas")
    if check:
        stale = drift(directory)
        for name in stale:
            echo(f"{directory / name} is stale: run `make schemas`")
        return 1 if stale else 0
    for path in write(directory):
        echo(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
