"""The product API: the runtime's sessions and tasks API over HTTP (an HTTP API with IAM auth in
front of ProductApiFunction; docs/product-api.md). Validation comes from the pydantic models below,
and the OpenAPI document ``schemas/product-api.openapi.json`` is generated from them.

Every route acts for the caller API Gateway verified (``requestContext.authorizer.iam``), and only
on sessions the caller owns (``agentwake.product.authority``): anything else is 403 naming the session
and why. Routes (every error is JSON ``{"error": "..."}``; no token is ever in an error or a log line):

- ``PUT /sessions/{session_id}`` create a session (the caller becomes its owner, with any ``owners``
  named) → 201, or update the given fields of one the caller owns → 200; the checks of
  ``agentwake sessions put`` (``Records.put_session``)
- ``GET /sessions/{session_id}`` its config; ``DELETE /sessions/{session_id}`` its config and history
- ``POST /sessions/{session_id}/live-turns`` begin a live turn → 201 turn_id, token, expires_at;
  409 with ``holder`` when the session stays busy past the wait (product/sessions.py)
- ``POST /sessions/{session_id}/live-turns/{turn_id}/renew`` → 200 expires_at (never past the turn's
  cap); 409 when lost, or ``LiveTurnCapped`` once the turn has held the session as long as one may
  (the session is then handed to the next waiter)
- ``DELETE /sessions/{session_id}/live-turns/{turn_id}`` (header ``X-Agentwake-Turn-Token``) → 200
- ``POST /sessions/{session_id}/messages`` append under the turn, once per idempotency key → 201;
  409 for a token that does not hold the session (whether or not the key was used); 413 for a
  message or an append larger than the store takes, before any write
- ``GET /sessions/{session_id}/conversation?cursor=&limit=`` newest first
- ``POST /tasks`` register (never overwrites an existing task id: 409) → 201 with the token, once
- ``GET /tasks/{task_id}`` status only; with the task's token in ``X-Agentwake-Task-Token`` also its
  session and registered arguments (a caller never reads another task's arguments)
- ``POST /tasks/{task_id}/completion`` the completion (the published schema): its outcome claimed, then
  enqueued → 202; 409 ``TaskAlreadyEnded`` when the task was cancelled, timed out or completed otherwise
  (nothing sent; counted as a late completion)
- ``GET /sessions/{session_id}/wakes``, ``DELETE /sessions/{session_id}/wakes/{wake_id}``: the wakes
  its agent scheduled for itself (``product/api_wakes.py``)
- a session's tasks: start one, list them, cancel one (``product/api_tasks.py``)
- WebSocket push: a page's ticket, the unread mark and clearing it (``product/api_push.py``)
- approval requests: a session's, one, and deciding one (``product/api_approvals.py``)
"""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.openapi.params import Header, Path, Query

from agentwake import bootstrap
from agentwake.domain.models import SessionConfig, utcnow_iso
from agentwake.errors import (
    AgentwakeError,
    ApprovalAlreadyDecided,
    ConfigError,
    ForgedCompletion,
    ForgedDecision,
    InvalidMessage,
    NotAnOwner,
    SessionBusy,
    SessionChanged,
    SessionExists,
    TaskAlreadyEnded,
    TaskExists,
    UnknownApproval,
    UnknownSession,
    UnknownTask,
)
from agentwake.observability import logger
from agentwake.product.api_approvals import router as approvals_router
from agentwake.product.api_models import (  # the models (re-exported: callers import them from here)
    ADMIN_BY_OPERATOR,
    AppendBody,
    AppendResult,
    BeginTurn,
    CompletionBody,
    Conversation,
    Ended,
    Enqueued,
    Entry,
    RegisterBody,
    Registered,
    Renewed,
    RenewTurn,
    SessionBody,
    SessionDeleted,
    TaskStatusOut,
    Turn,
)
from agentwake.product.api_push import router as push_router
from agentwake.product.api_tasks import owned_task, task_out
from agentwake.product.api_tasks import router as tasks_router
from agentwake.product.api_wakes import router as wakes_router
from agentwake.product.authority import caller, owned_session, require_owner
from agentwake.product.sessions import (
    DEFAULT_PAGE,
    MAX_PAGE,
    MAX_TOKEN_CHARS,
    MAX_TURN_ID_CHARS,
    AppendTooLarge,
    LiveTurn,
    LiveTurnCapped,
    LiveTurnLost,
)
from agentwake.wake.messages import ID_PATTERN, MAX_DEPTH

TITLE = "agentwake product API"
VERSION = "1"
TURN_TOKEN_HEADER = "X-Agentwake-Turn-Token"
TASK_TOKEN_HEADER = "X-Agentwake-Task-Token"


class BodyTooDeep(ValueError):
    """A request body that nests deeper than ``MAX_DEPTH`` (a 400, before the parser recurses)."""


def _bounded_json(body: str) -> Any:
    """The request body parsed, once its nesting is known to be within ``MAX_DEPTH`` (a linear scan
    of the text, as a model's tool arguments are scanned): no depth exhausts the parser's recursion."""
    import json

    from agentwake.agent.bounds import json_depth

    if json_depth(body, MAX_DEPTH) > MAX_DEPTH:
        raise BodyTooDeep(
            f"the request body nests deeper than {MAX_DEPTH} levels (tool arguments included); send flatter JSON"
        )
    return json.loads(body)


app = APIGatewayHttpResolver(enable_validation=True, json_body_deserializer=_bounded_json)
app.include_router(wakes_router)  # a session's self-scheduled wakes (product/api_wakes.py)

SessionId = Annotated[str, Path(pattern=ID_PATTERN)]
TurnId = Annotated[str, Path(min_length=1, max_length=MAX_TURN_ID_CHARS)]
TaskId = Annotated[str, Path(pattern=ID_PATTERN)]


def _json(status: int, body: Any) -> Response[Any]:
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=body)


def _turn(session_id: str, turn_id: str, token: str) -> LiveTurn:
    return LiveTurn(session_id=session_id, turn_id=turn_id, token=token, expires_at=0.0)


def _caller() -> str | None:
    return caller(app.current_event.raw_event)


def _owned(session_id: str, *, subject: str = "") -> SessionConfig:
    """The session's config when the caller owns it (else 403/404: product/authority.py)."""
    return owned_session(app.current_event.raw_event, session_id, subject=subject)


# -- sessions -------------------------------------------------------------------------------------


@app.put(
    "/sessions/<session_id>",
    responses={
        403: {"description": "not an owner"},
        409: {"description": "changed meanwhile, or (If-None-Match: *) the id is taken"},
    },
)
def put_session(
    session_id: SessionId,
    body: SessionBody,  # type: ignore[valid-type]
    if_none_match: Annotated[str | None, Header(alias="if-none-match", max_length=16)] = None,
) -> Response[SessionConfig]:
    from dataclasses import replace

    from agentwake.trust.session_checks import default_rules, secret_refs

    records = bootstrap.store().records
    existing = records.get_session(session_id)
    given = body.model_dump(exclude_unset=True)  # type: ignore[attr-defined]
    if if_none_match is not None and if_none_match.strip() != "*":
        raise ValueError("If-None-Match: only * is understood (create the session only if its id is free)")
    if given.get("role") == "admin" and (existing is None or existing.role != "admin"):
        raise ValueError(ADMIN_BY_OPERATOR)
    principal = _caller()
    if existing is None:
        if principal is None:
            require_owner(session_id, None, None)  # NotAnOwner: no identity
        before = records.deleted_owners(session_id)
        if before is not None and principal not in before:
            raise NotAnOwner(
                f"session {session_id}: its owners deleted it, and its id is not given to another principal "
                "(a task registered for it may still complete); choose another id"
            )
        data = {**given, "session_id": session_id, "owners": [principal, *given.get("owners", [])]}
    elif if_none_match is not None:
        raise SessionExists(
            f"session {session_id} exists already (If-None-Match: *): nothing was written; choose another id"
        )
    else:
        require_owner(session_id, existing, principal)
        if "owners" in given and not given["owners"]:
            raise ValueError("owners: a session keeps at least one owner (to leave it, name the others)")
        data = {**existing.model_dump(), **given, "updated_at": utcnow_iso()}
    config = SessionConfig.model_validate(data)
    # the checks of `agentwake sessions put`, and: a secret reference added over the API names one of
    # the session's own secrets (those an operator set stay)
    kept = secret_refs(existing) if existing is not None else frozenset()
    rules = replace(default_rules(), own_secrets_of=session_id, kept=kept)
    records.put_session(config, rules, replacing=existing)
    return _json(201 if existing is None else 200, config.model_dump(mode="json"))


@app.get("/sessions/<session_id>")
def get_session(session_id: SessionId) -> SessionConfig:
    return _owned(session_id)


@app.delete("/sessions/<session_id>")
def delete_session(session_id: SessionId) -> SessionDeleted:
    from agentwake.store.operator import OperatorStore

    config = _owned(session_id)
    store = bootstrap.store()
    store.records.mark_deleted(session_id, config.owners)  # first: the id stays its owners'
    return SessionDeleted(
        session_id=session_id, deleted_items=OperatorStore(store).delete_session(session_id, keep_deleted_mark=True)
    )


# -- live turns and the conversation --------------------------------------------------------------


@app.post("/sessions/<session_id>/live-turns", responses={409: {"description": "the session is busy"}})
def begin_turn(session_id: SessionId, body: BeginTurn | None = None) -> Response[Turn]:
    config = _owned(session_id)
    body = body or BeginTurn()  # no body: the defaults
    turn = bootstrap.sessions().begin_live_turn(session_id, ttl_s=body.ttl_s, wait_s=body.wait_s, config=config)
    return _json(201, Turn(turn_id=turn.turn_id, token=turn.token, expires_at=turn.expires_at).model_dump())


@app.post("/sessions/<session_id>/live-turns/<turn_id>/renew")
def renew_turn(session_id: SessionId, turn_id: TurnId, body: RenewTurn) -> Renewed:
    _owned(session_id)
    turn = bootstrap.sessions().renew_live_turn(_turn(session_id, turn_id, body.token), ttl_s=body.ttl_s)
    return Renewed(turn_id=turn_id, expires_at=turn.expires_at)


@app.delete("/sessions/<session_id>/live-turns/<turn_id>")
def end_turn(
    session_id: SessionId,
    turn_id: TurnId,
    token: Annotated[str, Header(alias=TURN_TOKEN_HEADER.lower(), min_length=1, max_length=MAX_TOKEN_CHARS)],
) -> Ended:
    _owned(session_id)
    handed = bootstrap.sessions().end_live_turn(_turn(session_id, turn_id, token))
    return Ended(turn_id=turn_id, handed_to=handed)


@app.post("/sessions/<session_id>/messages")
def append_messages(session_id: SessionId, body: AppendBody) -> Response[AppendResult]:
    _owned(session_id)
    done = bootstrap.sessions().append(
        _turn(session_id, body.turn_id, body.token),
        [(m.role, m.content) for m in body.messages],
        idempotency_key=body.idempotency_key,
    )
    return _json(
        201 if done.written else 200, AppendResult(written=done.written, entries=len(done.sort_keys)).model_dump()
    )


@app.get("/sessions/<session_id>/conversation")
def conversation(
    session_id: SessionId,
    cursor: Annotated[str | None, Query(max_length=256)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = DEFAULT_PAGE,
) -> Conversation:
    _owned(session_id)
    page = bootstrap.sessions().read_conversation(session_id, cursor=cursor, limit=limit)
    return Conversation(
        entries=[
            Entry(
                kind=e.kind,
                role=e.role,
                content=e.content,
                run_id=e.run_id,
                delivery_id=e.delivery_id,
                created_at=e.created_at,
            )
            for e in page.entries
        ],
        cursor=page.cursor,
    )


@app.post("/tasks", responses={409: {"description": "the task id is registered already"}})
def register_task(body: RegisterBody) -> Response[Registered]:
    config = _owned(body.session_id)  # 404 for a session that does not exist: its wake could never run
    task = bootstrap.tasks().register_task(
        body.session_id,
        body.tool_name,
        body.args,
        task_id=body.task_id,
        deadline_s=body.deadline or config.task_deadline_s,
    )
    return _json(201, Registered(task_id=task.task_id, task_token=task.task_token).model_dump())


@app.get("/tasks/<task_id>")
def task_status(
    task_id: TaskId, token: Annotated[str | None, Header(alias=TASK_TOKEN_HEADER.lower(), max_length=256)] = None
) -> TaskStatusOut:
    task = owned_task(task_id)
    out = task_out(task)
    if token is not None and task.token_matches(token):
        out.session_id, out.args = task.session_id, task.tool_args
    return out


@app.post("/tasks/<task_id>/completion", responses={409: {"description": "the task already ended"}})
def complete_task(task_id: TaskId, body: CompletionBody) -> Response[Enqueued]:
    owned_task(task_id)
    message_id = bootstrap.tasks().finish_task(
        task_id,
        body.status,
        body.result_text,
        task_token=body.task_token,
        summary_name=body.summary_name,
        note=body.note,
        subagent_name=body.subagent_name,
    )
    return _json(202, Enqueued(task_id=task_id, message_id=message_id).model_dump())


# -- errors: JSON with a clear message, never a token ----------------------------------------------

_STATUS: tuple[tuple[type[Exception], int], ...] = (
    (SessionBusy, 409),
    (LiveTurnLost, 409),  # and LiveTurnCapped: a renewal past the turn's cap
    (AppendTooLarge, 413),
    (TaskExists, 409),
    (TaskAlreadyEnded, 409),  # a completion or a cancel for a task that ended otherwise: nothing changed
    (SessionChanged, 409),
    (SessionExists, 409),
    (ApprovalAlreadyDecided, 409),  # a different decision stands: the answer says which, by whom, when, why
    (UnknownTask, 404),
    (UnknownApproval, 404),
    (UnknownSession, 404),
    (ForgedCompletion, 403),
    (ForgedDecision, 403),
    (NotAnOwner, 403),
    (ConfigError, 400),  # a session config its wakes would refuse (secret scope, outbound policy)
    (InvalidMessage, 400),
)


@app.exception_handler(
    [
        SessionBusy,
        LiveTurnLost,
        LiveTurnCapped,
        AppendTooLarge,
        TaskExists,
        TaskAlreadyEnded,
        SessionChanged,
        SessionExists,
        ApprovalAlreadyDecided,
        UnknownTask,
        UnknownApproval,
        UnknownSession,
        ForgedCompletion,
        ForgedDecision,
        NotAnOwner,
        ConfigError,
        InvalidMessage,
    ]
)
def _known(exc: AgentwakeError) -> Response[Any]:
    status = next(code for cls, code in _STATUS if isinstance(exc, cls))
    body: dict[str, Any] = {"error": str(exc), "type": exc.error_type}
    if isinstance(exc, SessionBusy):
        body["holder"] = getattr(exc, "holder", None)
    if isinstance(exc, ApprovalAlreadyDecided) and exc.approval is not None:
        from agentwake.product.api_models import ApprovalOut

        body["approval"] = ApprovalOut.of(exc.approval).model_dump(mode="json")
    return _json(status, body)


@app.exception_handler(ValueError)
def _bad_value(exc: ValueError) -> Response[Any]:
    from pydantic import ValidationError

    from agentwake.errors import describe_validation_error

    # a model's refusal (too large arguments, ...) says where and what, never the input
    said = describe_validation_error(exc) if isinstance(exc, ValidationError) else str(exc)[:500]
    return _json(400, {"error": said, "type": "BadRequest"})


@app.exception_handler(RequestValidationError)
def _invalid(exc: RequestValidationError) -> Response[Any]:
    # where and what, never the input itself (it may hold a token)
    # each part of a location at most 64 characters, each message 200: a location may be a key the
    # caller sent, of any size (an error is public, and bounded)
    problems = [
        {"loc": [_cut(str(p), 64) for p in e["loc"][:8]], "msg": _cut(str(e["msg"]), 200)} for e in exc.errors()[:10]
    ]
    said = "; ".join(f"{'.'.join(p['loc'])}: {p['msg']}" for p in problems)
    return _json(422, {"error": f"invalid request: {said}", "type": "ValidationError", "detail": problems})


@app.not_found
def _no_route(exc: Exception) -> Response[Any]:
    return _json(404, {"error": "no such route (see schemas/product-api.openapi.json)", "type": "NotFound"})


@app.exception_handler(Exception)
def _unexpected(exc: Exception) -> Response[Any]:
    logger.error("product API request failed", extra={"error_type": type(exc).__name__})
    return _json(500, {"error": "internal error; see the function's log", "type": "InternalError"})


app.include_router(tasks_router)  # a session's tasks: product/api_tasks.py
app.include_router(push_router)  # WebSocket push: tickets, unread (product/api_push.py)
app.include_router(approvals_router)  # approval requests: list, read, decide (product/api_approvals.py)


def openapi_json() -> str:
    """The OpenAPI document (schemas/product-api.openapi.json), stable text."""
    import json

    doc = json.loads(app.get_openapi_json_schema(title=TITLE, version=VERSION))
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
