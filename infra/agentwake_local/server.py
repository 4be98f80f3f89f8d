"""A moto server on loopback, and the environment that points AWS SDKs at it.

moto is imported only when a server starts, so attaching to an already running local stack (the
CLI in another process) needs boto3 alone.
"""

from __future__ import annotations

import logging
import socket
import urllib.request
from collections.abc import Mapping
from types import TracebackType
from typing import Any

DEFAULT_REGION = "us-east-1"
ACCOUNT_ID = "123456789012"  # moto's default account: every ARN it returns carries it
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
}
#: the principal of those credentials: what moto's STS answers ``get-caller-identity`` with for a key
#: it did not issue. The local HTTP API verifies requests signed with them as this caller
#: (sigv4.py), and the sessions the seed, the demo and the chat app create name it as their owner.
LOCAL_CALLER_ARN = f"arn:aws:sts::{ACCOUNT_ID}:user/moto"

logger = logging.getLogger(__name__)


def aws_env(endpoint_url: str, region: str = DEFAULT_REGION) -> dict[str, str]:
    """The variables that make any AWS SDK talk to the local endpoint with fake credentials.

    Returned, never applied: the caller decides whether (and for how long) they enter os.environ.
    """
    return {
        **FAKE_CREDENTIALS,
        "AWS_DEFAULT_REGION": region,
        "AWS_REGION": region,
        "AWS_ENDPOINT_URL": endpoint_url,
    }


def boto3_session(region: str = DEFAULT_REGION) -> Any:
    """A boto3 session with the fake credentials, independent of os.environ and ~/.aws."""
    import boto3

    return boto3.session.Session(
        aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        aws_session_token=FAKE_CREDENTIALS["AWS_SESSION_TOKEN"],
        region_name=region,
    )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class MotoServer:
    """moto's threaded server on ``host:port`` (port 0: any free port), usable as a context manager.

    moto keeps its state in process-global backends: two servers in one process share it, and
    ``moto.mock_aws`` starting or stopping in the same process resets it.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, quiet: bool = True) -> None:
        self.host = host
        self.port = port
        self.quiet = quiet
        self._server: Any = None

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def endpoint_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the moto server is not running: call start() first")
        host, port = self._server.get_host_and_port()
        if host in ("0.0.0.0", "::"):
            host = "127.0.0.1"
        return f"http://{host}:{port}"

    def start(self) -> MotoServer:
        if self._server is not None:
            return self
        prepare_moto()
        from moto.server import ThreadedMotoServer

        if self.quiet:
            # werkzeug logs one line per request at INFO; keep the local stack's own lines readable.
            werkzeug_logger = logging.getLogger("werkzeug")
            if werkzeug_logger.level == logging.NOTSET:
                werkzeug_logger.setLevel(logging.WARNING)
        server = _serialized_server(ThreadedMotoServer)(ip_address=self.host, port=self.port, verbose=not self.quiet)
        server.start()
        self._server = server
        logger.info("moto server listening on %s", self.endpoint_url)
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        server, self._server = self._server, None
        server.stop()

    def reset(self) -> None:
        """Forget every resource (moto's ``/moto-api/reset``): a clean account without a restart."""
        reset(self.endpoint_url)

    def env(self, region: str = DEFAULT_REGION) -> dict[str, str]:
        return aws_env(self.endpoint_url, region)

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class Sends:
    """Every SendMessage the embedded server answered, counted: the local SQS pollers wait on it
    when a queue is empty, so a message sent with no delay (a session's hand-off) is received at
    once, as Lambda's long-polling event source receives it, without polling faster."""

    def __init__(self) -> None:
        import threading

        self._cond = threading.Condition()
        self.count = 0

    def notify(self) -> None:
        with self._cond:
            self.count += 1
            self._cond.notify_all()

    def wait_after(self, count: int, timeout: float) -> None:
        """Return when a send was answered after the ``count`` read earlier, or after ``timeout``."""
        with self._cond:
            self._cond.wait_for(lambda: self.count != count, timeout=timeout)


#: the sends of every embedded server of this process
SQS_SENDS = Sends()


def serialized(app: Any, lock: Any = None) -> Any:
    """WSGI middleware: one request at a time inside moto's backends, which are not thread-safe
    (concurrent TransactWriteItems fail with "dictionary changed size during iteration").

    Exception: an SQS ReceiveMessage that may long-poll (WaitTimeSeconds absent or above 0) sleeps
    inside the request, so it runs outside this lock; the local poller always receives with
    WaitTimeSeconds=0. moto's SQS backend guards itself (``moto_patches``, 7.: one call at a time,
    let go while a receive waits), which covers that receive and in-process ``mock_aws`` alike.
    """
    import io
    import threading

    lock = lock or threading.Lock()

    def call(environ: dict[str, Any], start_response: Any) -> Any:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        if length:
            body = environ["wsgi.input"].read(length)
        elif environ.get("wsgi.input_terminated"):  # a chunked body: werkzeug's input ends where it does
            body = environ["wsgi.input"].read()
        else:
            body = b""
        environ["wsgi.input"] = io.BytesIO(body)
        if _may_long_poll(environ, body):
            return app(environ, start_response)
        with lock:
            answer = app(environ, start_response)
        if _is_send(environ, body):
            SQS_SENDS.notify()
        return answer

    return call


def _is_send(environ: dict[str, Any], body: bytes) -> bool:
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    return target.startswith("AmazonSQS.SendMessage") or b"Action=SendMessage" in body[:200]


def _may_long_poll(environ: dict[str, Any], body: bytes) -> bool:
    import json
    import urllib.parse

    if environ.get("HTTP_X_AMZ_TARGET", "") == "AmazonSQS.ReceiveMessage":  # SQS JSON protocol
        try:
            return json.loads(body or b"{}").get("WaitTimeSeconds") != 0
        except ValueError:
            return True
    if b"Action=ReceiveMessage" in body:  # SQS query protocol
        return urllib.parse.parse_qs(body.decode("utf-8", "replace")).get("WaitTimeSeconds") != ["0"]
    return False


#: seconds a kept connection may sit idle before the server closes it (a client that reuses it
#: after that reconnects: urllib3 sees the close before it sends)
KEEP_ALIVE_IDLE_S = 30
#: answers whose status forbids a body (RFC 9110): sent without one and without a Content-Length
_NO_BODY = frozenset({204, 304})


def _keep_alive_handler(base: Any) -> Any:
    """moto's request handler, answering a request whose body it can read whole (a Content-Length,
    or none) on a kept connection: the request's body is read here before the app runs, the app's
    answer is joined and sent with its exact Content-Length in one write, and the connection waits
    for the client's next request (``KEEP_ALIVE_IDLE_S`` at most).

    werkzeug's own ``run_wsgi`` closes every connection (after draining what is left to read, which
    on a kept connection would be the next request): a scan's 2,000 requests each paid a connect, an
    accept, a thread and a close. Anything else (HEAD, a chunked body, ``Expect: 100-continue``)
    goes to werkzeug's code, which answers and closes as before."""
    import io

    class KeepAliveHandler(base):  # type: ignore[misc, valid-type]
        protocol_version = "HTTP/1.1"  # werkzeug sets it for a threaded server only
        disable_nagle_algorithm = True  # the answer is one write; the client's next request goes at once
        timeout = KEEP_ALIVE_IDLE_S

        def setup(self) -> None:
            super().setup()
            self.server.kept_connections.add(self.connection)

        def finish(self) -> None:
            self.server.kept_connections.discard(self.connection)
            super().finish()

        def handle_one_request(self) -> None:
            self.idle = True  # until a request line is read: a timeout now is an idle kept connection
            super().handle_one_request()

        def log_error(self, format: str, *args: Any) -> None:  # noqa: A002 -- http.server's name
            if self.idle and format.startswith("Request timed out"):
                return  # a kept connection nobody used for KEEP_ALIVE_IDLE_S: closed, not an error
            super().log_error(format, *args)

        def run_wsgi(self) -> None:
            self.idle = False
            headers = self.headers
            if self.command == "HEAD" or "Transfer-Encoding" in headers or "Expect" in headers:
                self.close_connection = True
                super().run_wsgi()
                return
            try:
                length = int(headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if length < 0:
                self.close_connection = True
                super().run_wsgi()
                return
            environ = self.make_environ()
            environ["wsgi.input"] = io.BytesIO(self.rfile.read(length) if length else b"")
            answered: list[Any] = []

            def start_response(status: str, response_headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
                answered[:] = [status, response_headers]
                return _no_write

            try:
                chunks = self.server.app(environ, start_response)
                try:
                    body = b"".join(chunks)
                finally:
                    close = getattr(chunks, "close", None)
                    if close is not None:
                        close()
                status, response_headers = answered
            except Exception:
                logger.exception("the moto server failed on %s %s", self.command, self.path.split("?", 1)[0])
                status, response_headers, body = "500 INTERNAL SERVER ERROR", [], b"Internal Server Error"
                self.close_connection = True
            code = int(status.split(None, 1)[0])
            lines = [f"{self.protocol_version} {status}"]
            lines += [
                f"{k}: {v}"
                for k, v in response_headers
                if k.lower() not in ("content-length", "connection", "transfer-encoding")
            ]
            if code in _NO_BODY or 100 <= code < 200:
                body = b""
            else:
                lines.append(f"Content-Length: {len(body)}")
            if self.close_connection:
                lines.append("Connection: close")
            head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
            try:
                self.wfile.write(head + body)
            except (ConnectionError, TimeoutError):
                self.close_connection = True

    return KeepAliveHandler


def _no_write(data: bytes) -> None:
    raise RuntimeError("the embedded server's apps answer with an iterable, never write()")


def _serialized_server(base: Any) -> Any:
    """moto's ThreadedMotoServer with its WSGI app wrapped in ``serialized``, answering on kept
    connections (``_keep_alive_handler``), SQS's JSON requests routed straight to moto's SQS
    dispatch (``sqs_route``); ``stop`` closes the connections still kept."""
    import socket as sockets

    from moto.moto_server.threaded_moto_server import MotoRequestHandler
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    from agentwake_local.sqs_route import sqs_json_route

    handler = _keep_alive_handler(MotoRequestHandler)

    class SerializedMotoServer(base):  # type: ignore[misc, valid-type]
        def _server_entry(self) -> None:
            app = serialized(sqs_json_route(DomainDispatcherApplication(create_backend_app)))
            self._server = make_server(self._ip_address, self._port, app, True, request_handler=handler)
            self._server.kept_connections = set()  # type: ignore[attr-defined]
            self._server_ready_event.set()
            self._server.serve_forever()

        def stop(self) -> None:
            server = self._server
            super().stop()
            # a stopped server answers nothing more, on a kept connection either: each handler
            # waiting for its next request reads the end of the stream and closes
            for connection in list(getattr(server, "kept_connections", ())):
                try:
                    connection.shutdown(sockets.SHUT_RD)
                except OSError:
                    pass

    return SerializedMotoServer


def reset(endpoint_url: str) -> None:
    request = urllib.request.Request(f"{endpoint_url}/moto-api/reset", method="POST", data=b"")
    with urllib.request.urlopen(request, timeout=10):
        pass


#: moto's own configuration document: a small constant answer, whatever the server holds
HEALTH_PATH = "/moto-api/config"
#: a server that accepted the connection but has not answered yet is busy, not gone
HEALTH_TIMEOUT_S = 10.0


def prepare_moto() -> None:
    """Patch moto for the embedded server (``moto_patches``); raises ``MotoPatchError`` when the
    installed moto is not the one the patches were written for."""
    from agentwake_local import moto_patches

    moto_patches.apply()


def probe(endpoint_url: str, timeout: float = HEALTH_TIMEOUT_S) -> str:
    """``"up"`` (it answered), ``"busy"`` (it accepted the connection, no answer within ``timeout``)
    or ``"down"`` (nothing listens there, or it is not a moto server).

    Constant time: one small request whose answer does not depend on what the server holds.
    """
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(endpoint_url)
    if not parts.hostname:
        return "down"
    try:
        sock = socket.create_connection((parts.hostname, parts.port or 80), timeout=min(timeout, 5.0))
    except OSError:
        return "down"
    connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    connection.sock = sock
    sock.settimeout(timeout)
    try:
        connection.request("GET", HEALTH_PATH)
        response = connection.getresponse()
        response.read(65536)
        return "up" if 200 <= response.status < 300 else "down"
    except TimeoutError:
        return "busy"
    except (OSError, http.client.HTTPException):
        return "down"
    finally:
        connection.close()


def is_reachable(endpoint_url: str, timeout: float = HEALTH_TIMEOUT_S) -> bool:
    """True if a moto server listens at ``endpoint_url`` (answering, or busy answering others)."""
    return probe(endpoint_url, timeout) != "down"


def apply_env(env: Mapping[str, str | None], target: dict[str, str] | None = None) -> dict[str, str | None]:
    """Set ``env`` into ``target`` (os.environ by default); a None value removes the key.

    Returns what is needed to undo it with ``restore_env``.
    """
    import os

    target_env: Any = os.environ if target is None else target
    previous: dict[str, str | None] = {}
    for key, value in env.items():
        previous[key] = target_env.get(key)
        if value is None:
            target_env.pop(key, None)
        else:
            target_env[key] = value
    return previous


def restore_env(previous: Mapping[str, str | None], target: dict[str, str] | None = None) -> None:
    import os

    target_env: Any = os.environ if target is None else target
    for key, value in previous.items():
        if value is None:
            target_env.pop(key, None)
        else:
            target_env[key] = value


def main(argv: list[str] | None = None) -> int:
    """The patched moto server alone, until SIGTERM/Ctrl-C (``python -c "from agentwake_local.server import main; main()"``).

    Prints its endpoint on the first line (benchmarks run it in a process of its own to measure it).
    """
    import argparse

    from agentwake_local.stop_signals import StopSignals

    parser = argparse.ArgumentParser(description="the embedded moto server, alone")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    stop = StopSignals()
    with MotoServer(args.host, args.port) as server:
        print(server.endpoint_url, flush=True)
        stop.wait()
    return 0
