"""The product API's routes over the wakes a session's agent scheduled for itself
(docs/self-scheduling.md), under the session's authority (``product/api.py``'s ``_owned``):

- ``GET /sessions/{session_id}/wakes?include_done=`` its agent's wakes, pending ones only unless
  ``include_done`` (cancelled, fired, stopped after their fires)
- ``DELETE /sessions/{session_id}/wakes/{wake_id}`` cancel one: the job disabled, saying who
  cancelled it (its schedule is deleted by its next fire: this function manages no schedule)
  → 200 ``cancelled`` true, or false when it was cancelled (or done) already;
  404 for a wake that is not this session's agent's (another session's says nothing more)
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from pydantic import BaseModel

from agentwake.product.authority import caller, owned_session
from agentwake.wake.messages import ID_PATTERN

if TYPE_CHECKING:
    from agentwake.domain.run_models import Job
    from agentwake.jobs.service import JobsService

router = Router()

SessionId = Annotated[str, Path(pattern=ID_PATTERN)]
WakeId = Annotated[str, Path(pattern=ID_PATTERN)]


class WakeOut(BaseModel):
    wake_id: str
    schedule: str
    timezone: str
    run_once: bool
    pending: bool
    #: the next fire (ISO, UTC) of a pending wake
    next_fire: str | None = None
    note: str
    fires: int
    max_fires: int | None = None
    created_at: str
    #: the run and the tool call that scheduled it
    created_by_run: str | None = None
    created_by_call: str | None = None
    #: why a wake is not pending any more (cancelled by whom, its fires used up)
    disabled_reason: str | None = None


class WakeList(BaseModel):
    wakes: list[WakeOut]


class WakeCancelled(BaseModel):
    wake_id: str
    #: False: it was cancelled (or done) already; nothing changed
    cancelled: bool
    message: str


def _jobs() -> JobsService:
    """The jobs service over the API's store; cancelling needs the Scheduler, never a target."""
    from agentwake import bootstrap
    from agentwake.jobs.service import JobsService

    root = bootstrap.root()
    return JobsService(root.store, root.schedules, None)


def _out(job: Job, now: datetime) -> WakeOut:
    from agentwake.jobs.service import next_fire_times

    nxt = next_fire_times(job, 1, now=now)
    return WakeOut(
        wake_id=job.job_id,
        schedule=job.schedule_expression,
        timezone=job.timezone,
        run_once=job.run_once,
        pending=job.enabled or job.paused,
        next_fire=nxt[0].astimezone(UTC).isoformat() if nxt else None,
        note=job.note,
        fires=job.fires,
        max_fires=job.max_fires,
        created_at=job.created_at,
        created_by_run=job.created_by_run,
        created_by_call=job.created_by_call,
        disabled_reason=job.disabled_reason,
    )


@router.get("/sessions/<session_id>/wakes")
def list_wakes(session_id: SessionId, include_done: Annotated[bool, Query()] = False) -> WakeList:
    from agentwake.jobs.self_wakes import pending_wakes, session_wakes

    owned_session(router.current_event.raw_event, session_id)
    jobs = _jobs()
    wakes = session_wakes(jobs, session_id) if include_done else pending_wakes(jobs, session_id)
    now = datetime.now(UTC)
    return WakeList(wakes=[_out(j, now) for j in wakes])


@router.delete(
    "/sessions/<session_id>/wakes/<wake_id>",
    responses={404: {"description": "no wake of this session's agent with that id"}},
)
def cancel_wake(session_id: SessionId, wake_id: WakeId) -> Response[Any]:
    from agentwake.jobs.self_wakes import WakeRefused
    from agentwake.jobs.self_wakes import cancel_wake as cancel

    event = router.current_event.raw_event
    owned_session(event, session_id)
    try:
        said = cancel(
            _jobs(), wake_id, session_id=session_id, by=f"{caller(event)} over the product API", delete_schedule=False
        )
    except WakeRefused:
        return _json(
            404,
            {"error": f"no wake {wake_id!r} of session {session_id}'s agent (GET its wakes)", "type": "UnknownWake"},
        )
    cancelled = said.startswith("cancelled ")
    return _json(200, WakeCancelled(wake_id=wake_id, cancelled=cancelled, message=said).model_dump())


def _json(status: int, body: Any) -> Response[Any]:
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=body)
