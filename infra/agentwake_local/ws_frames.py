"""RFC 6455 framing for the local WebSocket API, stdlib only (no ``websockets``/``wsproto`` in the
runtime or the local extra): the opening handshake's accept key, frames read (a client's are masked;
7-, 16- and 64-bit lengths; continuation frames joined) and written (a server's unmasked; a client's
masked, for tests' own client), and the control frames (ping → pong, close).

A message larger than ``MAX_MESSAGE_BYTES`` (API Gateway's 128 KB) is refused with close code 1009.
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
from typing import BinaryIO

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MAX_MESSAGE_BYTES = 128 * 1024

CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
#: close codes
NORMAL, GOING_AWAY, PROTOCOL_ERROR, TOO_BIG = 1000, 1001, 1002, 1009


class ProtocolError(Exception):
    """The peer broke the protocol; ``code``: the close code to answer with."""

    def __init__(self, message: str, code: int = PROTOCOL_ERROR) -> None:
        super().__init__(message)
        self.code = code


class Closed(Exception):
    """The stream ended (the peer went away without a close frame)."""


def accept_key(key: str) -> str:
    """``Sec-WebSocket-Accept`` for a client's ``Sec-WebSocket-Key``."""
    return base64.b64encode(hashlib.sha1((key.strip() + GUID).encode("ascii")).digest()).decode("ascii")


def new_key() -> str:
    """A client's ``Sec-WebSocket-Key``: 16 random bytes, base64."""
    return base64.b64encode(os.urandom(16)).decode("ascii")


def _exactly(stream: BinaryIO, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = stream.read(n - len(out))
        if not chunk:
            raise Closed("the connection ended mid-frame" if out else "the connection ended")
        out += chunk
    return out


def encode(opcode: int, payload: bytes = b"", *, mask: bool = False, fin: bool = True) -> bytes:
    """One frame: unmasked from a server, masked (a random key) from a client."""
    head = bytes([(0x80 if fin else 0) | opcode])
    n = len(payload)
    bit = 0x80 if mask else 0
    if n < 126:
        head += bytes([bit | n])
    elif n < 1 << 16:
        head += bytes([bit | 126]) + struct.pack("!H", n)
    else:
        head += bytes([bit | 127]) + struct.pack("!Q", n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + _unmask(payload, key)


def _unmask(payload: bytes, key: bytes) -> bytes:
    if not payload:
        return payload
    repeated = (key * (len(payload) // 4 + 1))[: len(payload)]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(len(payload), "big")


def read_frame(stream: BinaryIO, *, masked: bool | None = True) -> tuple[bool, int, bytes]:
    """``(fin, opcode, payload)`` of the next frame. ``masked``: True, the peer is a client (its
    frames must be masked); False, a server (they must not be); None, either."""
    b0, b1 = _exactly(stream, 2)
    if b0 & 0x70:
        raise ProtocolError("reserved bits set (no extension was negotiated)")
    fin, opcode = bool(b0 & 0x80), b0 & 0x0F
    is_masked, n = bool(b1 & 0x80), b1 & 0x7F
    if masked is not None and is_masked != masked:
        raise ProtocolError("a client's frames must be masked" if masked else "a server's frames must not be masked")
    if n == 126:
        (n,) = struct.unpack("!H", _exactly(stream, 2))
    elif n == 127:
        (n,) = struct.unpack("!Q", _exactly(stream, 8))
    if opcode >= CLOSE and (n > 125 or not fin):
        raise ProtocolError("a control frame must be whole and at most 125 bytes")
    if n > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"a frame of {n} bytes is over {MAX_MESSAGE_BYTES}", TOO_BIG)
    key = _exactly(stream, 4) if is_masked else b""
    payload = _exactly(stream, n)
    return fin, opcode, _unmask(payload, key) if is_masked else payload


def read_message(stream: BinaryIO, *, masked: bool | None = True) -> tuple[int, bytes]:
    """The next message ``(opcode, payload)``: a text or binary message with its continuation frames
    joined, or a control frame (close, ping, pong) as it comes (also between fragments)."""
    first: int | None = None
    parts: list[bytes] = []
    size = 0
    while True:
        fin, opcode, payload = read_frame(stream, masked=masked)
        if opcode in (CLOSE, PING, PONG):
            return opcode, payload
        if opcode == CONTINUATION:
            if first is None:
                raise ProtocolError("a continuation frame without a message to continue")
        elif opcode in (TEXT, BINARY):
            if first is not None:
                raise ProtocolError("a new message began before the last one ended")
            first = opcode
        else:
            raise ProtocolError(f"unknown opcode {opcode:#x}")
        size += len(payload)
        if size > MAX_MESSAGE_BYTES:
            raise ProtocolError(f"a message over {MAX_MESSAGE_BYTES} bytes", TOO_BIG)
        parts.append(payload)
        if fin:
            return first, b"".join(parts)


def close_payload(code: int, reason: str = "") -> bytes:
    return struct.pack("!H", code) + reason.encode("utf-8")[:123]


def close_code(payload: bytes) -> int | None:
    return struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
