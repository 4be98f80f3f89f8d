"""The maintainer's walk: which runtime files one background record passes, handler to commit.

    .venv/bin/python bench/walk_background.py

One record of ``events/background-result-success.json``'s shape goes through
``handlers/background_result.record_handler`` on moto (a scripted session: two steps, one
delivery). A profiler notes each call into ``functions/agentwake`` until ``commit_success``, as
files in call order with consecutive repeats collapsed. Every file of the runtime counts: the
agent loop's calls into its ports, value helpers (keys, models, codec), the DynamoDB client every
store call ends in (``store/table.py``), logging, errors, redaction and item sizes too. Nothing is
left out: a measurement that drops the helper files hides what it measures (issue 31, item 9).
A re-entry is a call into a file the walk had already left: one whose functions had all returned.
A file that calls out and gets control back never left.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
for name, value in {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "POWERTOOLS_METRICS_DISABLED": "true",
    "POWERTOOLS_LOG_LEVEL": "WARNING",
}.items():
    os.environ[name] = value
os.environ.pop("AWS_ENDPOINT_URL", None)
os.environ.pop("AWS_PROFILE", None)

RUNTIME = str(ROOT / "functions" / "agentwake") + os.sep


def walk() -> tuple[list[str], dict[str, int]]:
    import boto3
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from moto import mock_aws

    from agentwake import bootstrap
    from agentwake.handlers import background_result
    from agentwake.store.dynamo import DynamoStore
    from tests.integration.test_wake_handlers import result_body, sqs_record
    from tests.support.aws import REGION, FakeLambdaContext, create_resources
    from tests.support.builders import seed_session, seed_task
    from tests.support.moto_patched import apply_moto_patches

    apply_moto_patches()
    with mock_aws():
        resources = create_resources()
        os.environ.update(resources.env())
        bootstrap.reset_caches()
        store = DynamoStore(resources.table, client=boto3.client("dynamodb", region_name=REGION))
        seed_session(store, "s1")
        seed_task(store, "t1", "s1")
        bootstrap.wake_deps()
        record = SQSRecord(sqs_record(result_body("t1", "s1")))
        stops: list[str] = []
        open_stops: list[str] = []  # one per runtime frame on the stack: its file
        reentries: dict[str, int] = {}
        done = [False]

        def profile(frame, event, _arg):  # type: ignore[no-untyped-def]
            if done[0] or event not in ("call", "return"):
                return
            path = frame.f_code.co_filename
            if not path.startswith(RUNTIME):
                return
            if event == "return":
                if open_stops:
                    open_stops.pop()
                return
            stop = path[len(RUNTIME) :]
            if stop not in open_stops and stop in stops:
                reentries[stop] = reentries.get(stop, 0) + 1  # the walk had left this file and comes back
            if not stops or stops[-1] != stop:
                stops.append(stop)
            open_stops.append(stop)
            if frame.f_code.co_name == "commit_success":
                done[0] = True

        sys.setprofile(profile)
        try:
            outcome = background_result.record_handler(record, FakeLambdaContext())
        finally:
            sys.setprofile(None)
        assert outcome == "succeeded", outcome
        return stops, reentries


def main() -> None:
    stops, reentries = walk()
    print("walk of one background record, handler to commit_success (files in call order):")
    print("  " + "\n  -> ".join(stops))
    print(
        f"{len(set(stops))} files; {sum(reentries.values())} re-entries into a file the walk had left "
        f"(returned from): {reentries or 'none'}"
    )


if __name__ == "__main__":
    main()
