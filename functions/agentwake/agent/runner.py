"""The agent runner: IDLE → RUNNING → DONE | ERROR, one model call per step, journaled steps.

ERROR is a state with a completion text, never an exception out of the runner: the wake use
cases read the state and decide (DONE → commit the note, ERROR → record a failure and raise).
The one exception that does escape is an infrastructure failure (the journal cannot be written,
StepInterrupted from a tool): that is a crash, not an outcome, and the trigger retries it.

What a tool returns passes the redactor (``ToolRegistry.execute``) before the model, the journal,
the transcript or a delivery sees it; so does a result read back from the journal, and the final
answer the history note and deliver_final carry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal, Protocol

from agentwake.agent.bounds import MAX_TOOL_CALLS, check_deadline, too_many_calls
from agentwake.agent.guards import REPEAT_FINAL_MESSAGE, RepeatGuard
from agentwake.agent.journal import InMemoryJournal, StepJournal
from agentwake.agent.ledger import Limits, RunLedger
from agentwake.agent.tools import ToolContext, ToolRegistry
from agentwake.agent.types import ChatRequest, ModelReply, ToolSpec
from agentwake.domain.conversation import Message, ToolCall
from agentwake.domain.steps import FINAL_DELIVERY_KEY, approval_key, decision_key, reply_key, tool_key
from agentwake.errors import AllProvidersFailed, DeliveryError
from agentwake.trust.redact import redact, redact_data

if TYPE_CHECKING:
    from agentwake.agent.gate import ParkRequest

MAX_STEPS_MESSAGE = (
    "You have reached the maximum number of steps. Stop calling tools and answer directly with your final response now."
)

#: the journal key of a reply's verdict: a reply beyond the bounds is journaled as why, not as itself
MALFORMED_KEY = "malformed"
#: why ``if_nothing_sent`` did not send the final answer: the run had sent messages of its own
ALREADY_SENT = "the run had already sent the user its own message(s)"


DeliverFinal = Literal["if_nothing_sent", "always", "never"]


class AgentState(StrEnum):
    IDLE = "IDLE"
    RUNNING = "RUNNING"
    DONE = "DONE"
    ERROR = "ERROR"
    #: a tool call waits for a person's decision (issue 35): the run ends here, neither a success nor
    #: a failure, and resumes from its journal once decided (``Runner.park`` says which call)
    PARKED = "PARKED"


class ChatModel(Protocol):
    """What the runner needs of a model: the provider chain implements it."""

    def complete(self, request: ChatRequest) -> ModelReply: ...


@dataclass(frozen=True)
class RunEvent:
    """Something that happened in a run, for transcripts and logs."""

    kind: str  # "reply" | "tool" | "final_step" | "final_delivery" | "done" | "error"
    step: int
    data: dict[str, Any] = field(default_factory=dict)
    replayed: bool = False


class Runner:
    def __init__(
        self,
        *,
        model: ChatModel,
        tools: ToolRegistry,
        messages: Sequence[Message],
        context: ToolContext,
        journal: StepJournal | None = None,
        max_steps: int = 8,
        on_event: Callable[[RunEvent], None] | None = None,
        ledger: RunLedger | None = None,
        max_repeated_tool_calls: int | None = None,
        deliver_final: DeliverFinal = "never",
        max_tool_calls: int = MAX_TOOL_CALLS,
    ) -> None:
        if max_steps < 1:
            raise ValueError("max_steps must be at least 1")
        self.model = model
        self.tools = tools
        self.messages: list[Message] = list(messages)
        self.ledger = ledger if ledger is not None else RunLedger(Limits(max_deliveries_per_run=None))
        self.context = replace(context, ledger=self.ledger)
        self.journal: StepJournal = journal if journal is not None else InMemoryJournal()
        self.max_steps = max_steps
        self.on_event = on_event
        self.repeats = RepeatGuard(max_repeated_tool_calls)
        self.deliver_final = deliver_final
        #: the most tool calls one reply may make (agent/bounds.py); more ends the run MalformedOutput
        self.max_tool_calls = max_tool_calls
        #: delivery id of the final answer when deliver_final sent it (this attempt or an earlier one)
        self.final_delivery_id: str | None = None
        #: why the final answer was not delivered ("never", "something was sent", a cap), if it was not
        self.final_not_delivered: str | None = None
        self.state = AgentState.IDLE
        self.steps_done = 0
        self.final_response: ModelReply | None = None
        self.completion_text = ""
        self.error_type: str | None = None
        self.provider_errors: dict[str, str] = {}
        self.replayed_steps = 0
        self._tool_specs: tuple[ToolSpec, ...] = tools.specs()
        self._final_step = False
        self._final_reason = "max_steps"
        #: the call the run parked on (state PARKED), None otherwise
        self.park: ParkRequest | None = None

    @property
    def finished(self) -> bool:
        return self.state in (AgentState.DONE, AgentState.ERROR, AgentState.PARKED)

    def _emit(self, kind: str, step: int, replayed: bool = False, **data: Any) -> None:
        if self.on_event is not None:
            self.on_event(RunEvent(kind=kind, step=step, data=data, replayed=replayed))

    def _fail(self, step: int, error_type: str, text: str) -> None:
        self.state = AgentState.ERROR
        self.error_type = error_type
        self.completion_text = text
        self._emit("error", step, error_type=error_type, text=text)

    def enter_final_step(self, reason: Literal["max_steps", "repeated_calls"] = "max_steps") -> None:
        """Take every tool away and tell the model to answer directly; the next step is the last."""
        self._final_step = True
        self._final_reason = reason
        self._tool_specs = ()
        message = MAX_STEPS_MESSAGE if reason == "max_steps" else REPEAT_FINAL_MESSAGE
        self.messages.append(Message(role="user", content=message))
        self._emit("final_step", self.steps_done, message=message, reason=reason)

    def step(self) -> AgentState:
        """Run one step: one model call (or its journaled reply), then its tool calls."""
        if self.finished:
            raise RuntimeError(f"the run already ended in {self.state.value}")
        self.state = AgentState.RUNNING
        n = self.steps_done
        key = reply_key(n)
        recorded = self.journal.get(key)
        if recorded is not None:
            reply = ModelReply.from_dict(recorded)
            self.replayed_steps += 1
            # the verdict on a reply beyond the bounds (or a reply journaled before they existed):
            # stop again without calling the model
            refused = recorded.get(MALFORMED_KEY) or too_many_calls(reply.tool_calls, max_calls=self.max_tool_calls)
            if refused:
                self._refuse_reply(n, reply, str(refused), replayed=True)
                return self.state
        else:
            over = self.ledger.budget_exceeded(before_call=True)
            if over:
                self._fail(n, "BudgetExceeded", f"token budget exceeded before step {n}: {over}")
                return self.state
            request = ChatRequest(
                messages=tuple(self.messages), tools=self._tool_specs, step=n, run_id=self.context.run_id
            )
            try:
                reply = self.model.complete(request)
            except AllProvidersFailed as exc:
                self.provider_errors = dict(exc.errors)
                self._fail(n, "AllProvidersFailed", str(exc))
                return self.state
            except Exception as exc:  # a model that is not a chain: still ERROR, never a raise
                self._fail(n, type(exc).__name__, f"the chat model failed: {type(exc).__name__}: {exc}")
                return self.state
            refused = too_many_calls(reply.tool_calls, max_calls=self.max_tool_calls)
            if refused:
                self._refuse_reply(n, reply, refused, replayed=False)
                return self.state
            # a reply that echoes a secret (a provider's key in its text, a credential in a tool
            # call's arguments) carries it no further: not to the journal, the transcript, another
            # provider of the chain, or a tool
            reply = ModelReply.from_dict(redact_data(reply.to_dict()))
            if not (self._final_step and reply.tool_calls):
                # a final step that still calls tools is a failed step: never journaled, so a
                # retry or redrive asks the (perhaps fixed) model again instead of replaying it
                self.journal.put(key, reply.to_dict())
        self.messages.append(reply.to_message())
        self.steps_done += 1
        self.ledger.record_call(n, reply.provider_id, reply.usage, replayed=recorded is not None)
        self._emit(
            "reply",
            n,
            replayed=recorded is not None,
            text=reply.text,
            tool_calls=[c.to_dict() for c in reply.tool_calls],
            provider_id=reply.provider_id,
            truncated=reply.truncated,
            usage=reply.usage.to_dict() if reply.usage else None,
        )
        over = self.ledger.budget_exceeded() if reply.tool_calls else None
        if over:
            # the reply is journaled (it was billed); a retry or redrive replays it, finds the budget
            # still exceeded and stops again without calling the model. A reply that ends the run
            # is kept even if it crossed the budget: its tokens are spent and the answer exists.
            self._fail(n, "BudgetExceeded", f"token budget exceeded at step {n}: {over}")
            return self.state

        if not reply.tool_calls:
            self.state = AgentState.DONE
            self.final_response = reply
            self.completion_text = redact(reply.text)
            self._deliver_final(n, self.completion_text)
            if self.state is AgentState.DONE:
                self._emit("done", n, text=self.completion_text)
            return self.state
        if self._final_step:
            names = ", ".join(c.name or "?" for c in reply.tool_calls)
            if self._final_reason == "repeated_calls":
                self._fail(
                    n,
                    "RepeatedToolCalls",
                    f"kept repeating the same tool call and still called tools when told to answer: {names}",
                )
            else:
                self._fail(
                    n,
                    "MaxStepsExceeded",
                    f"did not finish within {self.max_steps} steps (still calling tools: {names})",
                )
            return self.state

        force_final = False
        for i, call in enumerate(reply.tool_calls):
            check_deadline(f"running tool call {i + 1} of {len(reply.tool_calls)} of step {n}")
            verdict = self.repeats.observe(call)
            tkey = tool_key(n, i)
            done = self.journal.get(tkey)
            if done is not None:
                result = redact(done["content"])  # journaled before results were redacted, perhaps
                for delivery_id in done.get("deliveries") or ():
                    self.ledger.record_delivery(str(delivery_id), fresh=False)
            else:
                before = len(self.ledger.deliveries)
                value: dict[str, Any] = {"tool": call.name}
                if verdict == "warn":
                    result = self.repeats.warning(call)
                elif verdict == "stop":
                    result = self.repeats.stopped(call)
                else:
                    gated = self._gated(n, i, call)
                    if gated is None:
                        return self.state  # PARKED: the calls after this one are not touched
                    refusal, decided = gated
                    value.update(decided)
                    result = refusal if refusal is not None else self.tools.execute(call, self.context.for_call(n, i))
                value["content"] = result
                if verdict == "run" and len(self.ledger.deliveries) > before:
                    value["deliveries"] = self.ledger.deliveries[before:]
                self.journal.put(tkey, value)
            force_final = force_final or verdict == "stop"
            self.messages.append(Message(role="tool", content=result, tool_call_id=call.id, name=call.name))
            self._emit("tool", n, replayed=done is not None, name=call.name, arguments=call.arguments, result=result)
        if force_final:
            self.enter_final_step("repeated_calls")
        return self.state

    def _gated(self, step: int, index: int, call: ToolCall) -> tuple[str | None, dict[str, Any]] | None:
        """The approval gate of one call not yet journaled: None when the run parks on it (gated, no
        decision journaled); else (the refusal the model reads instead of calling it, or None to call
        it; what its tool step records of the decision). What was asked stays asked: a journaled
        request governs, not the current rule."""
        asked = self.journal.get(approval_key(step, index))
        gate = None if asked is not None else self.tools.gate(call)
        if asked is None and gate is None:
            return None, {}
        decision = self.journal.get(decision_key(step, index))
        if decision is None:
            from agentwake.agent.gate import Gate, ParkRequest  # a parking run's (cold start)

            if gate is None:  # asked before, the rule changed since: it still waits for that decision
                from agentwake.domain.approvals import ApprovalRule

                gate = Gate(
                    tool=call.name or "?", rule=ApprovalRule(), words=str((asked or {}).get("rule")), arguments={}
                )
            self.state = AgentState.PARKED
            self.park = ParkRequest(step=step, index=index, call=call, gate=gate, asked=asked)
            self._emit("parked", step, tool=call.name, index=index, rule=gate.words)
            return None
        record = {"approval_id": decision.get("approval_id"), "decided_by": decision.get("by")}
        if decision.get("decision") == "approved":
            return None, record
        from agentwake.domain.approvals import decision_result

        text = decision_result(
            str(decision.get("decision")),
            by=str(decision.get("by") or "?"),
            via=decision.get("via"),
            reason=decision.get("reason"),
            expired=bool(decision.get("expired")),
            expires_in_s=(asked or {}).get("expires_in_s"),
        )
        return text, {**record, "decision": decision.get("decision")}

    def _refuse_reply(self, step: int, reply: ModelReply, reason: str, *, replayed: bool) -> None:
        """End the run in ERROR ``MalformedOutput``: the reply is beyond the bounds (agent/bounds.py).

        What is journaled is the verdict with the call's usage (it was billed), never the reply
        itself: a retry or redrive replays the verdict and stops here without calling the model."""
        if not replayed:
            verdict = ModelReply(provider_id=reply.provider_id, usage=reply.usage).to_dict()
            verdict[MALFORMED_KEY] = reason
            self.journal.put(reply_key(step), verdict)
        self.steps_done += 1
        self.ledger.record_call(step, reply.provider_id, reply.usage, replayed=replayed)
        self._fail(
            step,
            "MalformedOutput",
            f"malformed model output at step {step}: {reason}. The verdict is journaled: a retry or redrive "
            "stops here without calling the model again",
        )

    def _deliver_final(self, step: int, text: str) -> None:
        """deliver_final: send the final answer through the send tool, once per run (journaled
        under its own key, recorded as a delivery with the id ``{run_id}#final``)."""
        recorded = self.journal.get(FINAL_DELIVERY_KEY)
        if recorded is not None:
            self.final_delivery_id = recorded.get("delivery_id")
            self.final_not_delivered = recorded.get("not_delivered")
            if self.final_delivery_id:
                self.ledger.record_delivery(self.final_delivery_id, fresh=False)
            self._emit("final_delivery", step, replayed=True, **recorded)
            return
        if self.deliver_final == "never":
            self.final_not_delivered = "deliver_final is never"
            return
        if self.deliver_final == "if_nothing_sent" and self.ledger.deliveries:
            self.final_not_delivered = ALREADY_SENT
            return
        tool = self.tools.get("send_message_to_user")
        send_final = getattr(tool, "send_final", None)
        if send_final is None:
            self.final_not_delivered = "no send_message_to_user tool"
            return
        try:
            delivery_id = send_final(text, self.context)
        except DeliveryError as exc:
            # not delivered for sure: the run is retried, the journal replays up to here
            self._fail(step, "DeliveryFailed", f"the final answer could not be delivered: {exc}")
            return
        entry: dict[str, Any] = {"tool": "send_message_to_user", "delivery_id": delivery_id}
        if delivery_id is None:
            entry["not_delivered"] = self.ledger.delivery_refused(final=True) or "refused"
        self.journal.put(FINAL_DELIVERY_KEY, entry)
        self.final_delivery_id = delivery_id
        self.final_not_delivered = entry.get("not_delivered")
        self._emit("final_delivery", step, **entry)

    def run(self, max_steps: int | None = None) -> AgentState:
        """Step until DONE or ERROR. After ``max_steps`` steps, one final tool-less step."""
        if max_steps is not None:
            if max_steps < 1:
                raise ValueError("max_steps must be at least 1")
            self.max_steps = max_steps
        while not self.finished:
            if self.steps_done >= self.max_steps and not self._final_step:
                self.enter_final_step()
            self.step()
        return self.state
