"""Per-partition storage settings — the topic configs the log layer obeys.

Theory of operation
-------------------
``LogConfig`` is a frozen value: a topic's effective storage configuration
(broker defaults overlaid with topic overrides, done by the caller). Field names
follow the Kafka topic configs with dots turned into underscores
(``segment.bytes`` -> ``segment_bytes``). Defaults are Kafka's. This module is
pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

INT32_MAX = (1 << 31) - 1
LONG_MAX = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1073741824  # roll when the active segment would exceed this
    segment_ms: int = 604800000  # roll when the active segment is older than this
    retention_ms: int = 604800000  # -1 = keep forever
    retention_bytes: int = -1  # -1 = no size limit
    index_interval_bytes: int = 4096  # bytes of batches between two offset-index entries
    snapshots_kept: int = 2  # producer-state snapshots kept after recovery
    recovery_chunk_bytes: int = 1 << 20  # read size of recovery and header scans
    # cleanup.policy: ``delete`` lets retention.ms / retention.bytes drop old segments,
    # ``compact`` lets the cleaner keep only the latest record per key (``cleaner``)
    delete: bool = True
    compact: bool = False
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    delete_retention_ms: int = 86400000  # tombstones and markers outlive their first clean so long

    def __post_init__(self) -> None:
        # Index positions are int32, so a segment can never exceed 2 GiB.
        if not 0 < self.segment_bytes <= INT32_MAX:
            raise ValueError(f"segment_bytes {self.segment_bytes} must be in 1..{INT32_MAX}")
        if self.segment_ms <= 0:
            raise ValueError("segment_ms must be positive")
        if self.retention_ms < -1 or self.retention_bytes < -1:
            raise ValueError("retention_ms / retention_bytes must be >= -1")
        if self.index_interval_bytes < 0:
            raise ValueError("index_interval_bytes must be >= 0")
        if self.snapshots_kept < 1 or self.recovery_chunk_bytes < 4096:
            raise ValueError("snapshots_kept >= 1 and recovery_chunk_bytes >= 4096 required")
