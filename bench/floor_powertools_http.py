# The cold-init floor of an HTTP API function: a Powertools HTTP API resolver with validation, one
# route whose body is a pydantic model, one DynamoDB client, one request resolved (a 422: no network).
# ruff: noqa: I001  (kept as given: the import order is part of the floor)
from aws_lambda_powertools import Logger, Metrics  # noqa: F401
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver
from pydantic import BaseModel
import boto3

app = APIGatewayHttpResolver(enable_validation=True)


class Item(BaseModel):
    name: str


@app.post("/items")
def create(item: Item) -> dict:
    return {"name": item.name}


boto3.client("dynamodb")
EVENT = {
    "version": "2.0",
    "routeKey": "POST /items",
    "rawPath": "/items",
    "rawQueryString": "",
    "headers": {"content-type": "application/json"},
    "requestContext": {"http": {"method": "POST", "path": "/items", "sourceIp": "127.0.0.1"}, "stage": "$default"},
    "body": "{}",
    "isBase64Encoded": False,
}
assert app.resolve(EVENT, None)["statusCode"] == 422
