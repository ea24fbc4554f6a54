"""One partition at runtime: its log, its leader epoch and who waits for data.

Theory of operation
-------------------
The replication runtime keeps ``leader_epoch`` at the partition group's Raft
term and sets ``hw_source``: the Raft commit index, or the log end for a lone
replica (Kafka's high watermark with the leader alone in its ISR). ``wake`` sets the broker's
``data_arrived`` event after every append, so long-polling fetches wake the
moment data arrives. An append (idempotence check, offset assignment, write)
runs without an await, so it is atomic under trio without a lock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kcompat.log.partition_log import PartitionLog


@dataclass(eq=False)
class Partition:
    topic: str
    index: int
    log: PartitionLog
    wake: Callable[[], None] = lambda: None  # wakes long-polling fetches
    leader_epoch: int = 0
    hw_source: Callable[[], int] | None = None  # the Raft high watermark
    dedup: Any = None  # the leader's dedup index (``dedup_windows.PartitionDedup``)

    @property
    def high_watermark(self) -> int:
        if self.hw_source is not None:
            return self.hw_source()
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """Below the first open transaction, or the high watermark."""
        first_unstable = self.log.first_unstable_offset()
        hw = self.high_watermark
        return hw if first_unstable is None else min(first_unstable, hw)

    def notify_append(self) -> None:
        self.wake()
