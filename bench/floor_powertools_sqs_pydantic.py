# The cold-init floor with pydantic: bench/floor_powertools_sqs.py plus one pydantic model that
# validates an SQS body, i.e. what pydantic alone adds to a Powertools SQS handler (its import and
# first model build). ``bench/cold_init.py --floor`` this file: the wake against it is agentwake's
# own share of the cold init.
# ruff: noqa: I001  (kept as given: the import order is part of the floor, Powertools' batch first)
from aws_lambda_powertools import Logger, Metrics  # noqa: F401
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response  # noqa: F401
import boto3
from pydantic import BaseModel


class Body(BaseModel):
    task_id: str
    session_id: str


boto3.client("dynamodb")
Body.model_validate({"task_id": "t-1", "session_id": "s-1"})
