"""A waiting record's copies: its message attributes in their three shapes, and the one function
that builds the copy a release hands the session to (a result queue record, or a cron wake's
invocation payload).

The attributes a producer set on a result message travel in three shapes:

- **event**: as Lambda's SQS event carries them (``dataType``, ``stringValue``, ``binaryValue``
  as base64 text);
- **api**: as the SQS API sends them (``DataType``, ``StringValue``, ``BinaryValue`` as bytes);
- **stored**: as the wait list keeps them in a JSON string (``BinaryValue64``: base64 text).

``MessageAttributes`` is the one codec between them: every conversion goes through it.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from agentwake.session.lease import Waiter

if TYPE_CHECKING:
    from agentwake.store.port_queues import SchedulesPort

#: the wait state a waiting copy carries (message attributes, Number)
ATTR_WAIT_COUNT = "agentwake-wait-count"
ATTR_WAITING_SINCE = "agentwake-waiting-since"
#: which copy of a waiting record this is: a hand-off re-sends it as a newer one
ATTR_WAIT_GEN = "agentwake-wait-gen"
#: when a release handed the session to this copy (epoch ms)
ATTR_HANDED_AT = "agentwake-handed-at"
#: the receives earlier copies of a waiting result spent on attempts: they count toward its
#: ``maxReceiveCount`` as SQS counts its own (a re-sent copy starts a new receive count)
ATTR_SPENT_RECEIVES = "agentwake-spent-receives"
#: the message id the producer's record had: a re-sent copy is shown as that message
ATTR_FIRST_MESSAGE_ID = "agentwake-first-message-id"
#: the field of a cron wake's payload that carries its wait state (the same names as the attributes)
CRON_WAIT_FIELD = "session_wait"


@dataclass(frozen=True)
class MessageAttributes:
    """Message attributes by name: (data type, a string or bytes value)."""

    values: Mapping[str, tuple[str, str | bytes]] = field(default_factory=dict)

    # -- in ---------------------------------------------------------------------------------------

    @classmethod
    def from_event(cls, attributes: Mapping[str, Any] | None) -> MessageAttributes:
        """From a Lambda SQS event record's ``messageAttributes``."""
        out: dict[str, tuple[str, str | bytes]] = {}
        for name, value in (attributes or {}).items():
            data_type = value.get("dataType") or "String"
            if value.get("stringValue") is not None:
                out[name] = (data_type, str(value["stringValue"]))
            elif value.get("binaryValue") is not None:
                out[name] = (data_type, base64.b64decode(value["binaryValue"]))
        return cls(out)

    @classmethod
    def from_api(cls, attributes: Mapping[str, Any] | None) -> MessageAttributes:
        """From the SQS API's ``MessageAttributes``."""
        out: dict[str, tuple[str, str | bytes]] = {}
        for name, value in (attributes or {}).items():
            if "StringValue" in value:
                out[name] = (value["DataType"], str(value["StringValue"]))
            elif "BinaryValue" in value:
                out[name] = (value["DataType"], bytes(value["BinaryValue"]))
        return cls(out)

    @classmethod
    def from_stored(cls, stored: Mapping[str, Any] | None) -> MessageAttributes:
        """From the wait list's JSON."""
        out: dict[str, tuple[str, str | bytes]] = {}
        for name, value in (stored or {}).items():
            if "BinaryValue64" in value:
                out[name] = (value["DataType"], base64.b64decode(value["BinaryValue64"]))
            elif "StringValue" in value:
                out[name] = (value["DataType"], str(value["StringValue"]))
        return cls(out)

    # -- out --------------------------------------------------------------------------------------

    def to_event(self) -> dict[str, dict[str, str]]:
        return {
            name: {"dataType": t, "binaryValue": base64.b64encode(v).decode()}
            if isinstance(v, bytes)
            else {"dataType": t, "stringValue": v}
            for name, (t, v) in self.values.items()
        }

    def to_api(self) -> dict[str, dict[str, Any]]:
        return {
            name: {"DataType": t, "BinaryValue": v} if isinstance(v, bytes) else {"DataType": t, "StringValue": v}
            for name, (t, v) in self.values.items()
        }

    def to_stored(self) -> dict[str, dict[str, str]]:
        return {
            name: {"DataType": t, "BinaryValue64": base64.b64encode(v).decode()}
            if isinstance(v, bytes)
            else {"DataType": t, "StringValue": v}
            for name, (t, v) in self.values.items()
        }

    def strings(self) -> dict[str, str]:
        """The string-valued attributes by name (the wait state is read from them)."""
        return {name: v for name, (_, v) in self.values.items() if isinstance(v, str)}

    def with_numbers(self, numbers: Mapping[str, str]) -> MessageAttributes:
        """These attributes with the wait state ``numbers`` set (Number attributes; a text value,
        the first message id, as a String)."""
        typed = {name: ("Number" if v.isdigit() else "String", v) for name, v in numbers.items()}
        return MessageAttributes({**self.values, **typed})


@dataclass(frozen=True)
class HandedCopy:
    """The copy of a waiting record that a release hands the session to: its body, its producer's
    attributes and the wait state it carries (its copy number, when it was handed)."""

    run_id: str
    body: str
    attributes: MessageAttributes
    wait: dict[str, str]

    def as_event_record(self) -> dict[str, Any]:
        """As Lambda's SQS event would carry it: how the releasing invocation runs it itself."""
        return {
            "messageId": f"handed:{self.run_id}",
            "body": self.body,
            "attributes": {"ApproximateReceiveCount": "1"},
            "messageAttributes": self.attributes.with_numbers(self.wait).to_event(),
            "eventSource": "aws:sqs",
            "eventSourceARN": "",
        }

    def as_cron_event(self) -> dict[str, Any]:
        """A cron waiter's copy as its function is invoked with it: the payload it waited with and
        its wait state (how the releasing invocation runs it itself, or a one-time schedule's input)."""
        payload = json.loads(self.body) if self.body else {}
        return {**(payload if isinstance(payload, dict) else {}), CRON_WAIT_FIELD: dict(self.wait)}


def handed_copy(waiter: Waiter, *, gen: int, handed_at: float) -> HandedCopy:
    """The one builder of a handed copy, whatever the waiter's kind (a result record, a cron wake's
    payload). ``gen``: the copy's number — one more than the waiter's for a copy sent on (the
    delayed copy or the fallback schedule then retires), the same for a run in the releasing
    invocation (the delayed copy stays its fallback)."""
    wait = {**(waiter.wait or {}), ATTR_WAIT_GEN: str(gen), ATTR_HANDED_AT: str(int(handed_at * 1000))}
    return HandedCopy(
        run_id=waiter.run_id, body=waiter.body, attributes=MessageAttributes.from_stored(waiter.attributes), wait=wait
    )


def schedule_cron_copy(
    schedules: SchedulesPort,
    *,
    name: str,
    at: float,
    target: str,
    role_arn: str,
    dlq_arn: str | None,
    payload: Mapping[str, Any],
) -> datetime:
    """The one-time schedule that carries a cron wake's copy (its fallback while it waits, or the
    copy a release hands the session to) to the function it came through; returns its time.
    Scheduler takes whole seconds: the next one after ``at``, never a time already past."""
    when = datetime.fromtimestamp(math.ceil(at), UTC)
    schedules.create_once(
        name=name, at=when, target_arn=target, role_arn=role_arn, payload=dict(payload), dlq_arn=dlq_arn
    )
    return when
