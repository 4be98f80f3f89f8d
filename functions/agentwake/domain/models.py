"""What the store keeps: sessions, history entries, tasks (jobs, runs and failures: ``agentwake.domain.run_models``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentwake.domain.conversation import HISTORY_WINDOW_BYTES, Message

#: DynamoDB items are capped at 400 KB; long text is cut well below that, with a visible marker
MAX_TEXT_CHARS = 60_000
#: how long a task may run before it is completed ``failed`` (timed out), unless it names its own
DEFAULT_TASK_DEADLINE_S = 3600


def background_run_id(task_id: str, outcome: int = 1) -> str:
    """The run a finished background task wakes: stable across retries and redrives.

    ``outcome``: which outcome of the task this wake is for. A task has one, unless its work failed,
    was dead-lettered, redriven and then succeeded: that second outcome wakes ``bg:{task_id}:2``
    (one wake per outcome, never two for one)."""
    return f"bg:{task_id}" if outcome <= 1 else f"bg:{task_id}:{outcome}"


def subagent_run_id(task_id: str) -> str:
    """The run of a background subagent that task ``task_id`` started (journaled, retried,
    dead-lettered and redriven like any run; it writes no history and holds no session)."""
    return f"sub:{task_id}"


def cron_run_id(job_id: str, scheduled_time: str) -> str:
    """The run a cron firing wakes (never the Scheduler execution id: it changes per attempt)."""
    return f"cron:{job_id}:{scheduled_time}"


def utcnow_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def truncate(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """At most ``limit`` characters (at most 4 UTF-8 bytes each, so 60,000 are at most 240 KB),
    lone surrogates replaced (DynamoDB refuses them), cut with a visible marker."""
    from agentwake.store.itemsize import safe_text

    text = safe_text(text)
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    return text[:limit] + f"\n…[truncated {cut} characters]"


class _Stored(BaseModel):
    # built on first use, not at import: a wake validates only the few kinds it reads (cold start).
    # Empty collections are plain defaults (pydantic copies a mutable default for each instance),
    # not ``default_factory=list``: pydantic inspects a factory's signature, and for a builtin that
    # means tokenizing its text signature (about 2 ms of a cold start; tests/unit/test_models_defaults.py).
    model_config = ConfigDict(extra="ignore", defer_build=True)
    #: fields stored as JSON strings (nested structures; avoids DynamoDB Decimal round trips)
    JSON_FIELDS: ClassVar[frozenset[str]] = frozenset()


class TokenPrice(BaseModel):
    """USD per million tokens, for the estimated cost of a run (an estimate, not a bill)."""

    model_config = ConfigDict(extra="forbid")

    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)


DeliverFinal = Literal["if_nothing_sent", "always", "never"]


class SelfWakePolicy(BaseModel):
    """The guardrails on the wakes an agent schedules for itself (docs/self-scheduling.md). A
    request over a limit is a tool result the model reads, never a failed run."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    #: the agent's pending wakes (jobs it created that may still fire) at once
    max_pending: int = Field(default=5, ge=1, le=100)
    #: how far ahead a wake (or a recurring wake's first fire) may be
    max_days_ahead: int = Field(default=31, ge=1, le=366)
    #: a recurring wake stops after this many fires
    max_fires: int = Field(default=32, ge=1, le=1000)
    #: a recurring wake fires at most this often
    min_interval_s: int = Field(default=3600, ge=60, le=31 * 86_400)


class SessionConfig(_Stored):
    """How a session's agent is built when it is woken."""

    JSON_FIELDS = frozenset({"providers", "delivery", "prices", "tools", "owners", "self_wakes", "subagents"})

    session_id: str = Field(min_length=1, max_length=128)
    persona: str = "You are a helpful assistant."
    #: provider chain: primary first, then fallbacks (specs as in agentwake.agent.providers). No
    #: default: a config names its providers (refused when written without, agentwake.trust.session_checks);
    #: one stored empty by an older version fails its wake with a ConfigError, never runs scripted
    providers: list[dict[str, Any]] = []
    max_steps: int = Field(default=8, ge=1, le=50)
    history_window: int = Field(default=20, ge=0, le=200)
    #: the history window's bound in bytes of message text (UTF-8), besides its count: newer entries
    #: win, the one crossing it is cut with a marker (docs/woken-agent.md, "The history window")
    history_window_bytes: int = Field(default=HISTORY_WINDOW_BYTES, ge=1024, le=1_000_000)
    delivery: dict[str, Any] = Field(default_factory=lambda: {"type": "log"})
    role: Literal["user", "admin"] = "user"
    #: per-provider retries of transient errors (the chain's backoff is bounded by the Lambda deadline)
    retry_max_attempts: int = Field(default=3, ge=1, le=10)
    retry_base_delay_ms: int = Field(default=500, ge=0, le=60_000)
    #: send the final answer to the user when the run ends DONE: if it delivered nothing
    #: (default), always, or never (docs/woken-agent.md)
    deliver_final: DeliverFinal = "if_nothing_sent"
    #: the same tool call this many times in a row: the model is told, once more forces the final step
    max_repeated_tool_calls: int = Field(default=3, ge=2, le=50)
    #: send_message_to_user calls delivered per run; more get an ``error:`` result and are not sent
    max_deliveries_per_run: int = Field(default=3, ge=0, le=100)
    #: deliveries to this session per UTC day, all runs together (None: no cap)
    max_deliveries_per_day: int | None = Field(default=None, ge=0)
    #: input + output tokens per run / per session per UTC day; over it the run stops with
    #: BudgetExceeded, a permanent failure (None: no budget)
    max_tokens_per_run: int | None = Field(default=None, ge=1)
    max_tokens_per_day: int | None = Field(default=None, ge=1)
    #: price per provider id or model, for the estimated cost (overrides the stack's AGENTWAKE_PRICES)
    prices: dict[str, TokenPrice] = {}
    #: tools besides send_message_to_user: HTTP tools and entry-point Python tools (docs/tools.md)
    tools: list[dict[str, Any]] = Field(default=[], max_length=32)
    #: a live turn beginning while a run holds the session waits this long for it, then is told
    #: "busy" with the holder's run id (0: busy at once). docs/durability.md, "Live turns"
    live_turn_wait_s: float = Field(default=10.0, ge=0, le=25)
    #: the IAM principals that may act on the session over the product API: the one that created it
    #: there, and those it names (normalised: a role's sessions belong to the role). None: the API
    #: refuses every call for it until an operator adds one (agentwake.trust.principals, docs/security.md)
    owners: list[str] = Field(default=[], max_length=20)
    #: may the woken agent schedule its own wakes, and within which limits (None: it may not).
    #: docs/self-scheduling.md
    self_wakes: SelfWakePolicy | None = None
    #: subagents the agent may hand work to, in the foreground or in the background (docs/subagents.md)
    subagents: list[dict[str, Any]] = Field(default=[], max_length=8)
    #: a task this session's agent or the product starts without a deadline of its own ends ``failed``
    #: (timed out) after this many seconds
    task_deadline_s: int = Field(default=DEFAULT_TASK_DEADLINE_S, ge=60, le=7 * 86_400)
    updated_at: str = Field(default_factory=utcnow_iso)

    @field_validator("owners")
    @classmethod
    def _normal_owners(cls, value: list[str]) -> list[str]:
        from agentwake.trust.principals import normal_owners

        return normal_owners(value)

    @property
    def has_daily_limits(self) -> bool:
        """A cap or budget per UTC day: the session's runs then count on its daily counters."""
        return self.max_tokens_per_day is not None or self.max_deliveries_per_day is not None


HistoryKind = Literal["message", "marker", "note", "delivery", "live"]


class HistoryEntry(_Stored):
    session_id: str
    role: Literal["user", "assistant"]
    content: str
    kind: HistoryKind = "message"
    run_id: str | None = None
    delivery_id: str | None = None
    created_at: str = Field(default_factory=utcnow_iso)
    sk: str = ""

    @field_validator("content")
    @classmethod
    def _cap(cls, v: str) -> str:
        return truncate(v)

    def to_message(self) -> Message:
        return Message(role=self.role, content=self.content)


TaskStatus = Literal["running", "finished", "woken", "failed", "cancelled"]
#: who runs a task's work: the product (``producer``), or agentwake's background-work function
#: (a background ``tool`` or a background ``subagent`` the agent or the product API started)
TaskKind = Literal["producer", "tool", "subagent"]


#: a task's registered arguments are shown to the woken agent; they stay below this (UTF-8 JSON)
MAX_TOOL_ARGS_BYTES = 64 * 1024


def task_token_hash(token: str) -> str:
    """What the store keeps of a task token: its SHA-256 (the token itself is never stored)."""
    import hashlib

    return hashlib.sha256(token.encode("utf-8", errors="surrogatepass")).hexdigest()


class Task(_Stored):
    """A background task the agent started; the wake for its result is run ``bg:{task_id}``.

    ``token_sha256``: the hash of the task token ``register_task`` returned; only a completion
    message carrying that token may wake the agent for this task (a capability, like Step
    Functions task tokens).
    """

    JSON_FIELDS = frozenset({"tool_args"})

    task_id: str
    session_id: str
    tool_name: str
    tool_args: dict[str, Any] = {}
    token_sha256: str | None = None
    status: TaskStatus = "running"
    created_at: str = Field(default_factory=utcnow_iso)
    finished_at: str | None = None
    last_error: str | None = None
    kind: TaskKind = "producer"
    #: the run that started it, and the tool call (``{run}#{step}#{call}``): None when the product did
    started_by: str | None = None
    started_by_call: str | None = None
    #: the subagent a ``subagent`` task runs (its spec is in the session's config)
    subagent: str | None = None
    #: past this (ISO UTC) a task with no outcome is completed ``failed`` (timed out), once
    deadline_at: str | None = None
    #: the outcome claimed so far (the first completion, the deadline or a cancel claims it), why, and
    #: how many outcomes there were (2: its work failed, was redriven and then succeeded)
    outcome: Literal["succeeded", "failed"] | None = None
    outcome_reason: str | None = None
    outcomes: int = 0
    cancelled_at: str | None = None
    #: when its deadline completed it ``failed`` (timed out); a later completion is late
    timed_out_at: str | None = None
    #: completions that arrived after the task had its outcome (cancelled, timed out): changed nothing
    late_completions: int = 0
    #: a ``tool``/``subagent`` task whose work the background-work function has begun: the hash of
    #: the token its work message carried (a retried start then sends nothing: docs/background-work.md)
    work_claimed: str | None = None
    #: the deadline check that holds the place in the task's one chain of checks: each check takes it
    #: over from the check that sent it (a conditional write); a second successor finds it taken, retires
    deadline_check: str | None = None

    @property
    def run_id(self) -> str:
        return background_run_id(self.task_id, max(self.outcomes, 1))

    @field_validator("tool_args")
    @classmethod
    def _bounded_args(cls, v: dict[str, Any]) -> dict[str, Any]:
        import json

        size = len(json.dumps(v, ensure_ascii=False, default=str).encode("utf-8", errors="surrogatepass"))
        if size > MAX_TOOL_ARGS_BYTES:
            raise ValueError(f"tool_args are {size} bytes as JSON; at most {MAX_TOOL_ARGS_BYTES} are kept")
        return v

    def token_matches(self, token: str | None) -> bool:
        """Does ``token`` complete this task? Compared in constant time; no token, no match."""
        import hmac

        if not token or not self.token_sha256:
            return False
        return hmac.compare_digest(task_token_hash(token), self.token_sha256)
