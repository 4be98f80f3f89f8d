"""EventBridge Scheduler adapter: one schedule per cron job, in the stack's schedule group."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from agentwake.errors import ConfigError


class Schedules:
    def __init__(self, group: str | None, *, client: Any = None) -> None:
        self.group = group
        self._client = client

    @property
    def client(self) -> Any:
        """Made on first use: most wakes never touch a schedule, so cold start does not build it."""
        if self._client is None:
            from agentwake.store.aws import client as make_client

            self._client = make_client("scheduler")
        return self._client

    def _group(self) -> str:
        if not self.group:
            raise ConfigError("AGENTWAKE_SCHEDULE_GROUP is not set")
        return self.group

    def create(
        self,
        *,
        name: str,
        expression: str,
        timezone: str,
        target_arn: str,
        role_arn: str,
        job_id: str,
        dlq_arn: str | None = None,
        max_retries: int = 2,
        run_once: bool = False,
        session_id: str | None = None,
    ) -> None:
        wake: dict[str, str] = {"job_id": job_id, "scheduled_time": "<aws.scheduler.scheduled-time>"}
        if session_id:
            wake["session_id"] = session_id  # lets the wake read the session config in its first batch read
        target: dict[str, Any] = {
            "Arn": target_arn,
            "RoleArn": role_arn,
            # <aws.scheduler.scheduled-time> is replaced by the Scheduler at each firing
            "Input": json.dumps(wake),
            "RetryPolicy": {"MaximumRetryAttempts": max_retries, "MaximumEventAgeInSeconds": 3600},
        }
        if dlq_arn:
            target["DeadLetterConfig"] = {"Arn": dlq_arn}
        kwargs: dict[str, Any] = {
            "Name": name,
            "GroupName": self._group(),
            "ScheduleExpression": expression,
            "ScheduleExpressionTimezone": timezone,
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "Target": target,
            "State": "ENABLED",
        }
        if run_once:
            kwargs["ActionAfterCompletion"] = "DELETE"
        self.client.create_schedule(**kwargs)

    def create_once(
        self,
        *,
        name: str,
        at: datetime,
        target_arn: str,
        role_arn: str,
        payload: dict[str, Any],
        dlq_arn: str | None = None,
        max_retries: int = 2,
    ) -> bool:
        """A one-time schedule ``at(...)`` (UTC) that invokes ``target_arn`` with ``payload`` once,
        then deletes itself. False if a schedule of that name exists already (created by a copy)."""
        target: dict[str, Any] = {
            "Arn": target_arn,
            "RoleArn": role_arn,
            "Input": json.dumps(payload),
            "RetryPolicy": {"MaximumRetryAttempts": max_retries, "MaximumEventAgeInSeconds": 3600},
        }
        if dlq_arn:
            target["DeadLetterConfig"] = {"Arn": dlq_arn}
        try:
            self.client.create_schedule(
                Name=name,
                GroupName=self._group(),
                ScheduleExpression=f"at({at.astimezone(UTC):%Y-%m-%dT%H:%M:%S})",
                ScheduleExpressionTimezone="UTC",
                FlexibleTimeWindow={"Mode": "OFF"},
                Target=target,
                State="ENABLED",
                ActionAfterCompletion="DELETE",
            )
        except self.client.exceptions.ConflictException:
            return False
        return True

    def get(self, name: str) -> dict[str, Any] | None:
        try:
            return dict(self.client.get_schedule(Name=name, GroupName=self._group()))
        except self.client.exceptions.ResourceNotFoundException:
            return None

    def update(
        self,
        name: str,
        *,
        expression: str | None = None,
        timezone: str | None = None,
        enabled: bool | None = None,
        input_changes: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Change a schedule in place (GetSchedule, then UpdateSchedule with its whole definition:
        UpdateSchedule replaces every field it is not given). ``input_changes``: keys of the
        target's Input to set. Raises ResourceNotFoundException if there is no such schedule."""
        current = dict(self.client.get_schedule(Name=name, GroupName=self._group()))
        target = dict(current["Target"])
        if input_changes:
            wake = json.loads(target.get("Input") or "{}")
            wake.update(input_changes)
            target["Input"] = json.dumps(wake)
        kwargs: dict[str, Any] = {
            "Name": name,
            "GroupName": self._group(),
            "ScheduleExpression": expression or current["ScheduleExpression"],
            "ScheduleExpressionTimezone": timezone or current.get("ScheduleExpressionTimezone") or "UTC",
            "FlexibleTimeWindow": current.get("FlexibleTimeWindow") or {"Mode": "OFF"},
            "Target": target,
            "State": current.get("State", "ENABLED") if enabled is None else ("ENABLED" if enabled else "DISABLED"),
        }
        for kept in ("Description", "StartDate", "EndDate", "ActionAfterCompletion", "KmsKeyArn"):
            if current.get(kept) not in (None, ""):
                kwargs[kept] = current[kept]
        self.client.update_schedule(**kwargs)
        return kwargs

    def set_enabled(self, name: str, enabled: bool) -> bool:
        """Enable or disable a schedule; False when there is no such schedule."""
        try:
            self.update(name, enabled=enabled)
        except self.client.exceptions.ResourceNotFoundException:
            return False
        return True

    def delete(self, name: str) -> None:
        try:
            self.client.delete_schedule(Name=name, GroupName=self._group())
        except self.client.exceptions.ResourceNotFoundException:
            pass
