"""What the wake and the approvals service need of approval requests (issue 35): the port
``store.approvals.Approvals`` implements, and the values its writes answer with. Split from
``store/port.py`` as the table code is split: one module per aggregate.

Plain Python only, like ``store/port.py``: no boto3, no DynamoDB attribute shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agentwake.domain.approvals import Approval


@dataclass(frozen=True)
class Requested:
    """What ``Approvals.request`` found: the stored request, and whether this call wrote it (or
    rotated its token): only then may the caller send the request with its token."""

    approval: Approval
    #: the token this caller holds is the request's current one (written now, or rotated now)
    token_current: bool


@dataclass(frozen=True)
class Decided:
    """What ``Approvals.decide`` found: the request as it stands, and whether this call decided it."""

    approval: Approval
    written: bool


class ApprovalsPort(Protocol):
    """Approval requests (``store.approvals``; issue 35): request, the one decision, the chain's place."""

    def get(self, approval_id: str) -> Approval | None: ...

    def delivered_to(self, approval: Approval) -> list[dict[str, Any]]: ...

    def request(self, approval: Approval, step: dict[str, Any]) -> Requested: ...

    def asked_item(self, approval_id: str, at: str | None = None) -> tuple[str, dict[str, Any]]: ...

    def decide(
        self,
        approval: Approval,
        decision: str,
        *,
        by: str,
        via: str,
        reason: str | None = None,
        expired: bool = False,
        token_sha256: str | None = None,
        at: str | None = None,
        before: float | None = None,
    ) -> Decided: ...

    def claim_check(self, approval_id: str, *, after: str | None, check: str) -> bool: ...

    def resumed_item(self, approval_id: str, attempt: int, at: str | None = None) -> tuple[str, dict[str, Any]]: ...

    def set_resume(self, approval_id: str, resume: dict[str, Any]) -> None: ...

    def session_approvals(
        self, session_id: str, *, limit: int = 50, before: str | None = None, state: str | None = None
    ) -> tuple[list[Approval], str | None]: ...

    def all_approvals(self, *, state: str | None = None) -> list[Approval]: ...
