"""The ``sns`` channel: publish each delivery to an SNS topic (docs/channels.md): SMS or email
fan-out, or the product's own consumers (an SQS queue, a Lambda, an HTTPS endpoint subscribed to it).

The message is the JSON a webhook delivery carries (``webhook.delivery_body``: ``delivery_id``,
``run_id``, ``session_id``, ``text``, ``sent_at``), with the message attribute ``delivery_id`` so a
subscription's filter policy or a consumer can read it without parsing. On a FIFO topic
(``….fifo``) the session id is the ``MessageGroupId`` (a session's messages keep their order) and
sha256(delivery_id) the ``MessageDeduplicationId``: SNS drops a republished delivery within its
5-minute window. After that, and on a standard topic, a subscriber drops a ``delivery_id`` it has
seen (``confirms = "receiver"``, as for the webhook).

Delivered = SNS answered a ``MessageId`` (the receipt). The topic must start with the stack's
``notify_topic_prefix`` (stack parameter ``NotifyTopicPrefix``; IAM grants ``sns:Publish`` on exactly
those topics). The client is the store's shared botocore one (``ChannelKit.client``), made on the
first delivery: boto3 is never imported. botocore's standard mode retries throttling and 5xx
first; what is left is classified once, here:

- ``NotFound``, ``AuthorizationError``, ``InvalidParameter(Value)``, ``InvalidSecurity``, ``KMS*`` (but
  ``KMSThrottling``) →
  ``ChannelRefused``: the run fails at once and its record goes to the DLQ with the code and what
  to do;
- ``Throttled``, a 5xx, any other code, a connection that failed or broke → ``ChannelUnavailable``:
  retried later (the subscriber or FIFO deduplication drops a message that did go out).
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from agentwake.delivery import Delivery, Receipt
from agentwake.delivery.webhook import delivery_body
from agentwake.errors import ChannelRefused, ChannelUnavailable, ConfigError
from agentwake.trust.redact import redact

if TYPE_CHECKING:
    from agentwake.delivery.kit import ChannelKit

#: the stack parameter that scopes the topics (template.yaml; Settings.notify_topic_prefix)
PREFIX_PARAMETER = "NotifyTopicPrefix"
#: SNS error codes that no retry can change, and what an operator does about each ({change}: the
#: command that points the session at another topic)
_REFUSED = {
    "NotFound": "the topic does not exist (deleted?): create it, or change the session's delivery ({change})",
    "AuthorizationError": "the functions may not publish to it: check the topic's access policy and that it is "
    "named under the stack parameter NotifyTopicPrefix, or change the session's delivery ({change})",
    "InvalidParameter": "SNS refused the message or the topic: check the topic, or change the session's delivery ({change})",
    "InvalidParameterValue": "SNS refused the message or the topic: check the topic, or change the session's "
    "delivery ({change})",
    "InvalidSecurity": "the topic requires signed TLS requests SNS did not get: check its policy",
}
_KMS_WHAT = (
    "the topic's KMS key refused (disabled, deleted, or its policy does not let the functions' roles use it): "
    "allow them kms:GenerateDataKey* and kms:Decrypt on it, or change the topic's encryption"
)
_MAX_REASON = 300


def check_topic(topic_arn: str, prefix: str | None) -> None:
    """ConfigError unless ``topic_arn`` is one of the stack's notify topics (``prefix``: the
    Settings' ``notify_topic_prefix``, a topic ARN prefix)."""
    if not prefix:
        raise ConfigError(
            f"sns channel: this stack publishes to no SNS topic: deploy it with the stack parameter {PREFIX_PARAMETER} "
            "(e.g. agentwake-notify-) and name the topic under it"
        )
    if not topic_arn.startswith(prefix):
        raise ConfigError(
            f"sns channel: topic {topic_arn} is not one of this stack's topics: its ARN must start with {prefix} "
            f"(stack parameter {PREFIX_PARAMETER}; the functions may publish only there)"
        )


class SnsChannel:
    """Publish to one topic of the stack's ``NotifyTopicPrefix``; answer SNS's ``MessageId``."""

    confirms: ClassVar[Literal["receiver", "lookup", "none"]] = "receiver"

    def __init__(self, spec: Any, kit: ChannelKit) -> None:  # an SnsSpec (delivery.factory)
        check_topic(spec.topic_arn, getattr(kit.settings, "notify_topic_prefix", None))
        self.name = spec.target()
        self.topic_arn = spec.topic_arn
        self.where = spec.topic_arn  # as the receipt names it
        self.fifo = spec.topic_arn.endswith(".fifo")
        self._kit = kit

    def __repr__(self) -> str:
        return f"SnsChannel(topic_arn={self.topic_arn!r})"

    def request(self, delivery: Delivery) -> dict[str, Any]:
        """The ``Publish`` parameters of ``delivery``."""
        wall = datetime.fromtimestamp(self._kit.clock.wall(), UTC)
        params: dict[str, Any] = {
            "TopicArn": self.topic_arn,
            "Message": delivery_body(delivery, wall).decode("utf-8"),
            "MessageAttributes": {"delivery_id": {"DataType": "String", "StringValue": delivery.delivery_id}},
        }
        if self.fifo:
            params["MessageGroupId"] = delivery.session_id
            params["MessageDeduplicationId"] = hashlib.sha256(delivery.delivery_id.encode("utf-8")).hexdigest()
        return params

    def send(self, delivery: Delivery) -> Receipt:
        from botocore.exceptions import BotoCoreError, ClientError

        what = f"sns: delivery {delivery.delivery_id} to {self.topic_arn}"
        try:
            answer = self._kit.client("sns").publish(**self.request(delivery))
        except ClientError as exc:
            raise _classified(exc, what, delivery.session_id) from exc
        except BotoCoreError as exc:  # connect failures, a connection that broke: perhaps sent, SNS retried
            raise ChannelUnavailable(redact(f"{what}: {type(exc).__name__}: {exc}")[:_MAX_REASON]) from exc
        message_id = str(answer.get("MessageId") or "")
        if not message_id:  # no receipt, no delivery: the retry republishes (receivers drop by delivery_id)
            raise ChannelUnavailable(f"{what}: SNS answered without a MessageId")
        extra = {"sequence": str(answer["SequenceNumber"])} if answer.get("SequenceNumber") else {}
        return Receipt(channel="sns", target=self.name, where=self.topic_arn, ids=(message_id,), extra=extra)


def _classified(exc: Any, what: str, session_id: str) -> Exception:
    """One ClientError as the channel error it means (module docstring)."""
    error = exc.response.get("Error") or {}
    code = str(error.get("Code") or "")
    status = int((exc.response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0)
    said = redact(str(error.get("Message") or ""))[:_MAX_REASON]
    detail = f"{code}{': ' + said if said else ''}" or f"HTTP {status}"
    if code.startswith("KMS") and "Throttl" not in code:
        return ChannelRefused(f"{what} refused: {detail}; {_KMS_WHAT}; then redrive the run")
    if code in _REFUSED:
        change = f'agentwake sessions put {session_id} --delivery \'{{"type": "sns", "topic_arn": "arn:..."}}\''
        return ChannelRefused(f"{what} refused: {detail}; {_REFUSED[code].format(change=change)}; then redrive the run")
    # Throttled, a 5xx, or a code we do not know: botocore retried already; a later attempt may pass
    return ChannelUnavailable(f"{what} failed: {detail} (after SNS's retries); the run is retried later")
