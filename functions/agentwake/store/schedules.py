"""EventBridge Scheduler adapter: one schedule per cron job, in the stack's schedule group."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from agentwake.errors import ConfigError


class Schedules:
    def __init__(self, group: str | None, *, client: Any = None) -> None:
        if client is None:
            from agentwake.store.aws import client as make_client

            client = make_client("scheduler")
        self.group = group
        self.client = client

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
    ) -> None:
        target: dict[str, Any] = {
            "Arn": target_arn,
            "RoleArn": role_arn,
            # <aws.scheduler.scheduled-time> is replaced by the Scheduler at each firing
            "Input": json.dumps({"job_id": job_id, "scheduled_time": "<aws.scheduler.scheduled-time>"}),
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

    def delete(self, name: str) -> None:
        try:
            self.client.delete_schedule(Name=name, GroupName=self._group())
        except self.client.exceptions.ResourceNotFoundException:
            pass
