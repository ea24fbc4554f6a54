"""One partition at runtime: its log, its leader epoch and who waits for data.

Theory of operation
-------------------
The replication runtime keeps ``leader_epoch`` at the partition group's Raft
term and sets ``hw_source``: the Raft commit index, or the log end for a lone
replica (Kafka's high watermark with the leader alone in its ISR). An append
(idempotence check, offset assignment, write) runs without an await, so it is
atomic under trio without a lock.

Long-polling reads (Fetch, ShareFetch) wait per partition, as Kafka keys its
delayed fetches by partition: a waiter registers one ``trio.Event`` with every
partition it asked for (``watch``) and ``notify_append`` sets the events of
this partition's waiters only — called after every append, and by the
replication runtime when the partition's role, term, leader or high watermark
changes (so a moved high watermark or last stable offset, or a lost
leadership, ends the wait too) and when the partition is deleted. A fetch
waiting on other partitions never wakes for this one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import trio

from kcompat.log.partition_log import PartitionLog


@dataclass(eq=False)
class Partition:
    topic: str
    index: int
    log: PartitionLog
    leader_epoch: int = 0
    hw_source: Callable[[], int] | None = None  # the Raft high watermark
    dedup: Any = None  # the leader's dedup index (``dedup_windows.PartitionDedup``)
    waiters: set[trio.Event] = field(default_factory=set, repr=False)

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
        """News of this partition (data, high watermark, leadership): wake
        the reads waiting on it (each wakes once; it watches again if it waits on)."""
        waiters = self.waiters
        if waiters:
            for event in waiters:
                event.set()
            waiters.clear()


def watch(parts: Iterable[Partition], event: trio.Event) -> set[Partition]:
    """Register ``event`` with every partition of ``parts``; the set to ``unwatch``."""
    watched = set(parts)
    for part in watched:
        part.waiters.add(event)
    return watched


def unwatch(parts: Iterable[Partition], event: trio.Event) -> None:
    for part in parts:
        part.waiters.discard(event)


async def wait_news(parts: Iterable[Partition], deadline: float) -> bool:
    """Wait until one of ``parts`` has news or ``deadline`` (trio time) passes;
    True if woken by news."""
    event = trio.Event()
    watched = watch(parts, event)
    try:
        with trio.move_on_at(deadline):
            await event.wait()
    finally:
        unwatch(watched, event)
    return event.is_set()
