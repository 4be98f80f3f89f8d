"""An example tool package: ``business_days_between`` counts Monday-to-Friday days in a date range.

A session uses it with ``{"type": "python", "name": "business_days_between"}`` in its ``tools``.
"""

from __future__ import annotations

from datetime import date, timedelta

from pydantic import BaseModel, ConfigDict, Field

from agentwake.agent.tools import Tool, ToolContext


class BusinessDaysArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    start: date = Field(description="First day, YYYY-MM-DD (counted).")
    end: date = Field(description="Last day, YYYY-MM-DD (counted).")


class BusinessDaysBetween(Tool):
    name = "business_days_between"
    description = "Count the business days (Monday to Friday) from start to end, both included."
    Args = BusinessDaysArgs
    side_effect = False  # it only computes: a replay may call it

    def invoke(self, args: BusinessDaysArgs, ctx: ToolContext) -> str:
        if args.end < args.start:
            raise ValueError("end is before start")
        days = (args.end - args.start).days + 1
        count = sum(1 for i in range(days) if (args.start + timedelta(days=i)).weekday() < 5)
        return f"{count} business days from {args.start} to {args.end}"
