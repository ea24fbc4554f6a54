"""The vocabulary of a share-partition (KIP-932): acknowledgement types, the
configuration, what an acquisition hands out, dead letters and the persisted
state form, and the initial start offset of ``share.auto.offset.reset``.

Theory of operation
-------------------
Value types only, frozen and shared by the machine (``share_partition``,
which re-exports them: importers take them from there), its persisted form
(``share_state``) and the broker's hosts and handlers. ``ShareState`` and its
``StateBatch`` ranges are what Kafka's share coordinator stores (first, last,
state, delivery count) plus kcompat's lock holder, deadline and backoff
time; ``AcquiredRecords`` is a ShareFetch AcquiredRecords entry. Pure: no
clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

from kcompat.group.share_runs import RecordState


class AckType(IntEnum):
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


ACK_TYPES = frozenset(int(t) for t in AckType)
REJECTED = "rejected"
DELIVERY_LIMIT = "delivery-limit"


@dataclass(frozen=True, slots=True)
class ShareConfig:
    record_lock_duration_ms: int = 30_000  # share.record.lock.duration.ms
    delivery_count_limit: int = 5  # share.delivery.count.limit
    max_record_locks: int = 2000  # share.partition.max.record.locks
    ordering_message_group: bool = False  # kc.share.ordering=message-group
    redelivery_backoff_ms: int = 0  # kc.share.redelivery.backoff.ms
    redelivery_backoff_multiplier: float = 2.0
    redelivery_backoff_max_ms: int = 30_000

    def backoff_ms(self, delivery_count: int) -> int:
        if self.redelivery_backoff_ms <= 0 or delivery_count < 1:
            return 0
        wait = self.redelivery_backoff_ms * self.redelivery_backoff_multiplier ** (
            delivery_count - 1)
        return int(min(wait, self.redelivery_backoff_max_ms))


@dataclass(frozen=True, slots=True)
class AcquiredRecords:
    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    offset: int
    delivery_count: int
    reason: str  # REJECTED or DELIVERY_LIMIT


@dataclass(frozen=True, slots=True)
class StateBatch:
    first_offset: int
    last_offset: int
    state: RecordState
    delivery_count: int
    member_id: str | None = None  # ACQUIRED only
    lock_deadline_ms: int = -1  # ACQUIRED only
    not_before_ms: int = -1  # AVAILABLE waiting out its redelivery backoff


@dataclass(frozen=True, slots=True)
class ShareState:
    start_offset: int
    read_offset: int
    batches: tuple[StateBatch, ...] = ()
    group_keys: tuple[tuple[int, bytes], ...] = ()  # unfinished records only
    # kcompat: where the in-flight batches begin (throttling sizes by them), the
    # first at or below the start offset
    batch_starts: tuple[int, ...] = ()


AckBatch = tuple[int, int, Sequence[int]]  # first offset, last offset, ack types


def start_offset_for_reset(strategy: str, log_start_offset: int, high_watermark: int,
                           offset_for_duration: int | None = None) -> int:
    """The initial SPSO for ``share.auto.offset.reset``: ``earliest``,
    ``latest`` (the default) or ``by_duration:<ISO8601>``, whose offset the host
    looks up by timestamp (None: no record that recent, so the high watermark)."""
    if strategy == "earliest":
        return log_start_offset
    if strategy == "latest":
        return high_watermark
    if strategy.startswith("by_duration:"):
        found = high_watermark if offset_for_duration is None else offset_for_duration
        return max(log_start_offset, min(found, high_watermark))
    raise ValueError(f"unknown share.auto.offset.reset {strategy!r}")
