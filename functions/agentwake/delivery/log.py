"""The ``log`` channel: the embedded default. Writes each delivery as a structured log line."""

from __future__ import annotations

import json
import logging
from typing import TextIO

from agentwake.delivery import Delivery, Receipt

logger = logging.getLogger("agentwake.delivery")


class LogChannel:
    # a log line carries its delivery id: the developer who reads it tells a repeat (at least once,
    # local only; no intent is written for it)
    confirms = "receiver"

    def __init__(self, stream: TextIO | None = None, *, name: str = "log") -> None:
        self.stream = stream
        self.name = name
        self.sent: list[Delivery] = []

    def send(self, delivery: Delivery) -> Receipt:
        self.sent.append(delivery)
        logger.info("delivery", extra={"delivery": delivery.to_dict()})
        if self.stream is not None:
            self.stream.write(json.dumps({"delivery": delivery.to_dict()}) + "\n")
            self.stream.flush()
        return Receipt(channel="log", target=self.name)
