"""Runtime around the transaction coordinator: its log, markers and time.

Theory of operation
-------------------
``__transaction_state`` holds one record per change of a transactional id
(key: version int16 0 + the id, as Kafka; value: the coordinator's JSON
``TxnMeta``). ``persist`` proposes a record to the id's partition and waits
for its commit; it reaches the pure ``TransactionCoordinator`` through
``apply``.
Completing a transaction (after PrepareCommit or PrepareAbort is committed)
writes a control batch — the commit or abort marker, with the transaction's
producer id and epoch — to every partition in it through the partition's Raft
group (``PeerCalls.write_marker``: a local proposal when leading, else a
request to the leader), retried until committed while this broker still
coordinates the id; the group service learns of markers on
``__consumer_offsets`` as they are written (pending transactional offsets
become visible or are dropped), and finally CompleteCommit/CompleteAbort is
persisted. Requests for one transactional id are serialised by a per-id lock.

As ``GroupService``: ``TxnService`` is the replicated state machine of
``__transaction_state`` — every replica applies each committed record to the
pure coordinator as it commits, the leader's own included — and the leader
of the id's partition coordinates once it has applied everything before its
term; it then completes the PrepareX transactions it finds (``on_role``, also
after a restart). A background task aborts timed-out transactions.
"""

from __future__ import annotations

import logging
import struct
from collections import defaultdict

import trio
from kio.schema.errors import ErrorCode

from kcompat.broker.controller.internal_topics import OFFSETS_TOPIC, TXN_TOPIC, partition_for
from kcompat.broker.groups.groups import GroupService, NotCoordinatorError, write_committed
from kcompat.broker.replication.peer_calls import PeerCalls
from kcompat.broker.replication.runtime import ClusterRuntime
from kcompat.broker.storage.partition import Partition
from kcompat.broker.storage.state import BrokerState, now_ms
from kcompat.broker.txn.txn_verify import TxnVerifier
from kcompat.txn.coordinator import Decision, TransactionCoordinator, TxnMeta
from kcompat.wire.batch import BatchHeader
from kcompat.wire.records import decode_batch, encode_batch

log = logging.getLogger("kcompat.txn")

MARKER_RETRY_S = 0.2
_I16 = struct.Struct(">h")


def txn_key(tid: str) -> bytes:
    data = tid.encode()
    return _I16.pack(0) + _I16.pack(len(data)) + data


def _tid_of(key: bytes) -> str:
    n = _I16.unpack_from(key, 2)[0]
    return key[4 : 4 + n].decode()


class TxnService:
    def __init__(self, state: BrokerState, cluster: ClusterRuntime, calls: PeerCalls,
                 groups: GroupService) -> None:
        self.state = state
        self.cluster = cluster
        self.calls = calls
        self.groups = groups
        self.verifier = TxnVerifier(cluster, calls, self)  # KIP-890 across brokers
        self.coordinator = TransactionCoordinator(
            max_timeout_ms=int(state.config["transaction.max.timeout.ms"]))
        self._locks: defaultdict[str, trio.Lock] = defaultdict(trio.Lock)
        self._to_complete: list[TxnMeta] = []  # PrepareX found by a new coordinator
        self._complete_wake = trio.Event()
        cluster.machines[TXN_TOPIC] = self  # fed by the replication host

    def lock(self, tid: str) -> trio.Lock:
        return self._locks[tid]

    # -- the transaction log ---------------------------------------------------
    def _log_partition(self, tid: str) -> Partition:
        if TXN_TOPIC not in self.state.topics:  # created on FindCoordinator
            raise NotCoordinatorError(ErrorCode.coordinator_not_available)
        part = self.state.partition(TXN_TOPIC, partition_for(tid, self.state.topics[TXN_TOPIC]
                                                             .partitions))
        assert part is not None
        return part

    # -- the coordinator is the leader of the log partition ----------------------
    def coordinator_error(self, tid: str) -> ErrorCode | None:
        """None when this broker may serve ``tid`` now: only the Raft leader of
        the id's ``__transaction_state`` partition coordinates, once it has
        applied everything committed before its term (as ``GroupService``)."""
        meta = self.state.topics.get(TXN_TOPIC)
        if meta is None:
            return ErrorCode.coordinator_not_available
        return self.cluster.serving_machine(TXN_TOPIC,
                                                  partition_for(tid, meta.partitions))

    # -- the replicated state machine over __transaction_state -------------------
    def apply(self, index: int, batch: memoryview, header: BatchHeader) -> None:
        """A committed batch of log partition ``index`` (every replica)."""
        if header.is_control:  # Raft leader-change records
            return
        for record in decode_batch(batch):
            if record.key is not None and record.value is not None:
                self.coordinator.apply(TxnMeta.from_json(_tid_of(record.key), record.value))

    def restore(self, index: int, start: int) -> None:
        """The log was cut below what was applied (DeleteRecords on an internal
        topic): the state already applied stays."""

    def on_role(self, index: int, leading: bool) -> None:
        """A new coordinator of log partition ``index`` completes the PrepareX
        transactions it finds (its state is current: no replay)."""
        if not leading:
            return
        count = self.state.topics[TXN_TOPIC].partitions
        preparing = [m for m in self.coordinator.preparing()
                     if partition_for(m.transactional_id, count) == index]
        if preparing:
            log.info("%s-%d: completing %d transactions left preparing", TXN_TOPIC, index,
                     len(preparing))
            self._to_complete.extend(preparing)
            self._complete_wake.set()

    def verify(self, tid: str, pid: int, epoch: int, partition: tuple[str, int]) -> ErrorCode:
        """KIP-890 part 1, the coordinator's answer: may a transactional batch
        of ``pid``/``epoch`` join ``partition``? NONE when its ongoing
        transaction added the partition."""
        error = self.coordinator_error(tid)
        if error is not None:
            return error
        coordinator = self.coordinator
        meta = coordinator.txns.get(tid)
        if meta is None or meta.producer_id != pid:
            return ErrorCode.invalid_txn_state
        if epoch < meta.producer_epoch:
            return ErrorCode.invalid_producer_epoch
        if coordinator.in_transaction(pid, epoch, partition):
            return ErrorCode.none
        return ErrorCode.invalid_txn_state

    async def add_locally(self, tid: str, pid: int, epoch: int,
                          partition: tuple[str, int]) -> ErrorCode:
        """AddPartitionsToTxn for a partition the broker writes to itself on
        the producer's behalf (``txn_verify.add_partition``)."""
        gate = self.coordinator_error(tid)
        if gate is not None:
            return gate
        async with self.lock(tid):
            decision = self.coordinator.add_partitions(tid, pid, epoch, {partition}, now_ms())
            try:
                await self.carry_out(decision)
            except NotCoordinatorError as e:
                return e.code
            return decision.error

    def serves_producer(self, pid: int) -> bool:
        """This broker coordinates (and has loaded) the transaction of producer
        ``pid``; the produce path verifies only such batches here (others with
        their coordinator, ``txn_verify``)."""
        tid = self.coordinator.by_producer.get(pid)
        return tid is not None and self.coordinator_error(tid) is None

    async def persist(self, meta: TxnMeta) -> None:
        part = self._log_partition(meta.transactional_id)
        now = now_ms()
        raw = encode_batch([(txn_key(meta.transactional_id), meta.to_json(), (), now)])
        await write_committed(self.cluster, part, memoryview(raw), now)  # applied once committed

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
        await self._write_markers(meta, commit)
        await self.persist(self.coordinator.completed(meta, now_ms()))
        log.info("%s transaction of %s (producer %d, %d partitions)",
                 "committed" if commit else "aborted", meta.transactional_id,
                 meta.producer_id, len(meta.partitions))

    async def _write_markers(self, meta: TxnMeta, commit: bool) -> None:
        """Every marker through its partition's Raft group (see
        ``PeerCalls.write_marker``), retried until committed while this
        broker still coordinates the id (NotCoordinatorError otherwise: the new
        coordinator completes the transaction after its load)."""
        remaining = sorted(meta.partitions)
        while remaining:
            if self.coordinator_error(meta.transactional_id) is not None:
                raise NotCoordinatorError(ErrorCode.not_coordinator)
            results = await _gather([
                (lambda t=t, i=i: self.calls.write_marker(t, i, meta.producer_id,
                                                       meta.producer_epoch, commit))
                for t, i in remaining])
            remaining = [tp for tp, code in zip(remaining, results, strict=True)
                         if code not in (ErrorCode.none, ErrorCode.unknown_topic_or_partition)]
            if remaining:
                await trio.sleep(MARKER_RETRY_S)

    # -- time ------------------------------------------------------------------
    async def _complete_loaded(self) -> None:
        """Finish the PrepareX transactions a new coordinator found."""
        while True:
            await self._complete_wake.wait()
            self._complete_wake = trio.Event()
            todo, self._to_complete = self._to_complete, []
            for meta in todo:
                async with self.lock(meta.transactional_id):
                    current = self.coordinator.txns.get(meta.transactional_id)
                    if current != meta:
                        continue
                    try:
                        await self.complete(meta)
                    except NotCoordinatorError as e:
                        log.info("completing %s: %s", meta.transactional_id, e)

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._complete_loaded)
            nursery.start_soon(self._abort_timed_out)

    async def _abort_timed_out(self) -> None:
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
                    if self.coordinator_error(tid) is not None:
                        continue  # another broker coordinates it now
                    log.info("aborting timed-out transaction of %s", tid)
                    try:
                        await self.carry_out(decision)
                    except NotCoordinatorError:
                        pass

    def offsets_partition(self, group_id: str) -> tuple[str, int]:
        return OFFSETS_TOPIC, partition_for(group_id, self.groups.num_partitions)


async def _gather(calls: list) -> list[ErrorCode]:  # type: ignore[type-arg]
    """Run the async ``calls`` concurrently; their results in order."""
    results: list[ErrorCode] = [ErrorCode.request_timed_out] * len(calls)

    async def one(i: int) -> None:
        results[i] = await calls[i]()

    async with trio.open_nursery() as nursery:
        for i in range(len(calls)):
            nursery.start_soon(one, i)
    return results
