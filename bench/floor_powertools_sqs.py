# The cold-init floor: what any Powertools SQS batch handler with one DynamoDB client pays.
# ruff: noqa: I001  (kept as given: the import order is part of the floor)
from aws_lambda_powertools import Logger, Metrics  # noqa: F401
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response  # noqa: F401
import boto3

boto3.client("dynamodb")
