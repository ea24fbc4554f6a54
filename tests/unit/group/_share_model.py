"""The share-partition machine as it was before runs (commit 4307efb): one
slot per record. Kept as the reference ``test_share_runs`` checks the
run-based ``group.share_partition`` against, operation by operation; not used
by the broker."""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from kcompat.group.share_runs import RecordState
from kcompat.group.share_types import (  # the same vocabulary as the machine
    DELIVERY_LIMIT,
    REJECTED,
    AckBatch,
    AckType,
    AcquiredRecords,
    DeadLetter,
    ShareConfig,
    ShareState,
    StateBatch,
)

TERMINAL = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
_ACK_TYPES = frozenset(int(t) for t in AckType)


@dataclass(slots=True)
class _Slot:
    state: RecordState
    delivery_count: int = 0
    key: bytes | None = None
    member_id: str | None = None
    deadline_ms: int = -1
    not_before_ms: int = -1

    def batch_fields(self) -> tuple[RecordState, int, str | None, int, int]:
        return (self.state, self.delivery_count, self.member_id, self.deadline_ms,
                self.not_before_ms)


class SharePartition:
    def __init__(self, start_offset: int, config: ShareConfig | None = None) -> None:
        self.config = config or ShareConfig()  # group configs may change: replace it
        self._start = start_offset
        self._slots: deque[_Slot] = deque()  # offsets start .. read_offset - 1
        self._locks: list[tuple[int, int]] = []  # heap of (deadline, offset), lazy
        self._backoffs: list[tuple[int, int]] = []  # heap of (not before, offset), lazy
        self._groups: dict[bytes, deque[int]] = {}  # key -> unfinished offsets, ascending
        self._dirty: set[int] = set()
        self._dead: list[DeadLetter] = []
        self._reported = (start_offset, start_offset)  # start, read of the last update
        self._starts: list[int] = []  # where each in-flight batch begins (throttling)
        self._starts_sent: tuple[int, ...] = ()

    # -- what the host reads -------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def read_offset(self) -> int:
        """The first offset not read yet: the host reads the log from here."""
        return self._start + len(self._slots)

    @property
    def end_offset(self) -> int:
        """Kafka's share-partition end offset: the last offset in flight."""
        return self.read_offset - 1 if self._slots else self._start

    def read_limit_offset(self) -> int:
        """Records at or past this offset are not taken now (the window is full)."""
        return self._start + self.config.max_record_locks

    def record(self, offset: int) -> StateBatch | None:
        slot = self._slot(offset)
        return None if slot is None else StateBatch(offset, offset, *slot.batch_fields())

    def counts(self) -> dict[RecordState, int]:
        out = dict.fromkeys(RecordState, 0)
        for slot in self._slots:
            out[slot.state] += 1
        return out

    def take_dead_letters(self) -> list[DeadLetter]:
        out, self._dead = self._dead, []
        return out

    def next_deadline_ms(self) -> int | None:
        """When ``tick`` next has work: a lock expires or a backoff ends."""
        while self._locks and not self._lock_live(*self._locks[0]):
            heapq.heappop(self._locks)
        while self._backoffs and not self._backoff_live(*self._backoffs[0]):
            heapq.heappop(self._backoffs)
        tops = [heap[0][0] for heap in (self._locks, self._backoffs) if heap]
        return min(tops) if tops else None

    # -- transitions ---------------------------------------------------------

    def tick(self, now_ms: int) -> bool:
        """Expire locks and backoffs due by ``now_ms``; True if any did, so a
        record may be acquirable again (the host retries its parked fetches)."""
        woke = False
        while self._locks and self._locks[0][0] <= now_ms:
            deadline_ms, offset = heapq.heappop(self._locks)
            slot = self._slot(offset)
            if slot is not None and self._lock_live(deadline_ms, offset):
                self._release(offset, slot, deadline_ms)  # archived, it may free its group
                woke = True
        while self._backoffs and self._backoffs[0][0] <= now_ms:
            not_before_ms, offset = heapq.heappop(self._backoffs)
            slot = self._slot(offset)
            if slot is not None and self._backoff_live(not_before_ms, offset):
                slot.not_before_ms = -1
                self._dirty.add(offset)
                woke = True
        self._advance()
        return woke

    def acquire(self, member_id: str, max_records: int, now_ms: int,
                records: Iterable[tuple[int, bytes | None]] = (),
                read_end_offset: int | None = None) -> list[AcquiredRecords]:
        """Acquire up to ``max_records`` for ``member_id``; ``records`` and
        ``read_end_offset`` describe what the host read from ``read_offset``."""
        self.tick(now_ms)
        taken: list[tuple[int, int]] = []
        if max_records > 0 and self._acquire_known(member_id, max_records, now_ms, taken):
            before = self.read_offset
            self._acquire_new(member_id, max_records, now_ms, records, read_end_offset, taken)
            if self.read_offset > before:
                self._starts.append(before)
        self._advance()
        return _ranges(taken)

    def acknowledge(self, member_id: str, batches: Sequence[AckBatch],
                    now_ms: int) -> ErrorCode:
        """Apply every acknowledgement or none; the partition's error code."""
        self.tick(now_ms)
        error = _check_shape(batches)
        if error is not ErrorCode.none:
            return error
        plan: list[tuple[int, _Slot, int]] = []
        for first, last, types in batches:
            for offset in range(max(first, self._start), last + 1):
                ack = types[0] if len(types) == 1 else types[offset - first]
                slot = self._slot(offset)
                if slot is None:
                    # never handed out: Kafka 4.4 (F24)
                    return ErrorCode.invalid_request if self._slots \
                        else ErrorCode.invalid_record_state
                if slot.state is RecordState.ARCHIVED and not slot.delivery_count \
                        and ack == AckType.GAP:
                    continue  # a gap acknowledged as one
                if slot.state is not RecordState.ACQUIRED or slot.member_id != member_id:
                    return ErrorCode.invalid_record_state
                plan.append((offset, slot, ack))
        for offset, slot, ack in plan:
            self._apply_ack(offset, slot, AckType(ack), now_ms)
        self._advance()
        return ErrorCode.none

    def release_member(self, member_id: str, now_ms: int) -> int:
        """The member is gone: its records are AVAILABLE again (ARCHIVED at
        the delivery limit), their delivery counted. How many."""
        self.tick(now_ms)
        released = 0
        for i, slot in enumerate(self._slots):
            if slot.state is RecordState.ACQUIRED and slot.member_id == member_id:
                if slot.delivery_count >= self.config.delivery_count_limit:
                    self._finish(self._start + i, slot, RecordState.ARCHIVED)
                    self._dead.append(DeadLetter(self._start + i, slot.delivery_count,
                                                 DELIVERY_LIMIT))
                else:
                    self._make_available(self._start + i, slot, -1)
                released += 1
        self._advance()
        return released

    def advance_log_start(self, log_start_offset: int) -> None:
        """Retention or DeleteRecords moved the log start: forget what is below."""
        while self._start < log_start_offset and self._slots:
            slot = self._slots.popleft()
            if slot.state not in TERMINAL:
                self._ungroup(self._start, slot)
            self._start += 1
        self._start = max(self._start, log_start_offset)

    # -- persistence ---------------------------------------------------------

    def snapshot(self) -> ShareState:
        return self._state(range(self._start, self.read_offset))

    @property
    def has_update(self) -> bool:
        """Whether ``take_update`` has anything to replicate: a changed
        offset, or a start or read offset that moved (an acknowledgement of
        the first records in flight changes no offset left in the window)."""
        return bool(self._dirty) or (self._start, self.read_offset) != self._reported

    def take_update(self) -> ShareState:
        """What changed since the last call (or the snapshot), to replicate."""
        changed = sorted(o for o in self._dirty if o >= self._start)
        self._dirty.clear()
        self._reported = (self._start, self.read_offset)
        return self._state(changed, False)

    @classmethod
    def restore(cls, state: ShareState, config: ShareConfig | None = None) -> SharePartition:
        machine = cls(state.start_offset, config)
        machine.apply(state)
        machine._reported = (machine._start, machine.read_offset)
        machine._starts_sent = state.batch_starts
        if not state.batch_starts:
            machine._starts = sorted({b.first_offset for b in state.batches})
        return machine

    def apply(self, update: ShareState) -> None:
        """Replay a snapshot or update taken from the leader's machine."""
        self.advance_log_start(update.start_offset)
        if update.batch_starts:
            self._starts = list(update.batch_starts)
        elif self.read_offset < update.read_offset:
            self._starts.append(self.read_offset)
        while self.read_offset < update.read_offset:
            self._slots.append(_Slot(RecordState.ARCHIVED))
        keys = dict(update.group_keys)
        for batch in update.batches:
            for offset in range(max(batch.first_offset, self._start), batch.last_offset + 1):
                slot = self._slots[offset - self._start]
                slot.state, slot.delivery_count = batch.state, batch.delivery_count
                slot.member_id, slot.deadline_ms = batch.member_id, batch.lock_deadline_ms
                slot.not_before_ms = batch.not_before_ms
                slot.key = keys.get(offset, slot.key)
        self._rebuild()

    # -- internals -----------------------------------------------------------

    def _slot(self, offset: int) -> _Slot | None:
        i = offset - self._start
        return self._slots[i] if 0 <= i < len(self._slots) else None

    def _lock_live(self, deadline_ms: int, offset: int) -> bool:
        slot = self._slot(offset)
        return (slot is not None and slot.state is RecordState.ACQUIRED
                and slot.deadline_ms == deadline_ms)

    def _backoff_live(self, not_before_ms: int, offset: int) -> bool:
        slot = self._slot(offset)
        return (slot is not None and slot.state is RecordState.AVAILABLE
                and slot.not_before_ms == not_before_ms)

    def _acquirable(self, offset: int, slot: _Slot, now_ms: int) -> bool:
        if slot.state is not RecordState.AVAILABLE or slot.not_before_ms > now_ms:
            return False
        if self.config.ordering_message_group and slot.key is not None:
            return self._groups[slot.key][0] == offset
        return True

    def _offer(self, offset: int, slot: _Slot, member_id: str, now_ms: int,
               taken: list[tuple[int, int]], max_records: int) -> bool:
        """Acquire ``slot`` if it may be; False when the acquisition is complete."""
        if not self._acquirable(offset, slot, now_ms):
            return True
        limit = self.config.delivery_count_limit
        last_attempt = limit > 2 and slot.delivery_count + 1 >= limit
        if last_attempt and taken:
            return False  # delivered alone, in a later fetch
        slot.state, slot.member_id = RecordState.ACQUIRED, member_id
        slot.delivery_count += 1
        slot.deadline_ms = now_ms + self.config.record_lock_duration_ms
        slot.not_before_ms = -1
        heapq.heappush(self._locks, (slot.deadline_ms, offset))
        self._dirty.add(offset)
        taken.append((offset, slot.delivery_count))
        return not last_attempt and len(taken) < max_records

    def _acquire_known(self, member_id: str, max_records: int, now_ms: int,
                       taken: list[tuple[int, int]]) -> bool:
        limit = self.config.delivery_count_limit
        at = max(2, -(-limit // 2))
        for i, slot in enumerate(self._slots):
            offset = self._start + i
            if not self._acquirable(offset, slot, now_ms):
                continue
            first, last = self._batch_of(offset)
            if any(self._acquirable(o, s, now_ms) and s.delivery_count >= at
                   for o, s in self._window(offset, last)):
                if taken:
                    return False
                quota = None
                for o, s in self._window(offset, last):  # throttled: Kafka 4.4's rule
                    if not self._acquirable(o, s, now_ms):
                        continue
                    final = limit > 2 and s.delivery_count + 1 == limit
                    if final and taken:
                        break
                    if quota is None and s.delivery_count >= at:
                        quota = max(1, (last - first + 1) >> (s.delivery_count - at + 1))
                    self._offer(o, s, member_id, now_ms, taken, max_records + 1)
                    if final or len(taken) >= max_records or (
                            quota is not None and len(taken) >= quota):
                        break
                return False
            if not self._offer(offset, slot, member_id, now_ms, taken, max_records):
                return False
        return True

    def _batch_of(self, offset: int) -> tuple[int, int]:
        k = bisect_right(self._starts, offset)
        first = self._starts[k - 1] if k else self._start
        last = self._starts[k] - 1 if k < len(self._starts) else self.read_offset - 1
        return first, last

    def _window(self, first: int, last: int) -> list[tuple[int, _Slot]]:
        return [(o, self._slots[o - self._start]) for o in range(first, last + 1)]

    def _acquire_new(self, member_id: str, max_records: int, now_ms: int,
                     records: Iterable[tuple[int, bytes | None]], read_end_offset: int | None,
                     taken: list[tuple[int, int]]) -> None:
        for offset, key in records:
            if offset < self.read_offset:
                continue
            while self.read_offset < offset and self.read_offset < self.read_limit_offset():
                self._learn_gap()
            if offset >= self.read_limit_offset():
                return
            slot = _Slot(RecordState.AVAILABLE, key=key)
            self._slots.append(slot)
            self._dirty.add(offset)
            if key is not None:
                self._groups.setdefault(key, deque()).append(offset)
            if not self._offer(offset, slot, member_id, now_ms, taken, max_records):
                return
        end = self.read_offset if read_end_offset is None else read_end_offset
        while self.read_offset < min(end, self.read_limit_offset()):
            self._learn_gap()

    def _learn_gap(self) -> None:
        self._dirty.add(self.read_offset)
        self._slots.append(_Slot(RecordState.ARCHIVED))
        self._advance()

    def _apply_ack(self, offset: int, slot: _Slot, ack: AckType, now_ms: int) -> None:
        if ack is AckType.RENEW:
            slot.deadline_ms = now_ms + self.config.record_lock_duration_ms
            heapq.heappush(self._locks, (slot.deadline_ms, offset))
            self._dirty.add(offset)
        elif ack is AckType.RELEASE:
            self._release(offset, slot, now_ms)
        elif ack is AckType.ACCEPT:
            self._finish(offset, slot, RecordState.ACKNOWLEDGED)
        else:
            self._finish(offset, slot, RecordState.ARCHIVED)
            if ack is AckType.REJECT:
                self._dead.append(DeadLetter(offset, slot.delivery_count, REJECTED))

    def _release(self, offset: int, slot: _Slot, now_ms: int) -> None:
        """RELEASE or lock expiry (``now_ms`` is then the deadline, so the
        backoff does not depend on the timer's lateness): available again, or
        archived at the limit."""
        if slot.delivery_count >= self.config.delivery_count_limit:
            self._finish(offset, slot, RecordState.ARCHIVED)
            self._dead.append(DeadLetter(offset, slot.delivery_count, DELIVERY_LIMIT))
        else:
            backoff_ms = self.config.backoff_ms(slot.delivery_count)
            self._make_available(offset, slot, now_ms + backoff_ms if backoff_ms else -1)

    def _make_available(self, offset: int, slot: _Slot, not_before_ms: int) -> None:
        slot.state, slot.member_id, slot.deadline_ms = RecordState.AVAILABLE, None, -1
        slot.not_before_ms = not_before_ms
        if not_before_ms >= 0:
            heapq.heappush(self._backoffs, (not_before_ms, offset))
        self._dirty.add(offset)

    def _finish(self, offset: int, slot: _Slot, state: RecordState) -> None:
        slot.state, slot.member_id, slot.deadline_ms, slot.not_before_ms = state, None, -1, -1
        self._ungroup(offset, slot)
        self._dirty.add(offset)

    def _ungroup(self, offset: int, slot: _Slot) -> None:
        if slot.key is None:
            return
        offsets = self._groups[slot.key]
        if offsets[0] == offset:
            offsets.popleft()
        else:
            offsets.remove(offset)
        if not offsets:
            del self._groups[slot.key]

    def _advance(self) -> None:
        while self._slots and self._slots[0].state in TERMINAL:
            self._slots.popleft()
            self._start += 1

    def _rebuild(self) -> None:
        self._groups, self._locks, self._backoffs = {}, [], []
        for i, slot in enumerate(self._slots):
            offset = self._start + i
            if slot.state in TERMINAL:
                continue
            if slot.key is not None:
                self._groups.setdefault(slot.key, deque()).append(offset)
            if slot.state is RecordState.ACQUIRED:
                self._locks.append((slot.deadline_ms, offset))
            elif slot.not_before_ms >= 0:
                self._backoffs.append((slot.not_before_ms, offset))
        heapq.heapify(self._locks)
        heapq.heapify(self._backoffs)
        self._advance()

    def _state(self, offsets: Iterable[int], whole: bool = True) -> ShareState:
        batches: list[StateBatch] = []
        keys: list[tuple[int, bytes]] = []
        for offset in offsets:
            slot = self._slots[offset - self._start]
            if slot.key is not None and slot.state not in TERMINAL:
                keys.append((offset, slot.key))
            fields = slot.batch_fields()
            last = batches[-1] if batches else None
            if last is not None and last.last_offset == offset - 1 and (
                    last.state, last.delivery_count, last.member_id, last.lock_deadline_ms,
                    last.not_before_ms) == fields:
                batches[-1] = StateBatch(last.first_offset, offset, *fields)
            else:
                batches.append(StateBatch(offset, offset, *fields))
        starts = tuple(self._starts[max(0, bisect_right(self._starts, self._start) - 1):])
        if not whole:
            starts, self._starts_sent = (() if starts == self._starts_sent else starts), starts
        return ShareState(self._start, self.read_offset, tuple(batches), tuple(keys), starts)


def _check_shape(batches: Sequence[AckBatch]) -> ErrorCode:
    previous_last = -1
    for first, last, types in batches:
        count = last - first + 1
        if first < 0 or count < 1 or len(types) not in (1, count) or first <= previous_last:
            return ErrorCode.invalid_request
        if not _ACK_TYPES.issuperset(types):
            return ErrorCode.invalid_request
        previous_last = last
    return ErrorCode.none


def _ranges(taken: list[tuple[int, int]]) -> list[AcquiredRecords]:
    out: list[AcquiredRecords] = []
    for offset, count in taken:
        last = out[-1] if out else None
        if last is not None and last.last_offset == offset - 1 and last.delivery_count == count:
            out[-1] = AcquiredRecords(last.first_offset, offset, count)
        else:
            out.append(AcquiredRecords(offset, offset, count))
    return out
