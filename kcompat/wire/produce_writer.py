"""ProduceResponse v3-v13 written by hand (the produce hot path).

Theory of operation
-------------------
Every Produce request is answered, and on a partition written one batch at a
time that answer is a fixed cost per request: kio's generic writer walks the
entities field by field through a writer per field and a BytesIO per tagged
section, 21 us for one partition, more than the batch's CRC check. This
writer packs the same kio entity with ``struct`` into one bytearray: 3 us
(bench/RESULTS.md, 2026-12-04). docs/architecture.md, Wire protocol allows a hand-written
writer for a hot response only if it is byte-identical to kio's:
tests/unit/wire/test_produce_writer.py checks that over generated responses
of every version.

Layout (Kafka's ProduceResponse schema): per topic its name (v13+: its 16-byte
id, a null id written as zeros), per partition index, error code, base
offset, log append time (-1 for none), log start offset (v5+), the record
errors and the error message (v8+); the throttle time after the topics.
v9+ are "flexible": compact lengths (unsigned varints of length + 1, 0 for
null) and a tagged field section after every struct and in the response
header. v10+ may carry a partition's current leader and the response's
node endpoints as tagged fields — only on NOT_LEADER_OR_FOLLOWER answers,
never the hot path — and such a response is not written here: ``None``
tells the caller to use kio instead.
"""

from __future__ import annotations

import struct
from typing import Any

from kcompat.wire.fetch_writer import write_length

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_PARTITION = struct.Struct(">ihqq")  # index, error code, base offset, log append time
_ZERO_ID = bytes(16)

FIRST_VERSION, LAST_VERSION = 3, 13


def _string(out: bytearray, value: str | None, flexible: bool) -> None:
    raw = None if value is None else value.encode()
    write_length(out, None if raw is None else len(raw), flexible, wide=False)
    if raw:
        out += raw


def encode_produce_response(version: int, correlation_id: int, body: Any) -> bytes | None:
    """Size prefix + header + body, or None if kio must write it."""
    if not FIRST_VERSION <= version <= LAST_VERSION:
        return None
    flexible, tagged = version >= 9, version >= 10
    if tagged and body.node_endpoints:
        return None
    out = bytearray(8)  # the size, then the correlation id
    _I32.pack_into(out, 4, correlation_id)
    if flexible:
        out.append(0)  # response header v1: empty tagged fields
    write_length(out, len(body.responses), flexible, wide=True)
    for topic in body.responses:
        if version >= 13:
            topic_id = topic.topic_id  # a uuid.UUID, or None
            out += _ZERO_ID if topic_id is None else topic_id.bytes
        else:
            _string(out, topic.name, flexible)
        write_length(out, len(topic.partition_responses), flexible, wide=True)
        for p in topic.partition_responses:
            if tagged and (p.current_leader.leader_id != -1
                           or p.current_leader.leader_epoch != -1):
                return None
            at = p.log_append_time
            out += _PARTITION.pack(p.index, p.error_code, p.base_offset,
                                   -1 if at is None else round(at.timestamp() * 1000))
            if version >= 5:
                out += _I64.pack(p.log_start_offset)
            if version >= 8:
                write_length(out, len(p.record_errors), flexible, wide=True)
                for e in p.record_errors:
                    out += _I32.pack(e.batch_index)
                    _string(out, e.batch_index_error_message, flexible)
                    if flexible:
                        out.append(0)
                _string(out, p.error_message, flexible)
            if flexible:
                out.append(0)
        if flexible:
            out.append(0)
    out += _I32.pack(round(body.throttle_time.total_seconds() * 1000))
    if flexible:
        out.append(0)
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)
