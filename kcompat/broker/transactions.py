"""Runtime around the transaction coordinator: its log, markers and time.

Theory of operation
-------------------
``__transaction_state`` holds one record per change of a transactional id
(key: version int16 0 + the id, as Kafka; value: the coordinator's JSON
``TxnMeta``). ``persist`` appends a record, waits for the group-committed
fsync and only then applies it to the pure ``TransactionCoordinator``; replay
at start applies every record. Completing a transaction (after PrepareCommit
or PrepareAbort is durable) writes a control batch — the commit or abort
marker, with the transaction's producer id and epoch — to every partition in
it, syncs them, tells the group service about markers on
``__consumer_offsets`` (pending transactional offsets become visible or are
dropped) and finally persists CompleteCommit/CompleteAbort. Requests for one
transactional id are serialised by a per-id lock. A background task aborts
timed-out transactions and, after a restart, completes those left preparing.
"""

from __future__ import annotations

import logging
import struct
from collections import defaultdict
from typing import TYPE_CHECKING

import trio

from kcompat.broker.groups import OFFSETS_TOPIC, partition_for
from kcompat.broker.partition import Partition
from kcompat.broker.state import BrokerState, now_ms
from kcompat.txn.coordinator import Decision, TransactionCoordinator, TxnMeta
from kcompat.wire import batch as wbatch
from kcompat.wire.records import decode_batch, encode_batch, encode_marker_batch

if TYPE_CHECKING:
    from kcompat.broker.groups import GroupService

log = logging.getLogger("kcompat.txn")

TXN_TOPIC = "__transaction_state"
_I16 = struct.Struct(">h")


def txn_key(tid: str) -> bytes:
    data = tid.encode()
    return _I16.pack(0) + _I16.pack(len(data)) + data


def _tid_of(key: bytes) -> str:
    n = _I16.unpack_from(key, 2)[0]
    return key[4 : 4 + n].decode()


class TxnService:
    def __init__(self, state: BrokerState, groups: GroupService) -> None:
        self.state = state
        self.groups = groups
        self.coordinator = TransactionCoordinator(
            max_timeout_ms=int(state.config["transaction.max.timeout.ms"]))
        self._locks: defaultdict[str, trio.Lock] = defaultdict(trio.Lock)
        self._replay()

    def lock(self, tid: str) -> trio.Lock:
        return self._locks[tid]

    # -- the transaction log ---------------------------------------------------
    def _log_partition(self, tid: str) -> Partition:
        count = int(self.state.config["transaction.state.log.num.partitions"])
        if TXN_TOPIC not in self.state.topics:
            self.state.create_topic(TXN_TOPIC, count, 1, {"cleanup.policy": "compact"},
                                    internal=True)
        part = self.state.partition(TXN_TOPIC, partition_for(tid, self.state.topics[TXN_TOPIC]
                                                             .partitions))
        assert part is not None
        return part

    def _replay(self) -> None:
        meta = self.state.topics.get(TXN_TOPIC)
        if meta is None:
            return
        for index in range(meta.partitions):
            part = self.state.partition(TXN_TOPIC, index)
            if part is None:
                continue
            offset, end = part.log.log_start_offset, part.high_watermark
            while offset < end:
                chunk = part.log.read(offset, 1 << 20, end)
                if not chunk:
                    break
                for pos, header in wbatch.iter_headers(chunk):
                    for record in decode_batch(memoryview(chunk)[pos : pos + header.size]):
                        if record.key is not None and record.value is not None:
                            tid = _tid_of(record.key)
                            self.coordinator.apply(TxnMeta.from_json(tid, record.value))
                    offset = header.next_offset

    async def persist(self, meta: TxnMeta) -> None:
        part = self._log_partition(meta.transactional_id)
        now = now_ms()
        raw = encode_batch([(txn_key(meta.transactional_id), meta.to_json(), (), now)])
        view = memoryview(raw)
        part.log.append(view, wbatch.validate(view), part.leader_epoch, now)
        part.notify_append()
        await self.state.flusher.sync(part.log)
        self.coordinator.apply(meta)

    # -- decisions -------------------------------------------------------------
    async def carry_out(self, decision: Decision) -> None:
        """Persist what a decision asks for and, for PrepareX, finish the job."""
        if decision.persist is None:
            return
        await self.persist(decision.persist)
        if decision.complete_after:
            await self.complete(decision.persist)

    async def complete(self, meta: TxnMeta) -> None:
        commit = meta.state.value == "PrepareCommit"
        now = now_ms()
        touched: list[Partition] = []
        for topic, index in sorted(meta.partitions):
            part = self.state.partition(topic, index)
            if part is None:
                continue  # deleted meanwhile
            raw = encode_marker_batch(commit, producer_id=meta.producer_id,
                                      producer_epoch=meta.producer_epoch, coordinator_epoch=0,
                                      timestamp=now)
            view = memoryview(raw)
            part.log.append(view, wbatch.validate(view), part.leader_epoch, now)
            part.notify_append()
            touched.append(part)
        if touched:
            await self.state.flusher.sync(*[p.log for p in touched])
        offsets_parts = {i for t, i in meta.partitions if t == OFFSETS_TOPIC}
        self.groups.complete_transaction(meta.producer_id, commit, offsets_parts)
        await self.persist(self.coordinator.completed(meta, now_ms()))
        log.info("%s transaction of %s (producer %d, %d partitions)",
                 "committed" if commit else "aborted", meta.transactional_id,
                 meta.producer_id, len(meta.partitions))

    # -- time ------------------------------------------------------------------
    async def run(self) -> None:
        for meta in self.coordinator.preparing():
            async with self.lock(meta.transactional_id):
                await self.complete(meta)
        interval_s = int(self.state.config["transaction.abort.timed.out.transaction.cleanup"
                                           ".interval.ms"]) / 1000
        while True:
            await trio.sleep(interval_s)
            for decision in self.coordinator.timed_out(now_ms()):
                assert decision.persist is not None
                tid = decision.persist.transactional_id
                async with self.lock(tid):
                    current = self.coordinator.txns.get(tid)
                    if current is None or current.state.value != "Ongoing":
                        continue
                    log.info("aborting timed-out transaction of %s", tid)
                    await self.carry_out(decision)

    def offsets_partition(self, group_id: str) -> tuple[str, int]:
        return OFFSETS_TOPIC, partition_for(group_id, self.groups.num_partitions)
