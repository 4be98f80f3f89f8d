"""Every outbound HTTP exchange (model providers, webhooks, HTTP tools) goes through here.

The policy (``OutboundPolicy``):

- ``https`` only, unless ``allow_http`` (local stack and tests); any other scheme (``file:``,
  ``ftp:``, ...) and URLs with user info are always refused;
- the host is resolved once, and the exchange is refused if any address it resolves to is
  loopback (unless ``allow_loopback``), link-local (the instance metadata endpoints
  ``169.254.169.254`` / ``fd00:ec2::254`` included), private, shared, unspecified, multicast or
  otherwise not global unicast. Numeric forms (``2130706433``, ``0x7f000001``, ``127.1``) are
  resolved the same way and refused the same way; an IPv6 address that embeds or translates an
  IPv4 address (mapped, translated, compatible, NAT64, 6to4, Teredo, ISATAP) is judged by that
  address, and the forms no one should reach (compatible, Teredo, local-use NAT64) are refused
  whatever they embed: at config time for literal hosts, at send time for every DNS answer;
- the connection goes to the address that was checked (the ``Host`` header and TLS SNI keep the
  name), so a DNS answer that changes between check and connect cannot redirect it;
- redirects are never followed: a 3xx is returned as it is (a redirected request could land
  anywhere, loopback included), and each caller reports it as an error naming the target.

A refused URL raises ``OutboundRefused`` (a ``ConfigError``): nothing was sent, and it is not an
``error:`` tool result the model would retry.

Deadlines are absolute: ``deadline`` (``time.monotonic()`` seconds) bounds the connect, the TLS
handshake, sending the request and every read of the answer together, so a server that dribbles
one byte at a time cannot outlive it. A run sets its own deadline with ``run_deadline()``; every
exchange inside ends by then, whatever deadline its caller asked for, and an exchange stopped by
the run's deadline raises ``DeadlineExceeded`` here (the step is interrupted, never an ``error:``
result), so no caller maps it itself.

stdlib only (``http.client``, ``ssl``, ``socket``); import this module lazily, off the cold start.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import ipaddress
import socket
import ssl
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentwake import deadline as _deadline
from agentwake.errors import ConfigError, DeadlineExceeded, OutboundRefused

#: how long an exchange may take when neither the caller nor the run sets a deadline
DEFAULT_TIMEOUT_S = 60.0

Resolver = Callable[[str, int], list[str]]


@dataclass(frozen=True)
class OutboundPolicy:
    """What outbound URLs may reach. The deployed default allows neither loopback nor plain http."""

    allow_loopback: bool = False
    allow_http: bool = False

    @classmethod
    def from_settings(cls, settings: Any) -> OutboundPolicy:
        return cls(
            allow_loopback=bool(getattr(settings, "outbound_allow_loopback", False)),
            allow_http=bool(getattr(settings, "outbound_allow_http", False)),
        )


@dataclass(frozen=True)
class HttpResponse:
    status: int
    reason: str
    #: header names in lower case
    headers: Mapping[str, str]
    body: bytes
    #: the URL that answered
    url: str
    #: the body was longer than ``max_response_bytes`` and was cut there
    truncated: bool = False


class ExchangeError(OSError):
    """The exchange failed. ``request_sent``: the request may have reached the server."""

    def __init__(self, message: str, *, request_sent: bool, run_deadline_hit: bool = False) -> None:
        super().__init__(message)
        self.request_sent = request_sent
        self.run_deadline_hit = run_deadline_hit


class ExchangeTimeout(ExchangeError, TimeoutError):
    """The deadline came before the answer did. ``run_deadline_hit``: it was the run's deadline."""


# --- policy --------------------------------------------------------------------------------------


def default_policy() -> OutboundPolicy:
    """The deployment's policy: Settings' ``AGENTWAKE_OUTBOUND_ALLOW_*`` (strict where unset, and
    strict where there are no valid Settings)."""
    from agentwake.settings import get_settings

    try:
        return OutboundPolicy.from_settings(get_settings())
    except ConfigError:
        return OutboundPolicy()


def redact_url(url: str) -> str:
    """The URL for error messages and logs: no query, fragment or user info (they may hold tokens)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "(unparsable url)"
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:  # not a number: keep it out of the message rather than fail on it
        port = None
    netloc = f"{host}:{port}" if port else host
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


_IP = ipaddress.IPv4Address | ipaddress.IPv6Address

# IPv6 forms that embed or translate an IPv4 address (RFC 4291, 2765, 3056, 4380, 5214, 6052, 8215).
_V4_MAPPED = ipaddress.ip_network("::ffff:0:0/96")  # RFC 4291 2.5.5.2: a dual-stack socket reaches the IPv4 host
_V4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # RFC 2765 (SIIT)
_V4_COMPATIBLE = ipaddress.ip_network("::/96")  # RFC 4291 2.5.5.1, deprecated (:: and ::1 are in it)
_NAT64_WELL_KNOWN = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052 2.1
_NAT64_LOCAL_USE = ipaddress.ip_network("64:ff9b:1::/48")  # RFC 8215: the IPv4 address sits where the operator says
# 6to4 2002::/16 (RFC 3056) and Teredo 2001::/32 (RFC 4380): ipaddress's sixtofour and teredo
_GLOBAL_UNICAST_V6 = ipaddress.ip_network("2000::/3")  # RFC 4291 2.4
#: ranges ``ipaddress`` (3.11) still calls global that are not: documentation (RFC 9637), and the
#: deprecated 6to4 relay anycast (RFC 7526)
_NOT_GLOBAL = (ipaddress.ip_network("3fff::/20"), ipaddress.ip_network("192.88.99.0/24"))


def _low32(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)


def _isatap_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address of an ISATAP interface id ``[00-03]00:5efe:a.b.c.d`` (RFC 5214 6.1), else None."""
    return _low32(ip) if (int(ip) >> 32) & 0xFCFFFFFF == 0x00005EFE else None


def _embedding(ip: ipaddress.IPv6Address) -> tuple[str, list[ipaddress.IPv4Address], str | None] | None:
    """``(form, embedded IPv4 addresses, why it is refused whatever it embeds | None)`` when ``ip``
    embeds or translates IPv4 addresses; None when it does not."""
    if ip in _V4_MAPPED:
        return "IPv4-mapped", [_low32(ip)], None
    if ip in _V4_TRANSLATED:
        return "IPv4-translated", [_low32(ip)], None
    if ip in _V4_COMPATIBLE and int(ip) > 1:  # not :: nor ::1
        return "IPv4-compatible", [_low32(ip)], "deprecated by RFC 4291 and never routed"
    if ip in _NAT64_WELL_KNOWN:
        return "NAT64", [_low32(ip)], None
    if ip in _NAT64_LOCAL_USE:
        return "local-use NAT64", [], "where it embeds an IPv4 address depends on the operator's prefix length"
    if ip.sixtofour is not None:  # 2002::/16
        return "6to4", [ip.sixtofour], None
    if ip.teredo is not None:  # 2001::/32; ipaddress undoes the client address's obfuscation
        return "Teredo", list(ip.teredo), "a tunnel to an address behind a NAT, not global unicast"
    isatap = _isatap_v4(ip)
    if isatap is not None:
        return "ISATAP", [isatap], None
    return None


def address_refusal(address: str, policy: OutboundPolicy) -> str | None:
    """Why ``address`` may not be reached under ``policy`` (None: it may): only global unicast
    addresses may (loopback too where ``allow_loopback``). An IPv6 address that embeds or
    translates an IPv4 address is judged by that address (and, for tunnels and deprecated forms,
    refused whatever it embeds)."""
    try:
        ip: _IP = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return f"{address!r} is not an IP address"
    if isinstance(ip, ipaddress.IPv6Address):
        embedding = _embedding(ip)
        if embedding is not None:
            form, embedded, refused_anyway = embedding
            for v4 in embedded:
                reason = address_refusal(str(v4), policy)
                if reason:
                    return f"{reason} (embedded in {_a(form)} address {ip})"
            if refused_anyway:
                return f"{ip} is {_a(form)} address ({refused_anyway})"
            if ip not in _GLOBAL_UNICAST_V6:  # mapped, translated, NAT64: the IPv4 address is what is reached
                return None
    return _plain_refusal(ip, policy)


def _a(form: str) -> str:
    return f"an {form}" if form[0] in "AEIOU" else f"a {form}"


def _plain_refusal(ip: _IP, policy: OutboundPolicy) -> str | None:
    if ip.is_loopback:
        return None if policy.allow_loopback else f"{ip} is a loopback address"
    if ip.is_unspecified:
        return f"{ip} is the unspecified address"
    if ip.is_link_local:
        return f"{ip} is link-local (instance metadata lives there)"
    if ip.is_multicast:
        return f"{ip} is a multicast address"
    if any(ip in net for net in _NOT_GLOBAL):
        return f"{ip} is not a globally routable address"
    if ip.is_private:
        return f"{ip} is a private address"
    if not ip.is_global:
        return f"{ip} is not a globally routable address"
    if isinstance(ip, ipaddress.IPv6Address) and ip not in _GLOBAL_UNICAST_V6:
        return f"{ip} is outside 2000::/3, the IPv6 global unicast range"
    return None


@dataclass(frozen=True)
class Target:
    """A URL that passed the policy, and the address to connect to."""

    scheme: str
    host: str
    port: int
    path: str
    address: str
    url: str


def _literal_address(host: str) -> str | None:
    """The address a numeric host stands for (``10.0.0.1``, ``::1``, ``2130706433``, ``0x7f.1``), else None."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        return socket.inet_ntoa(socket.inet_aton(host))  # the forms inet_aton (and so getaddrinfo) accepts
    except OSError:
        return None


def check_url(
    url: str,
    policy: OutboundPolicy | None = None,
    *,
    resolver: Resolver | None = None,
    what: str = "url",
    resolve: bool = True,
) -> Target:
    """Parse, resolve and check ``url``; raises OutboundRefused (nothing sent) if it breaks the policy.

    ``resolve=False`` (config time): check everything but names, which are checked when resolved.
    """
    policy = policy or default_policy()
    shown = redact_url(url) if isinstance(url, str) else repr(url)
    if not isinstance(url, str) or not url or any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise OutboundRefused(f"{what} {shown!r} is refused: not a URL (empty, or with spaces/control characters)")
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise OutboundRefused(f"{what} {shown!r} is refused: {exc}") from exc
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise OutboundRefused(f"{what} {shown!r} is refused: only https URLs may be reached, not {scheme or 'no'}:")
    if scheme == "http" and not policy.allow_http:
        raise OutboundRefused(
            f"{what} {shown!r} is refused: plain http is not allowed here (use https; "
            "AGENTWAKE_OUTBOUND_ALLOW_HTTP is for the local stack)"
        )
    if parts.username is not None or parts.password is not None:
        raise OutboundRefused(f"{what} {shown!r} is refused: credentials in URLs are not allowed")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise OutboundRefused(f"{what} {shown!r} is refused: it has no host")
    port = port or (443 if scheme == "https" else 80)
    literal = _literal_address(host)
    if not resolve and literal is None:
        return Target(scheme=scheme, host=host, port=port, path=parts.path or "/", address="", url=url)
    try:
        addresses = [literal] if literal is not None else (resolver or _system_resolver)(host, port)
    except (OSError, UnicodeError) as exc:
        raise ExchangeError(f"cannot resolve {host!r}: {exc}", request_sent=False) from exc
    if not addresses:
        raise ExchangeError(f"{host!r} resolves to no address", request_sent=False)
    for address in addresses:
        reason = address_refusal(address, policy)
        if reason:
            hint = " (AGENTWAKE_OUTBOUND_ALLOW_LOOPBACK is for the local stack)" if "loopback" in reason else ""
            raise OutboundRefused(f"{what} {shown!r} is refused: {host} resolves to {reason}{hint}")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return Target(scheme=scheme, host=host, port=port, path=path, address=addresses[0], url=url)


# --- the run's deadline (set by the wake: agentwake.deadline) ---------------------------------------

run_deadline = _deadline.run_deadline
current_run_deadline = _deadline.current
run_deadline_passed = _deadline.passed


def effective_deadline(deadline: float | None) -> tuple[float, bool]:
    """``(deadline, is_the_run_deadline)``: the earlier of the caller's and the run's."""
    own = time.monotonic() + DEFAULT_TIMEOUT_S if deadline is None else deadline
    run = _deadline.current()
    if run is not None and run <= own:
        return run, True
    return own, False


# --- the exchange ---------------------------------------------------------------------------------


class _DeadlineReader(io.RawIOBase):
    """Socket reads that never wait past an absolute deadline (the timeout shrinks on each read)."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("deadline reached while reading the answer")
        self._sock.settimeout(remaining)
        return self._sock.recv_into(buffer)


class _SocketShim:
    """What ``http.client.HTTPResponse`` needs of a socket: ``makefile``, over deadline-bound reads."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def makefile(self, mode: str, *args: Any, **kwargs: Any) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self._sock, self._deadline))


def _remaining(deadline: float, run_hit: bool, *, sent: bool, doing: str) -> float:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise ExchangeTimeout(f"deadline reached before {doing}", request_sent=sent, run_deadline_hit=run_hit)
    return remaining


def _one_exchange(
    target: Target,
    method: str,
    headers: Mapping[str, str],
    body: bytes | None,
    deadline: float,
    run_hit: bool,
    max_response_bytes: int,
    ssl_context: ssl.SSLContext | None,
) -> HttpResponse:
    where = redact_url(target.url)
    sent = False
    sock: socket.socket | None = None
    try:
        try:
            sock = socket.create_connection(
                (target.address, target.port), timeout=_remaining(deadline, run_hit, sent=False, doing="connecting")
            )
            if target.scheme == "https":
                context = ssl_context or ssl.create_default_context()
                sock.settimeout(_remaining(deadline, run_hit, sent=False, doing="the TLS handshake"))
                sock = context.wrap_socket(sock, server_hostname=target.host)
        except TimeoutError as exc:
            raise ExchangeTimeout(
                f"connecting to {where} timed out", request_sent=False, run_deadline_hit=run_hit
            ) from exc
        except ssl.SSLError as exc:
            raise ExchangeError(f"TLS with {where} failed: {exc.reason or exc}", request_sent=False) from exc
        except OSError as exc:
            raise ExchangeError(f"cannot connect to {where}: {exc.strerror or exc}", request_sent=False) from exc

        conn_class = http.client.HTTPSConnection if target.scheme == "https" else http.client.HTTPConnection
        conn = conn_class(target.host, target.port)
        conn.sock = sock  # already connected to the checked address: http.client will not resolve again
        try:
            sock.settimeout(_remaining(deadline, run_hit, sent=False, doing="sending the request"))
            sent = True  # from here on, (part of) the request may have reached the server
            conn.request(method, target.path, body=body, headers=dict(headers))
            response = http.client.HTTPResponse(
                _SocketShim(sock, deadline),  # type: ignore[arg-type]
                method=method,
            )
            response.begin()
            data = response.read(max_response_bytes + 1) if max_response_bytes >= 0 else response.read()
        except TimeoutError as exc:
            raise ExchangeTimeout(
                f"{where} did not answer in time", request_sent=sent, run_deadline_hit=run_hit
            ) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise ExchangeError(f"the exchange with {where} broke: {type(exc).__name__}", request_sent=sent) from exc
        truncated = max_response_bytes >= 0 and len(data) > max_response_bytes
        return HttpResponse(
            status=response.status,
            reason=response.reason or "",
            headers={k.lower(): v for k, v in response.getheaders()},
            body=data[:max_response_bytes] if truncated else data,
            url=target.url,
            truncated=truncated,
        )
    finally:
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()


def http_exchange(
    method: str,
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    body: bytes | None = None,
    deadline: float | None = None,
    policy: OutboundPolicy | None = None,
    max_response_bytes: int = 4 * 1024 * 1024,
    ssl_context: ssl.SSLContext | None = None,
    resolver: Resolver | None = None,
    what: str = "url",
) -> HttpResponse:
    """One request under ``policy``, finished by ``deadline``; a 3xx is returned, never followed.

    Raises OutboundRefused (policy; nothing sent), DeadlineExceeded (the run's deadline came
    first), ExchangeTimeout (``deadline``; ``request_sent`` says whether the server may have the
    request) or ExchangeError (network).
    """
    policy = policy or default_policy()
    final_deadline, run_hit = effective_deadline(deadline)
    target = check_url(url, policy, resolver=resolver, what=what)
    try:
        return _one_exchange(
            target, method, dict(headers or {}), body, final_deadline, run_hit, max_response_bytes, ssl_context
        )
    except ExchangeTimeout as exc:
        if not exc.run_deadline_hit:
            raise
        raise DeadlineExceeded(
            f"{method} {redact_url(url)} ({what}) did not finish before the run's deadline"
            + ("; the request may have arrived" if exc.request_sent else "; nothing was sent")
        ) from exc
