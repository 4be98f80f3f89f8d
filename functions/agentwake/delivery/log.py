"""The ``log`` channel: the embedded default. Writes each delivery as a structured log line."""

from __future__ import annotations

import json
import logging
from typing import TextIO

from agentwake.delivery import Delivery

logger = logging.getLogger("agentwake.delivery")


class LogChannel:
    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream
        self.sent: list[Delivery] = []

    def send(self, delivery: Delivery) -> None:
        self.sent.append(delivery)
        logger.info("delivery", extra={"delivery": delivery.to_dict()})
        if self.stream is not None:
            self.stream.write(json.dumps({"delivery": delivery.to_dict()}) + "\n")
            self.stream.flush()
