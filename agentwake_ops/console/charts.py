"""The console's charts page: failures by error type over time and DLQ depth, derived from run
records read by time (the ``gsi4`` index, ``agentwake_ops.runs.list_runs``), and the DLQs' depth now
(SQS's approximate counts). On AWS (a ``metrics`` CloudWatch client: the console on a stack found
through CloudFormation), the DLQs' depth per day comes from CloudWatch too: the daily maximum of
``AWS/SQS ApproximateNumberOfMessagesVisible`` of each DLQ, one GetMetricData call.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from agentwake_ops.console.html import Markup, h, stacked_bars, table
from agentwake_ops.console.pages import Query, one, runs_note
from agentwake_ops.context import OpsContext


def charts(ctx: OpsContext, query: Query, csrf: str, *, metrics: Any = None) -> Markup:
    """Failures by error type per day, and failed runs not yet succeeded per day (a DLQ depth
    derived from run records, read by time from gsi4), over the last ``days`` (default 7)."""
    from agentwake_ops.runs import list_runs
    from agentwake_ops.sqs_scan import queue_counts

    days = int(one(query, "days", "7")) if one(query, "days", "7").isdigit() else 7
    days = min(max(days, 1), 31)
    today = datetime.now(UTC).date()
    buckets = [(today - timedelta(days=d)).isoformat() for d in range(days - 1, -1, -1)]
    since = buckets[0] + "T00:00:00.000000Z"
    failed, before, capped, missing = [], None, False, None
    for _ in range(20):  # 20 pages of 500: charts of at most 10,000 failed runs
        page = list_runs(ctx.store, status="failed", since=since, before=before, limit=500)
        failed += page.runs
        missing = missing or (page if page.missing_indexes else None)
        before = page.next_before
        if before is None:
            break
    else:
        capped = True
    types = [t for t, _ in Counter(r.last_error_type or "-" for r in failed).most_common(8)]
    series = {t: [0] * len(buckets) for t in types}
    depth = [0] * len(buckets)
    for r in failed:
        day = (r.ended_at or r.started_at or "")[:10]
        if day in buckets:
            i = buckets.index(day)
            kind = r.last_error_type or "-"
            if kind in series:
                series[kind][i] += 1
            for j in range(i, len(buckets)):
                depth[j] += 1  # still failed: in a DLQ from that day on (until a redrive succeeds)
    source = (
        "the DLQs' CloudWatch metrics, the source of record for depth over time, are shown below."
        if metrics is not None
        else "on AWS the DLQs' CloudWatch metrics are the source of record for depth over time (shown here when "
        "the console finds its stack through CloudFormation: --stack-name)."
    )
    parts = [
        "<p class='muted'>Derived from run records (the by-day index): each run that is failed now, by the day of its "
        f"last failure; {source}</p>",
        "<h2>failures by error type, per day</h2>",
        stacked_bars("failures by error type per day", buckets, series),
        "<h2>DLQ depth (failed runs not yet succeeded, cumulative by day of failure)</h2>",
        stacked_bars("failed runs per day", buckets, {"failed runs": depth}),
    ]
    if capped:
        parts.append("<p class='note'>More than 10,000 failed runs: the charts show the newest 10,000.</p>")
    if missing is not None:
        # between an upgrade's two deploys the by-day index is missing: the charts count too few, and say so
        parts.insert(1, runs_note(replace(missing, looked_back_to=None)) or "")
    rows = []
    from agentwake_ops.dlq.scan import DLQS

    for name, role in DLQS.items():
        if ctx.has_queue(role):
            visible, in_flight, delayed = queue_counts(ctx.sqs, ctx.queue_url(role))
            rows.append((name, visible, in_flight, delayed))
    if metrics is not None:
        parts.append("<h2>DLQ depth per day (CloudWatch: daily maximum of ApproximateNumberOfMessagesVisible)</h2>")
        parts.append(_cloudwatch_depth(ctx, metrics, buckets))
    parts.append("<h2>DLQ depth now (SQS's approximate counts)</h2>")
    parts.append(table(("queue", "visible", "in flight", "delayed"), rows, cls="depth"))
    return Markup("".join(str(p) for p in parts))


def _cloudwatch_depth(ctx: OpsContext, metrics: Any, buckets: list[str]) -> Markup:
    """Each DLQ's daily maximum of visible messages over ``buckets`` (UTC days), from GetMetricData."""
    from agentwake_ops.cli_common import error_message, user_errors
    from agentwake_ops.dlq.scan import DLQS
    from agentwake_ops.sqs_scan import queue_name

    known = [(name, queue_name(ctx.queue_url(role))) for name, role in DLQS.items() if ctx.has_queue(role)]
    queries = [
        {
            "Id": f"q{i}",
            "Label": name,
            "MetricStat": {
                "Metric": {
                    "Namespace": "AWS/SQS",
                    "MetricName": "ApproximateNumberOfMessagesVisible",
                    "Dimensions": [{"Name": "QueueName", "Value": queue}],
                },
                "Period": 86400,
                "Stat": "Maximum",
            },
        }
        for i, (name, queue) in enumerate(known)
    ]
    start = datetime.fromisoformat(buckets[0]).replace(tzinfo=UTC)
    request: dict[str, Any] = {
        "MetricDataQueries": queries,
        "StartTime": start,
        "EndTime": start + timedelta(days=len(buckets)),
        "ScanBy": "TimestampAscending",
    }
    series = {name: [0] * len(buckets) for name, _ in known}
    try:
        while True:
            resp = metrics.get_metric_data(**request)
            for result in resp.get("MetricDataResults", []):
                values = series.get(result.get("Label", ""))
                if values is None:
                    continue
                for moment, value in zip(result.get("Timestamps", []), result.get("Values", []), strict=False):
                    day = moment.astimezone(UTC).date().isoformat()
                    if day in buckets:
                        i = buckets.index(day)
                        values[i] = max(values[i], int(value))
            token = resp.get("NextToken")
            if not token:
                break
            request["NextToken"] = token
    except user_errors() as exc:
        return Markup(
            f"<p class='note' id='cloudwatch-error'>CloudWatch could not be read: {h(error_message(exc))}</p>"
        )
    return stacked_bars("DLQ depth per day (CloudWatch)", buckets, series)
