"""FetchResponse v4-v18 written without copying the records (the consume hot path).

Theory of operation
-------------------
kio's generic writer copies every partition's records into a BytesIO and then
copies the whole buffer out again; on the consume path those are the largest
objects the broker handles. This writer walks the same kio entity but returns
the response as a list of chunks — small framing pieces built in a bytearray,
and each partition's records *as the same bytes object* — so the connection
sends them one after another without joining them. A partition's records may
also be any sized reference the caller knows how to send (the broker's file
ranges, sent with ``sendfile``): the writer only needs their length and
passes them through as chunks of their own. docs/architecture.md, Wire protocol allows a
hand-written writer for a hot response only if it is byte-identical to kio's:
tests/unit/wire/test_fetch_writer.py checks that property over generated
responses of every version.

Layout (Kafka's FetchResponse schema): v7+ add error_code and session_id at
the top, v5+ log_start_offset, v11+ preferred_read_replica, and v12 is
"flexible" (compact lengths as unsigned varints of length + 1, and a tagged
field section after every struct and in the response header); v13+ name a
topic by its 16-byte id instead of its name (a null id is written as zeros),
v16+ may carry node endpoints as a tagged field of the response (v14, v15, v17
and v18 change nothing in the response). Partitions that carry tagged fields
(diverging epoch, current leader, snapshot id) and responses with node
endpoints — error answers, never the hot path — are not written here: ``None``
tells the caller to use kio instead.
"""

from __future__ import annotations

import struct
from collections.abc import Sized
from typing import Any

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_PARTITION_V4 = struct.Struct(">ihqq")  # partition, error, high watermark, LSO
_ABORTED = struct.Struct(">qq")

FIRST_VERSION, LAST_VERSION = 4, 18
_ZERO_ID = bytes(16)


def write_uvarint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def write_length(out: bytearray, n: int | None, flexible: bool, wide: bool) -> None:
    """An array/bytes/string length: compact (n + 1, 0 = null) or int16/int32 (-1 = null)."""
    if flexible:
        write_uvarint(out, 0 if n is None else n + 1)
    elif wide:
        out += _I32.pack(-1 if n is None else n)
    else:
        out += _I16.pack(-1 if n is None else n)


def _has_tagged_fields(p: Any) -> bool:
    return bool(
        p.diverging_epoch.epoch != -1 or p.diverging_epoch.end_offset != -1
        or p.current_leader.leader_id != -1 or p.current_leader.leader_epoch != -1
        or p.snapshot_id.end_offset != -1 or p.snapshot_id.epoch != -1
    )


def encode_fetch_response(version: int, correlation_id: int, body: Any) -> list[Sized] | None:
    """Size prefix + header + body as chunks (bytes, and each partition's
    records as given), or None if kio must write it."""
    if not FIRST_VERSION <= version <= LAST_VERSION:
        return None
    if getattr(body, "node_endpoints", None):
        return None
    flexible, by_id = version >= 12, version >= 13
    chunks: list[Sized] = []
    out = bytearray(_I32.pack(correlation_id))
    if flexible:
        out.append(0)  # response header v1: empty tagged fields
    out += _I32.pack(round(body.throttle_time.total_seconds() * 1000))
    if version >= 7:
        out += _I16.pack(body.error_code)
        out += _I32.pack(body.session_id)
    write_length(out, len(body.responses), flexible, wide=True)
    for topic in body.responses:
        if by_id:
            topic_id = topic.topic_id  # a uuid.UUID, or None
            out += _ZERO_ID if topic_id is None else topic_id.bytes
        else:
            name = topic.topic.encode()
            write_length(out, len(name), flexible, wide=False)
            out += name
        write_length(out, len(topic.partitions), flexible, wide=True)
        for p in topic.partitions:
            if flexible and _has_tagged_fields(p):
                return None
            out += _PARTITION_V4.pack(p.partition_index, p.error_code, p.high_watermark,
                                      p.last_stable_offset)
            if version >= 5:
                out += _I64.pack(p.log_start_offset)
            aborted = p.aborted_transactions
            write_length(out, None if aborted is None else len(aborted), flexible, wide=True)
            for a in aborted or ():
                out += _ABORTED.pack(a.producer_id, a.first_offset)
                if flexible:
                    out.append(0)
            if version >= 11:
                out += _I32.pack(p.preferred_read_replica)
            records = p.records
            write_length(out, None if records is None else len(records), flexible, wide=True)
            if records:
                chunks.append(bytes(out))
                chunks.append(records)
                out = bytearray()
            if flexible:
                out.append(0)
        if flexible:
            out.append(0)
    if flexible:
        out.append(0)
    chunks.append(bytes(out))
    size = sum(len(c) for c in chunks)
    first = chunks[0]
    assert isinstance(first, bytes)
    chunks[0] = _I32.pack(size) + first
    return chunks
