"""Runtime around the group coordinator: parked requests, time, the offsets log.

Theory of operation
-------------------
The pure ``GroupCoordinator`` answers with ``Reply(token, result)`` values; this
service maps tokens to waiting handler tasks (a trio Event and a result slot
each), runs a ticker that calls ``tick`` at the coordinator's next deadline,
and persists what must survive a restart into ``__consumer_offsets``: offset
commits (before they are acknowledged, fsynced through the group-commit
flusher) and group metadata after each completed rebalance. At start every
partition of ``__consumer_offsets`` is replayed into the ``OffsetStore`` and the
groups are rebuilt. The coordinator of a group is the leader of partition
``abs(javaHash(group)) % offsets.topic.num.partitions``, as in Kafka — on a
single node always this broker, but the records land where Kafka puts them.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import trio

from kcompat.broker.partition import Partition
from kcompat.broker.state import BrokerState, now_ms
from kcompat.coordinator.coordinator import CoordinatorConfig, GroupCoordinator, Reply
from kcompat.coordinator.offsets import (
    CommittedOffset,
    OffsetStore,
    group_key,
    group_value,
    offset_key,
    offset_value,
    parse_offset_record,
)
from kcompat.wire import batch as wbatch
from kcompat.wire.records import decode_batch, encode_batch, marker_aborts

log = logging.getLogger("kcompat.groups")

OFFSETS_TOPIC = "__consumer_offsets"
TICK_MAX_S = 1.0
EXPIRY_CHECK_MS = 60_000


def java_string_hash(s: str) -> int:
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, partitions: int) -> int:
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass(eq=False)
class _Waiter:
    event: trio.Event
    result: Any = None


class GroupService:
    def __init__(self, state: BrokerState) -> None:
        self.state = state
        cfg = state.config
        self.coordinator = GroupCoordinator(CoordinatorConfig(
            min_session_timeout_ms=cfg["group.min.session.timeout.ms"],
            max_session_timeout_ms=cfg["group.max.session.timeout.ms"],
            initial_rebalance_delay_ms=cfg["group.initial.rebalance.delay.ms"],
            max_group_size=cfg["group.max.size"],
        ))
        self.store = OffsetStore()
        # transactional offsets (TxnOffsetCommit) awaiting their marker, per producer id
        self.pending: dict[int, dict[tuple[str, str, int], CommittedOffset]] = {}
        self._held_partition: dict[int, int] = {}  # pid -> offsets partition of its batch
        self._waiters: dict[int, _Waiter] = {}
        self._next_token = 0
        self._wake = trio.Event()
        self._replay()

    # -- the offsets topic ----------------------------------------------------
    @property
    def num_partitions(self) -> int:
        meta = self.state.topics.get(OFFSETS_TOPIC)
        return meta.partitions if meta else int(self.state.config["offsets.topic.num.partitions"])

    def ensure_offsets_topic(self) -> None:
        if OFFSETS_TOPIC not in self.state.topics:
            self.state.create_topic(
                OFFSETS_TOPIC, self.state.config["offsets.topic.num.partitions"], 1,
                {"cleanup.policy": "compact", "segment.bytes": "104857600"}, internal=True)

    def _offsets_partition(self, group_id: str) -> Partition:
        self.ensure_offsets_topic()
        part = self.state.partition(OFFSETS_TOPIC, partition_for(group_id, self.num_partitions))
        assert part is not None
        return part

    def _replay(self) -> None:
        meta = self.state.topics.get(OFFSETS_TOPIC)
        if meta is None:
            return
        for index in range(meta.partitions):
            part = self.state.partition(OFFSETS_TOPIC, index)
            if part is None:
                continue
            offset, end = part.log.log_start_offset, part.high_watermark
            while offset < end:
                chunk = part.log.read(offset, 1 << 20, end)
                if not chunk:
                    break
                for pos, header in wbatch.iter_headers(chunk):
                    self._replay_batch(memoryview(chunk)[pos : pos + header.size], header, index)
                    offset = header.next_offset
        now = now_ms()
        for group_id, stored in self.store.groups.items():
            self.coordinator.restore(group_id, stored, now)
        for group_id in self.store.offsets:
            self.coordinator.ensure_group(group_id, now)

    def _replay_batch(self, batch: memoryview, header: wbatch.BatchHeader, index: int) -> None:
        if header.is_control:
            self.complete_transaction(header.producer_id, not marker_aborts(batch), {index})
            return
        records: list[tuple[bytes | None, bytes | None]] = [
            (r.key, r.value) for r in decode_batch(batch) if r.key is not None]
        if header.is_transactional:
            self._hold(header.producer_id, index, records)
            return
        for key, value in records:
            if key is not None:
                self.store.apply(key, value)

    def _hold(self, pid: int, index: int, records: list[tuple[bytes | None, bytes | None]]) -> None:
        """Keep transactional offset records until their transaction's marker."""
        held = self.pending.setdefault(pid, {})
        for key, value in records:
            parsed = parse_offset_record(key, value) if key is not None else None
            if parsed is not None:
                (group, topic, partition), committed = parsed
                held[(group, topic, partition)] = committed
        self._held_partition[pid] = index

    def complete_transaction(self, pid: int, commit: bool, partitions: set[int]) -> None:
        """A marker reached ``__consumer_offsets`` partitions: publish or drop."""
        if self._held_partition.get(pid) not in partitions:
            return
        held = self.pending.pop(pid, {})
        self._held_partition.pop(pid, None)
        if commit:
            for (group, topic, partition), committed in held.items():
                self.store.apply(offset_key(group, topic, partition), offset_value(committed))

    def is_pending(self, group_id: str, topic: str, partition: int) -> bool:
        return any((group_id, topic, partition) in held for held in self.pending.values())

    async def txn_commit_offsets(self, group_id: str, pid: int, epoch: int,
                                 offsets: dict[tuple[str, int], CommittedOffset]) -> None:
        """TxnOffsetCommit: write a transactional batch; visible after COMMIT."""
        part = self._offsets_partition(group_id)
        records: list[tuple[bytes | None, bytes | None]] = [
            (offset_key(group_id, t, p), offset_value(c)) for (t, p), c in offsets.items()]
        now = now_ms()
        raw = encode_batch([(k, v, (), now) for k, v in records], producer_id=pid,
                           producer_epoch=epoch, transactional=True)
        view = memoryview(raw)
        part.log.append(view, wbatch.validate(view), part.leader_epoch, now)
        part.notify_append()
        await self.state.flusher.sync(part.log)
        self._hold(pid, part.index, records)

    async def _append(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> None:
        """Append records for one group durably, then apply them to the store."""
        part = self._offsets_partition(group_id)
        now = now_ms()
        raw = encode_batch([(k, v, (), now) for k, v in records])
        view = memoryview(raw)
        part.log.append(view, wbatch.validate(view), part.leader_epoch, now)
        part.notify_append()
        await self.state.flusher.sync(part.log)
        for key, value in records:
            self.store.apply(key, value)

    async def commit_offsets(self, group_id: str,
                             offsets: dict[tuple[str, int], CommittedOffset]) -> None:
        if offsets:
            await self._append(group_id, [(offset_key(group_id, t, p), offset_value(c))
                                          for (t, p), c in offsets.items()])

    async def delete_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> None:
        records: list[tuple[bytes, bytes | None]] = [
            (offset_key(group_id, t, p), None) for t, p in partitions]
        if records:
            await self._append(group_id, records)

    async def delete_group_records(self, group_id: str) -> None:
        records: list[tuple[bytes, bytes | None]] = [
            (offset_key(group_id, t, p), None) for t, p in self.store.committed(group_id)]
        records.append((group_key(group_id), None))
        await self._append(group_id, records)

    # -- parked requests ------------------------------------------------------
    def new_token(self) -> tuple[int, _Waiter]:
        self._next_token += 1
        waiter = _Waiter(trio.Event())
        self._waiters[self._next_token] = waiter
        return self._next_token, waiter

    async def wait(self, token: int, waiter: _Waiter, replies: list[Reply]) -> Any:
        try:
            await self.deliver(replies)
            await waiter.event.wait()
            return waiter.result
        finally:
            self._waiters.pop(token, None)

    async def deliver(self, replies: list[Reply]) -> None:
        """Persist changed groups, then release the waiting requests."""
        for group_id in self.coordinator.pop_group_changes():
            group = self.coordinator.groups.get(group_id)
            if group is not None:
                await self._append(group_id, [(group_key(group_id), group_value(group))])
        for reply in replies:
            waiter = self._waiters.get(reply.token)
            if waiter is not None:
                waiter.result = reply.result
                waiter.event.set()
        self._wake.set()

    @staticmethod
    def new_member_suffix() -> str:
        return str(uuid.uuid4())

    # -- time -----------------------------------------------------------------
    async def run(self) -> None:
        last_expiry = 0
        while True:
            deadline = self.coordinator.next_deadline_ms()
            now = now_ms()
            wait_s = TICK_MAX_S if deadline is None else min(max((deadline - now) / 1000, 0),
                                                             TICK_MAX_S)
            self._wake = trio.Event()
            with trio.move_on_after(wait_s):
                await self._wake.wait()
            now = now_ms()
            await self.deliver(self.coordinator.tick(now))
            if now - last_expiry >= EXPIRY_CHECK_MS:
                last_expiry = now
                await self.expire_offsets(now)

    async def expire_offsets(self, now: int) -> None:
        retention_ms = int(self.state.config["offsets.retention.minutes"]) * 60_000
        for group_id in list(self.store.offsets):
            group = self.coordinator.groups.get(group_id)
            expired = self.store.expired(group, group_id, now, retention_ms)
            if expired:
                log.info("expiring %d offsets of group %s", len(expired), group_id)
                await self.delete_offsets(group_id, expired)
