"""Request and response headers (request v0-v2, response v0-v1).

Theory of operation
-------------------
A request header is api_key int16, api_version int16, correlation_id int32, then
(v1+) a nullable client_id string, then (v2, flexible requests) tagged fields.
Which header version a request uses depends on whether its API version is
"flexible"; the caller tells us. The response header is the correlation id, plus
an empty tagged-field section for flexible responses — except ApiVersions, whose
response header is always v0 so that a client can read it before it knows
anything about the broker.

Parsing is hand-written (it runs for every request) and raises ``HeaderError``
on any malformed input, never anything else.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_KEY_VERSION_CID = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class HeaderError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size: int  # bytes the header occupies; the body starts here


def peek_api(frame: bytes) -> tuple[int, int, int]:
    """api_key, api_version and correlation_id — present in every header version."""
    if len(frame) < 8:
        raise HeaderError(f"frame of {len(frame)} bytes is too short for a request header")
    key, version, cid = _KEY_VERSION_CID.unpack_from(frame, 0)
    return int(key), int(version), int(cid)


def read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise HeaderError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise HeaderError("varint too long")


def parse_request_header(frame: bytes, flexible: bool) -> RequestHeader:
    key, version, cid = peek_api(frame)
    pos = 8
    if len(frame) < pos + 2:
        raise HeaderError("truncated client_id length")
    n = int(_I16.unpack_from(frame, pos)[0])
    pos += 2
    client_id: str | None = None
    if n >= 0:
        if len(frame) < pos + n:
            raise HeaderError("truncated client_id")
        try:
            client_id = frame[pos : pos + n].decode("utf-8")
        except UnicodeDecodeError as e:
            raise HeaderError("client_id is not UTF-8") from e
        pos += n
    elif n != -1:
        raise HeaderError(f"invalid client_id length {n}")
    if flexible:
        pos = skip_tagged_fields(frame, pos)
    return RequestHeader(key, version, cid, client_id, pos)


def skip_tagged_fields(buf: bytes, pos: int) -> int:
    """The position after a tagged-field section (count, then tag, size, data
    each) starting at ``pos``; HeaderError if it overruns ``buf``."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise HeaderError("truncated tagged field")
    return pos


def response_header(correlation_id: int, flexible: bool) -> bytes:
    head = _I32.pack(correlation_id)
    return head + b"\x00" if flexible else head
