"""The provider port. A provider turns a ChatRequest into a ModelReply or raises a ProviderError."""

from __future__ import annotations

from typing import Protocol

from agentwake.agent.types import ChatRequest, ModelReply


class Provider(Protocol):
    #: stable id used for de-duplication, sticky failover and error reports
    id: str

    def complete(self, request: ChatRequest) -> ModelReply: ...
