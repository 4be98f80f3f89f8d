"""Sessions API (plain Python) for the product that owns the conversation: its live turns take part
in the session lease, their messages are appended to the history the woken agent reads, and the
conversation is read back (docs/durability.md, "Live turns").

A live turn holds the session as a run does: while it holds it no wake runs (a wake arriving waits,
as it waits for a run), and a live turn beginning while a run holds the session waits up to the
session's ``live_turn_wait_s`` for it, then is refused with ``SessionBusy`` naming that run. A live
turn is short (``ttl_s``, renewable); ending it hands the session to the run that waited longest,
and a live turn that is never ended (a crashed chat app) releases it when its TTL passes.

    sessions = SessionsService(store, ResultQueue(queue_url))  # agentwake.bootstrap.sessions() in a function
    with sessions.live_turn("alice") as turn:
        sessions.append(turn, [("user", "hi"), ("assistant", "hello!")], idempotency_key="msg-41")
    page = sessions.read_conversation("alice")
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

from agentwake.domain.models import MAX_TEXT_CHARS, HistoryEntry, SessionConfig
from agentwake.errors import ConfigError, LeaseHeld, SessionBusy
from agentwake.store.itemsize import HISTORY_CONTENT_BYTES, utf8_len
from agentwake.store.session_lease import (
    MAX_APPEND_MESSAGES,
    Appended,
    AppendTooLarge,
    LiveTurnCapped,
    LiveTurnLost,
)

if TYPE_CHECKING:
    from agentwake.store.port import Store
    from agentwake.store.queues import ResultQueue

__all__ = [
    "MAX_APPEND_MESSAGES",
    "AppendTooLarge",
    "Appended",
    "ConversationPage",
    "LiveTurn",
    "LiveTurnCapped",
    "LiveTurnLost",
    "SessionsService",
]

# What a live turn may ask for: one definition, checked by SessionsService below and declared by the
# product API's request models (product/api.py, and so schemas/product-api.openapi.json), so both ways
# in take the same turns. MAX_APPEND_MESSAGES (the most messages one append writes, in one
# transaction) is the store's, passed on from here.
#: a live turn's lease unless the caller says otherwise, and the longest it may ask for
DEFAULT_TURN_TTL_S = 60.0
MAX_TURN_TTL_S = 900.0
#: the longest a request asks a live turn to wait for a run (within API Gateway's 30 s; a session's
#: ``live_turn_wait_s`` has the same bound)
MAX_TURN_WAIT_S = 25.0
#: who speaks in a live turn
Role = Literal["user", "assistant"]
ROLES: tuple[str, ...] = get_args(Role)
#: the most text of one message the history keeps (the product API refuses more; it would be cut)
MAX_CONTENT_CHARS = MAX_TEXT_CHARS
#: ... and the most UTF-8 bytes of it (60,000 characters of emoji are 240,000): one entry's cap, so
#: that no entry is cut and an append of 25 ASCII messages at the character limit still fits its
#: transaction
MAX_CONTENT_BYTES = HISTORY_CONTENT_BYTES
#: the most one live turn holds its session, renewals included, unless the service is told otherwise
#: (the default of ``AGENTWAKE_LIVE_TURN_MAX_HOLD_S``)
DEFAULT_MAX_HOLD_S = 300.0
#: an append's idempotency key, a turn's token and a turn's id: at most this many characters
MAX_IDEMPOTENCY_KEY_CHARS = 256
MAX_TOKEN_CHARS = 256
MAX_TURN_ID_CHARS = 64
#: the entries one page of the conversation holds unless asked, and at most
DEFAULT_PAGE = 50
MAX_PAGE = 200


@dataclass(frozen=True)
class LiveTurn:
    """A live turn holding ``session_id`` until ``expires_at`` (epoch seconds). ``token`` is its
    proof of holding the session: keep it for append/renew/end, never show it."""

    session_id: str
    turn_id: str
    token: str
    expires_at: float

    def __repr__(self) -> str:
        return f"LiveTurn(session_id={self.session_id!r}, turn_id={self.turn_id!r}, token='…')"


@dataclass(frozen=True)
class ConversationPage:
    """Entries newest first (``kind``: live, delivery, marker, note, message) and the cursor of the
    next (older) page, None at the first entry."""

    entries: list[HistoryEntry]
    cursor: str | None


class SessionsService:
    def __init__(
        self,
        store: Store,
        result_queue: ResultQueue | None = None,
        *,
        now: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        max_hold_s: float = DEFAULT_MAX_HOLD_S,
    ) -> None:
        """``store``: the DynamoStore; ``result_queue``: the result queue, through which ending a live
        turn hands the session to a waiting result (None: no hand-off, waiters come back later);
        ``max_hold_s``: the most one live turn holds the session, renewals included."""
        self.store = store
        self.result_queue = result_queue
        self.max_hold_s = float(max_hold_s)
        self.now = now
        self.sleep = sleep

    # -- live turns -------------------------------------------------------------------------------

    def begin_live_turn(
        self,
        session_id: str,
        *,
        ttl_s: float = DEFAULT_TURN_TTL_S,
        wait_s: float | None = None,
        config: SessionConfig | None = None,
    ) -> LiveTurn:
        """Hold the session for a live turn. While a run holds it, wait up to ``wait_s`` (the
        session's ``live_turn_wait_s`` when None) for the run to end, then raise SessionBusy naming
        the run. ConfigError for a session with no config, or a TTL out of (0, 900] s. The lease
        lasts ``ttl_s``, or less when that is past the turn's cap (``expires_at`` says).
        ``config``: the session's, when the caller has just read it (the product API's owner check)."""
        ttl = _ttl(ttl_s)
        config = config if config is not None else self.store.records.get_session(session_id)
        if config is None:
            raise ConfigError(f"session {session_id} has no config (agentwake sessions put {session_id})")
        wait = config.live_turn_wait_s if wait_s is None else max(0.0, float(wait_s))
        turn_id = uuid.uuid4().hex[:16]
        deadline = self.now() + wait
        pause = 0.1
        while True:
            try:
                token, until = self.store.leases.take_live_turn(session_id, turn_id, ttl, hold_s=self.max_hold_s)
            except LeaseHeld as held:
                if self.now() + pause > deadline:
                    raise SessionBusy(
                        f"session {session_id} is busy with {held.holder or 'another writer'}; "
                        f"waited {wait:.0f} s (live_turn_wait_s). Try again when it has ended.",
                        session_id=session_id,
                        holder=held.holder,
                    ) from held
                self.sleep(pause)
                pause = min(1.0, pause * 2)
                continue
            return LiveTurn(session_id=session_id, turn_id=turn_id, token=token, expires_at=until)

    def renew_live_turn(self, turn: LiveTurn, *, ttl_s: float = DEFAULT_TURN_TTL_S) -> LiveTurn:
        """Hold the session ``ttl_s`` longer from now, but not past the turn's cap (``expires_at``
        says how long); LiveTurnLost if the turn no longer holds it. LiveTurnCapped once the turn
        has held it ``max_hold_s``: the turn is ended, the session handed to the run that waited
        longest."""
        try:
            until = self.store.leases.renew_live_turn(turn.session_id, turn.token, _ttl(ttl_s))
        except LiveTurnCapped as capped:
            try:
                handed = self.end_live_turn(turn)
                then = f"was handed to {handed}, which waited for it" if handed else "is free"
            except Exception:  # the table did not answer: the lease ends at the cap all the same
                then = "is freed when the turn's lease ends"
            raise LiveTurnCapped(
                f"a live turn holds its session at most {self.max_hold_s:.0f} s, renewals included "
                f"(AGENTWAKE_LIVE_TURN_MAX_HOLD_S), and this one has held it that long: it is ended and session "
                f"{turn.session_id} {then}. Begin a new turn to go on."
            ) from capped
        return LiveTurn(session_id=turn.session_id, turn_id=turn.turn_id, token=turn.token, expires_at=until)

    def end_live_turn(self, turn: LiveTurn) -> str | None:
        """Release the session and hand it to the run that waited longest; returns that run's id
        (None: nobody waits). Ending a turn that no longer holds the session changes nothing."""
        from agentwake.session.handoff import hand_off  # the hand-off: not at the product API's cold start

        return hand_off(self.store.leases, self.result_queue, turn.session_id, turn.token, now=self.now)

    @contextmanager
    def live_turn(
        self, session_id: str, *, ttl_s: float = DEFAULT_TURN_TTL_S, wait_s: float | None = None
    ) -> Iterator[LiveTurn]:
        """``begin_live_turn`` … ``end_live_turn``, ended whatever happens inside."""
        turn = self.begin_live_turn(session_id, ttl_s=ttl_s, wait_s=wait_s)
        try:
            yield turn
        finally:
            self.end_live_turn(turn)

    # -- the conversation -------------------------------------------------------------------------

    def append(self, turn: LiveTurn, messages: Sequence[tuple[str, str]], *, idempotency_key: str) -> Appended:
        """Append the live turn's messages (role ``user`` or ``assistant``, content) to the session's
        history, in order, once per ``idempotency_key`` (a retried append writes nothing and returns
        what the first wrote). LiveTurnLost if the turn no longer holds the session, or the token is
        not the turn's (whether or not the key was used); AppendTooLarge, before any write, for a
        message over ``MAX_CONTENT_BYTES`` or an append larger than one DynamoDB transaction."""
        if not idempotency_key or len(idempotency_key) > MAX_IDEMPOTENCY_KEY_CHARS:
            raise ValueError(f"idempotency_key: 1 to {MAX_IDEMPOTENCY_KEY_CHARS} characters")
        if not messages or len(messages) > MAX_APPEND_MESSAGES:
            raise ValueError(f"messages: 1 to {MAX_APPEND_MESSAGES} per append")
        for role, content in messages:
            if role not in ROLES:
                raise ValueError(f"role {role!r}: a live turn appends {' or '.join(ROLES)} messages")
            if not isinstance(content, str):
                raise ValueError("content: text")
        for n, (_, content) in enumerate(messages, start=1):
            if (size := utf8_len(content)) > MAX_CONTENT_BYTES:
                raise AppendTooLarge(
                    f"message {n} is {size:,} bytes (UTF-8); one entry holds at most {MAX_CONTENT_BYTES:,}. "
                    "Nothing was appended: split it into shorter messages"
                )
        return self.store.leases.append_live(turn.session_id, turn.token, list(messages), idempotency_key)

    def read_conversation(
        self, session_id: str, *, cursor: str | None = None, limit: int = DEFAULT_PAGE
    ) -> ConversationPage:
        """The conversation newest first: live turns, deliveries, run markers and notes, with their
        kinds and run ids; ``cursor`` from the previous page. ValueError for a cursor that is not one."""
        from agentwake.store.keys import history_cursor_sk

        before = history_cursor_sk(cursor) if cursor is not None else None
        entries, next_cursor = self.store.history.conversation_page(
            session_id, limit=max(1, min(MAX_PAGE, int(limit))), before=before
        )
        return ConversationPage(entries=entries, cursor=next_cursor)


def _ttl(ttl_s: float) -> float:
    ttl = float(ttl_s)
    if not 0 < ttl <= MAX_TURN_TTL_S:
        raise ConfigError(f"a live turn's ttl_s must be in (0, {MAX_TURN_TTL_S:.0f}] seconds, not {ttl_s}")
    return ttl
