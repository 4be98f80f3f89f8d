"""Where ``send_message_to_user`` goes. Adapters: ``log`` (embedded default) and ``webhook``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from agentwake.trust.redact import redact


@dataclass(frozen=True)
class Delivery:
    """One message to a user. ``delivery_id`` (run id + step + call index) is stable across retries,
    so a receiver can drop a duplicate sent when a crash hit between sending and journaling.

    Its text is redacted when the delivery is made: every channel (webhook, log, a replay's dry
    one) and the history entry it writes see the same text, without any secret the run resolved."""

    delivery_id: str
    run_id: str
    session_id: str
    text: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", redact(self.text))

    def to_dict(self) -> dict[str, Any]:
        return {
            "delivery_id": self.delivery_id,
            "run_id": self.run_id,
            "session_id": self.session_id,
            "text": self.text,
        }


class DeliveryChannel(Protocol):
    def send(self, delivery: Delivery) -> None:
        """Deliver or raise ``DeliveryError``."""
