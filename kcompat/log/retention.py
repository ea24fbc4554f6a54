"""Which of a partition log's oldest segments retention deletes.

Theory of operation
-------------------
Whole segments only, oldest first (``PartitionLog.enforce_retention`` removes
them): every segment wholly below the log start; then, when ``cleanup.policy``
has ``delete``, those whose newest batch (max timestamp, or the file's mtime
when it has none) is older than ``retention_ms``, and those that can go while
the rest still reaches ``retention_bytes``. As in Kafka, a segment goes only
once the high watermark has passed all of it — the active segment too, when
it holds data and the high watermark is the log end (the log then rolls a new
empty segment first).
"""

from __future__ import annotations

from kcompat.log.config import LogConfig
from kcompat.log.segment import LogSegment


def below_start_count(segments: list[LogSegment], log_start_offset: int) -> int:
    """How many leading segments lie wholly below ``log_start_offset``."""
    count = 0
    while count < len(segments) - 1 and segments[count + 1].base_offset <= log_start_offset:
        count += 1
    return count


def expired_count(segments: list[LogSegment], config: LogConfig, now_ms: int, count: int,
                  high_watermark: int, log_end_offset: int) -> int:
    """How many leading segments retention deletes, ``count`` of them at least."""

    def deletable(i: int) -> bool:
        if i + 1 < len(segments):
            return segments[i + 1].base_offset <= high_watermark
        return segments[i].size_bytes > 0 and high_watermark >= log_end_offset

    if config.retention_ms >= 0:
        while count < len(segments) and deletable(count) and (
            now_ms - segments[count].largest_timestamp_ms() > config.retention_ms
        ):
            count += 1
    if config.retention_bytes >= 0:
        rest = sum(s.size_bytes for s in segments[count:])
        while count < len(segments) and deletable(count) and (
            rest - segments[count].size_bytes >= config.retention_bytes
        ):
            rest -= segments[count].size_bytes
            count += 1
    return count
