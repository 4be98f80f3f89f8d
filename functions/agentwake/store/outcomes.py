"""Which failed DynamoDB calls may have been applied all the same (docs/durability.md, "Unknown
outcomes are read back").

A call that botocore gave up on after the request went out — the answer timed out, the connection
closed before it, the service answered 5xx — may have landed. Such an outcome is resolved by
reading back what the call wrote, never assumed either way: assumed failed, a landed lease looks
like another run's and is waited out; assumed landed, a lost delivery record means a resend.
A throttled call, a refused condition or a connection never made certainly did not land.
"""

from __future__ import annotations


def outcome_unknown(exc: BaseException) -> bool:
    """True when the failed call may have been applied (read it back); False when it was not."""
    from botocore.exceptions import ClientError, HTTPClientError

    if isinstance(exc, HTTPClientError):  # ReadTimeoutError, ConnectionClosedError: sent, answer lost
        return True
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        code = exc.response.get("Error", {}).get("Code", "")
        return int(status) >= 500 or code in ("InternalServerError", "ServiceUnavailable")
    return False
