"""The fuzzer's malformed Produce batches, and what a broker answers them.

Each kind is a valid RecordBatch v2 (``_wire.record_batch``) with one thing
wrong, its CRC-32C made right again where the fault is in the part the CRC
covers (from the attributes on), so that the fault is the one named and not
a checksum mismatch:

- ``bad crc``: the checksum itself is off by one bit;
- ``magic 3`` / ``magic 1``: a magic byte the batch's layout is not (3 is
  unknown; 1 is the old format, which Kafka 4 no longer takes);
- ``count +1`` / ``count -1``: the record count says one record more, or
  one less, than the batch holds;
- ``codec 5`` / ``codec 7``: a compression codec id no codec has;
- ``empty``: a batch of no records;
- ``append time``: the timestamp-type bit a broker sets for LogAppendTime,
  set by the producer (to a topic of the pool, or to the sequence's topic
  created with ``message.timestamp.type=LogAppendTime``).

What is compared: the partition's error code (or the base offset where a
broker took the batch), and a Fetch of the partition afterwards; a record's
timestamp in a LogAppendTime batch is the broker's clock, so it is observed
as ``APPEND_TIME``, not as a number.
"""

from __future__ import annotations

import struct
from typing import Any

from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.record.util import calc_crc32c

from compat_tests.fuzz import _ops as ops
from compat_tests.fuzz._wire import CLOSED, Peer, record_batch

Observation = Any
KINDS = ("bad crc", "magic 3", "magic 1", "count +1", "count -1", "codec 5", "codec 7",
         "empty", "append time")
# RecordBatch v2 byte positions
MAGIC_AT, CRC_AT, ATTRIBUTES_AT, LAST_DELTA_AT, COUNT_AT, RECORDS_AT = 16, 17, 21, 23, 57, 61
LENGTH_AT, LENGTH_END = 8, 12
CODEC_MASK, APPEND_TIME_BIT = 0x07, 0x08
LATEST = -1  # ListOffsets: the log end


def _with_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, CRC_AT, calc_crc32c(bytes(batch[ATTRIBUTES_AT:])))
    return bytes(batch)


def bad_batch(kind: str, records: list[tuple[bytes | None, bytes | None]],
              timestamp: int) -> bytes:
    """A batch of ``records`` with the fault ``kind`` (``KINDS``)."""
    batch = bytearray(record_batch(records, timestamp))
    if kind == "bad crc":
        batch[CRC_AT + 3] ^= 1
        return bytes(batch)
    if kind.startswith("magic"):
        batch[MAGIC_AT] = int(kind.split()[1])
        return bytes(batch)
    if kind.startswith("count"):
        (count,) = struct.unpack_from(">i", batch, COUNT_AT)
        struct.pack_into(">i", batch, COUNT_AT, count + (1 if kind == "count +1" else -1))
    elif kind.startswith("codec"):
        batch[ATTRIBUTES_AT + 1] = (batch[ATTRIBUTES_AT + 1] & ~CODEC_MASK) | int(kind.split()[1])
    elif kind == "empty":
        del batch[RECORDS_AT:]
        struct.pack_into(">i", batch, COUNT_AT, 0)
        struct.pack_into(">i", batch, LAST_DELTA_AT, 0)
        struct.pack_into(">i", batch, LENGTH_AT, len(batch) - LENGTH_END)
    elif kind == "append time":
        batch[ATTRIBUTES_AT + 1] |= APPEND_TIME_BIT
    else:
        raise ValueError(kind)
    return _with_crc(batch)


def produce_bad(peer: Peer, topic: str, partition: int, kind: str,
                records: list[tuple[bytes | None, bytes | None]], timestamp: int
                ) -> Observation:
    """Produce (v9, acks=all) of a ``kind`` batch: the partition's error, or
    its base offset, and what a Fetch from the log end before it then reads."""
    end = ops.list_offsets(peer, topic, partition, LATEST)
    answer = ops.to_leader(peer, topic, partition, ProduceRequest, ProduceResponse, 9, {
        "transactional_id": None, "acks": -1, "timeout_ms": 10_000, "topic_data": [
            {"name": topic, "partition_data": [
                {"index": partition, "records": bad_batch(kind, records, timestamp)}]}]},
        lambda a: a["responses"][0]["partition_responses"][0]["error_code"])
    if answer == CLOSED:
        return CLOSED
    part = answer["responses"][0]["partition_responses"][0]
    seen = ("error", part["error_code"]) if part["error_code"] else ("ok", part["base_offset"])
    if end == CLOSED or end[0] != "ok":
        return seen
    return seen, ops.fetch(peer, topic, partition, end[1])
