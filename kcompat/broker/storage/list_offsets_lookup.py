"""Offset look-ups by time: earliest, latest, by timestamp, max timestamp.

Theory of operation
-------------------
The log finds the first *batch* whose max timestamp reaches the target (via the
time index); only that one batch is then decoded to find the first *record*
with a timestamp >= target, which is what Kafka answers. Max-timestamp (-3)
likewise decodes the one batch holding the largest timestamp. These are the
only per-record decodes on a plain topic, and only ListOffsets pays for them.
"""

from __future__ import annotations

from kcompat.broker.storage.partition import Partition
from kcompat.wire.records import decode_batch

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL = -1, -2, -3, -4
# tiered storage (KIP-1005, KIP-1023): no remote log here, so nothing is tiered
# or pending upload and Kafka answers offset -1 without a leader epoch
LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -5, -6


def offset_for_time(part: Partition, target: int, committed: bool = False) -> tuple[int, int]:
    """(offset, timestamp) answering a ListOffsets timestamp; (-1, -1) if none.
    ``committed`` (read_committed) makes LATEST the last stable offset."""
    log = part.log
    if target == LATEST:
        return (part.last_stable_offset if committed else part.high_watermark), -1
    if target in (EARLIEST, EARLIEST_LOCAL):
        return log.log_start_offset, -1
    if target in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return -1, -1
    if target == MAX_TIMESTAMP:
        found = log.max_timestamp_offset()
        if found is None:
            return -1, -1
        batch_offset, max_ts = found
        for record in decode_batch(log.read_batch_at(batch_offset)):
            if record.timestamp == max_ts:
                return record.offset, record.timestamp
        return batch_offset, max_ts
    found = log.offset_for_timestamp(target)
    if found is None:
        return -1, -1
    batch_offset, _max_ts = found
    for record in decode_batch(log.read_batch_at(batch_offset)):
        if record.timestamp >= target and record.offset >= log.log_start_offset:
            return record.offset, record.timestamp
    return -1, -1
