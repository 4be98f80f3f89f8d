"""The embedded server's SQS requests (JSON protocol) handed to moto's SQS dispatch without Flask.

moto's server finds the service of every request by matching the host against every backend's URL
patterns (twice), then runs it through a Flask app per service (a request context, URL routing,
CORS, a Flask response) before the same ``SQSResponse.dispatch`` answers it. A DLQ scan is 2,000
SQS requests; that route was about a quarter of the server's CPU for each. An SQS request of the
JSON protocol (``X-Amz-Target: AmazonSQS.<Action>``, POST to ``/``: what boto3 sends) goes here to
``SQSResponse.dispatch`` with moto's own request class, answered as moto's
``convert_to_flask_response`` answers it (same status, headers and body; the
``Access-Control-Allow-Origin: *`` moto's global CORS adds to a request without an ``Origin``).
Everything else (the query protocol, a queue URL as the path, a request with an ``Origin``, other
services, ``/moto-api``) takes moto's route.
"""

from __future__ import annotations

from typing import Any

#: the header that names an SQS action in the JSON protocol
_SQS_TARGET = "AmazonSQS."


def is_sqs_json(environ: dict[str, Any]) -> bool:
    """An SQS request of the JSON protocol, posted to the endpoint's root (boto3's requests)."""
    return (
        environ.get("HTTP_X_AMZ_TARGET", "").startswith(_SQS_TARGET)
        and environ.get("REQUEST_METHOD") == "POST"
        and environ.get("PATH_INFO", "") in ("", "/")
        and "HTTP_ORIGIN" not in environ
    )


def sqs_json_route(app: Any) -> Any:
    """WSGI middleware: SQS JSON requests to moto's SQS dispatch, anything else to ``app`` (moto's)."""
    from botocore.exceptions import ClientError
    from flask import Response
    from moto.moto_api import recorder
    from moto.moto_server.werkzeug_app import BackendRequest
    from moto.settings import DISABLE_GLOBAL_CORS
    from moto.sqs.responses import SQSResponse
    from werkzeug.exceptions import HTTPException

    #: what flask_cors (moto's global CORS: any origin) adds to an answer to a request without an Origin
    cors = {} if DISABLE_GLOBAL_CORS else {"Access-Control-Allow-Origin": "*"}

    def call(environ: dict[str, Any], start_response: Any) -> Any:
        if not is_sqs_json(environ):
            return app(environ, start_response)
        # what moto's convert_to_flask_response does with the request Flask made (BackendRequest)
        request = BackendRequest(environ)
        try:
            recorder._record_request(request)
            try:
                result = SQSResponse.dispatch(request, request.raw_url, dict(request.headers))
            except ClientError as exc:
                result = 400, {}, exc.response["Error"]["Message"]
        except HTTPException as exc:
            response = exc.get_response(environ)  # what Flask answers for one
        else:
            status, headers, content = result if len(result) == 3 else (200, {}, result)
            response = Response(response=content, status=status, headers=headers)
        response.headers.update(cors)
        return response(environ, start_response)

    return call
