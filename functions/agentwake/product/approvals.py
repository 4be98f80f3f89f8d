"""Deciding an approval request: the ONE decision path every surface calls (product API, CLI,
console, the expiry), and the expiry chain's checks (design: issue 35 §4).

``ApprovalsService.decide`` checks who may decide (an owner of the session, the holder of the
decision token, an operator, the expiry), then makes the one conditional write
(``store.approvals.decide``): the request moves from ``pending`` once, its decision lands in the
run's journal in the same transaction. The same decision again answers with the stored record; a
different one raises ``ApprovalAlreadyDecided`` saying what was decided. After the write a nudge
goes to the work queue (``wake.approval_check``), which re-queues the parked run.
"""

from __future__ import annotations

import hmac
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from agentwake.domain.approvals import MAX_REASON_CHARS, ON_BEHALF_OF, Approval, token_sha256
from agentwake.domain.models import truncate
from agentwake.errors import ApprovalAlreadyDecided, ForgedDecision, NotAnOwner, UnknownApproval
from agentwake.observability import add_metric, logger

if TYPE_CHECKING:
    from agentwake.store.port import Store
    from agentwake.store.port_approvals import ApprovalsPort
    from agentwake.store.port_queues import WorkQueuePort

#: how a decision came: ``api-owner``, ``api-token`` (product API), ``cli``, ``console`` (operators), ``expiry``,
#: ``slack``, ``telegram`` (a button under the request in the chat: ``Click``)
Via = Literal["api", "api-owner", "api-token", "cli", "console", "expiry", "slack", "telegram"]
#: the chats whose buttons decide (``product/channel_callback.py`` verifies the platform's request)
CLICK_VIAS = ("slack", "telegram")
#: who the decision names when the token's holder gives no name
TOKEN_HOLDER = "decision-token holder"
#: SQS delays a message at most this long: a pending request's check comes at least this often
MAX_CHECK_DELAY_S = 900
_DECISIONS = {"approve": "approved", "approved": "approved", "reject": "rejected", "rejected": "rejected"}


@dataclass(frozen=True)
class Click:
    """A button pressed under a request in a chat, the platform's request verified (Slack's signature,
    Telegram's webhook secret): where (a Slack channel id, a Telegram chat id), on which message (its
    ``ts``, its ``message_id``) and by whom (``slack:U123 (@alice)``). It decides as the token's holder
    does, and only on the message the request was delivered as (the delivery's receipt)."""

    platform: Literal["slack", "telegram"]
    where: str
    message: str
    user: str


def decision_of(decision: str) -> Literal["approved", "rejected"]:
    """``approve``/``reject`` (or the stored words) as stored; ValueError for anything else."""
    try:
        return _DECISIONS[decision.strip().lower()]  # type: ignore[return-value]
    except (KeyError, AttributeError):
        raise ValueError(f"a decision is approve or reject, not {decision!r}") from None


def already_said(approval: Approval) -> str:
    """What ``ApprovalAlreadyDecided`` says: what was decided, by whom, when and why."""
    return f"approval {approval.approval_id} was already {approval.said()}"


class ApprovalsService:
    """Decide, send checks, read (the surfaces' one service over ``store.approvals``)."""

    def __init__(
        self, store: Store, work_queue: WorkQueuePort | None = None, *, clock: Callable[[], float] | None = None
    ) -> None:
        self.store = store
        self.work_queue = work_queue
        #: the wall clock (epoch seconds) a person's decision is held against the request's expiry
        self.clock = clock or time.time

    @property
    def approvals(self) -> ApprovalsPort:
        return self.store.approvals

    # --- reads ---------------------------------------------------------------------------------

    def get(self, approval_id: str) -> Approval:
        found = self.approvals.get(approval_id)
        if found is None:
            raise UnknownApproval(f"there is no approval {approval_id}")
        return found

    def owned(self, approval_id: str, principal: str | None, *, token: str | None = None) -> Approval:
        """The request, for an owner of its session or the holder of its token; UnknownApproval
        otherwise (another session's request answers as one that does not exist)."""
        approval = self.get(approval_id)
        if token is not None and self._token_ok(approval, token):
            return approval
        if principal is not None and self._owner(approval, principal):
            return approval
        raise UnknownApproval(f"there is no approval {approval_id}")

    def session_approvals(
        self,
        session_id: str,
        *,
        state: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> tuple[list[Approval], str | None]:
        """A session's requests, newest first; the page and the next cursor. Whoever asks has been
        checked already: the product API's router with ``product.authority.owned_session``, as every
        session route is (the service reads no request, so it imports no router's authority)."""
        return self.approvals.session_approvals(session_id, limit=limit, before=cursor, state=state)

    # --- decide --------------------------------------------------------------------------------

    def decide(
        self,
        approval_id: str,
        decision: str,
        *,
        by: str | None,
        via: Via,
        reason: str | None = None,
        token: str | None = None,
        principal: str | None = None,
        click: Click | None = None,
    ) -> Approval:
        """Decide request ``approval_id`` (``approve``/``reject``), once.

        ``via``: ``api`` (an owner ``principal``, else the ``token``), ``cli`` or ``console`` (an
        operator; ``by`` is the name given with ``--as``), ``expiry`` (the chain's check), ``slack`` or
        ``telegram`` (a button: ``click``, checked against the request's delivery). ``by``: who
        the decision names (on the API: on whose behalf). Raises UnknownApproval (404),
        ForgedDecision (403), ApprovalAlreadyDecided (409, naming the decision that stands)."""
        wanted = decision_of(decision)
        approval = self.get(approval_id)
        hashed: str | None = None
        expired = via == "expiry"
        if expired:
            decided_by, stored_via = "expiry", "expiry"
        elif via in ("cli", "console"):
            decided_by, stored_via = (f"operator (as {by})" if by else "operator"), via
        elif via in CLICK_VIAS:
            decided_by, stored_via = self._clicked(approval, via, click)
        else:
            decided_by, stored_via, hashed = self._authority(approval, by=by, token=token, principal=principal)
        why = _reason(reason)
        if expired and not why:
            why = f"nobody decided within {approval.expires_in_s} s"
        if not approval.pending:
            return self._as_decided(approval, wanted)
        if not expired and self.clock() >= approval.expiry_epoch:
            # too late for a person: time decides, as the request said it would (its check may be late)
            return self._as_decided(self._expire(approval), wanted)
        result = self.approvals.decide(
            approval,
            wanted,
            by=decided_by,
            via=stored_via,
            reason=why,
            expired=expired,
            token_sha256=hashed,
            before=None if expired else self.clock(),
        )
        if not result.written:
            if result.approval.pending:  # the expiry came between the read and the write
                return self._as_decided(self._expire(result.approval), wanted)
            return self._as_decided(result.approval, wanted)
        add_metric(name="ApprovalDecided", unit="Count", value=1)
        if expired:
            add_metric(name="ApprovalExpired", unit="Count", value=1)
        logger.info(
            "approval decided",
            extra={"approval_id": approval_id, "run_id": approval.run_id, "decision": wanted, "via": stored_via},
        )
        self.nudge(result.approval)
        return result.approval

    def _expire(self, approval: Approval) -> Approval:
        """A request past its expiry decided as its rule says, through the one decision path (or as
        another decision, landed meanwhile, decided it: the caller says whether that is its own)."""
        try:
            return self.decide(approval.approval_id, approval.on_expiry, by=None, via="expiry")
        except ApprovalAlreadyDecided as stood:
            if stood.approval is None:
                raise
            return stood.approval

    def _authority(
        self, approval: Approval, *, by: str | None, token: str | None, principal: str | None
    ) -> tuple[str, str, str | None]:
        """Who decides over the API: an owner (``api-owner``) or the token's holder (``api-token``)."""
        if principal is not None and self._owner(approval, principal):
            if "owners" not in approval.deciders:
                raise ForgedDecision(f"approval {approval.approval_id}: its rule does not let owners decide")
            named = f"{principal}{ON_BEHALF_OF}{truncate(by, 200)}" if by else principal
            return named, "api-owner", None
        if token:
            if "token" not in approval.deciders or not self._token_ok(approval, token):
                raise ForgedDecision(f"approval {approval.approval_id}: that is not its decision token")
            return (truncate(by, 200) if by else TOKEN_HOLDER), "api-token", approval.token_sha256
        if principal is None:
            raise NotAnOwner(f"approval {approval.approval_id}: the request carries no identity and no decision token")
        raise UnknownApproval(f"there is no approval {approval.approval_id}")

    def _clicked(self, approval: Approval, via: str, click: Click | None) -> tuple[str, str]:
        """A button counts as the token (whoever got the request in the chat holds it), pressed on the
        message the request was delivered as: the same chat and message as a receipt of its delivery.
        A forwarded copy, another chat or another message is refused (ForgedDecision)."""
        if click is None or click.platform != via:
            raise ForgedDecision(f"approval {approval.approval_id}: a {via} decision needs the click")
        if "token" not in approval.deciders:
            raise ForgedDecision(f"approval {approval.approval_id}: its rule does not let the chat's buttons decide")
        for receipt in self.approvals.delivered_to(approval):
            where = str(receipt.get("where") or "").split("/", 1)[0]  # a Slack thread: C0123/ts
            ids = [str(i) for i in receipt.get("ids") or ()]
            if receipt.get("channel") == via and where == click.where and click.message in ids:
                return truncate(click.user, 200), via
        raise ForgedDecision(
            f"approval {approval.approval_id}: that {via} message is not the one its request was delivered as"
        )

    @staticmethod
    def _token_ok(approval: Approval, token: str) -> bool:
        return bool(approval.token_sha256) and hmac.compare_digest(token_sha256(token), approval.token_sha256)

    def _owner(self, approval: Approval, principal: str) -> bool:
        from agentwake.trust.principals import normal_principal

        config = self.store.records.get_session(approval.session_id)
        if config is None:
            return False
        try:
            return normal_principal(principal) in config.owners
        except ValueError:
            return False

    @staticmethod
    def _as_decided(approval: Approval, wanted: str) -> Approval:
        if approval.state == wanted:
            return approval  # the same decision again: idempotent
        raise ApprovalAlreadyDecided(already_said(approval), approval=approval)

    # --- the work queue: nudges and the expiry chain ---------------------------------------------

    def nudge(self, approval: Approval) -> None:
        """After a decision: a check now, which re-queues the parked run. Never re-sent; if it
        cannot be sent, the chain's next check (within 900 s) re-queues instead."""
        if self.work_queue is None or not self.work_queue.url:
            return
        from agentwake.wake.messages import WorkMessage

        msg = WorkMessage(kind="approval", session_id=approval.session_id, approval_id=approval.approval_id, nudge=True)
        try:
            self.work_queue.send(msg.model_dump_json(exclude_defaults=True), delay_s=0)
        except Exception:  # the decision stands; the chain re-queues
            logger.exception("could not send the approval's nudge; its chain will re-queue the run")

    def send_check(
        self,
        approval: Approval,
        *,
        now: float,
        after: str | None = None,
        delay_s: float | None = None,
    ) -> str:
        """Send the request's check to the work queue, visible after min(900 s, the time left), or
        ``delay_s``; returns the check's id (the chain's place, ``Approvals.claim_check``)."""
        from agentwake.wake.messages import WorkMessage

        if self.work_queue is None or not self.work_queue.url:
            raise ValueError(f"approval {approval.approval_id}: no work queue to send its check to")
        check_id = f"achk-{uuid.uuid4().hex[:16]}"
        if delay_s is None:
            delay_s = check_delay_s(approval.expiry_epoch, now)
        msg = WorkMessage(
            kind="approval",
            session_id=approval.session_id,
            approval_id=approval.approval_id,
            check_id=check_id,
            after_check=after,
        )
        self.work_queue.send(msg.model_dump_json(exclude_defaults=True), delay_s=delay_s)
        return check_id


def check_delay_s(expiry_epoch: float, now: float) -> int:
    """Until the expiry, at most SQS's 900 s."""
    return max(0, min(MAX_CHECK_DELAY_S, math.ceil(expiry_epoch - now)))


def _reason(reason: str | None) -> str | None:
    """A decision's reason as stored: redacted, at most 1000 characters (rendered inert where shown)."""
    if not reason or not reason.strip():
        return None
    from agentwake.trust.redact import redact

    return truncate(redact(reason.strip()), MAX_REASON_CHARS)
