"""KIP-890 part 1 across brokers: a partition leader asks the transaction
coordinator before it accepts a transaction's first batch.

Theory of operation
-------------------
A transactional batch may only join a partition that its producer's ongoing
transaction has added (AddPartitionsToTxn); otherwise a late or stray batch
could open a transaction that nobody will ever end (a *hanging* transaction,
which pins the last stable offset). The produce path asks the local
coordinator when it is here; else the coordinator is the leader of the
transactional id's ``__transaction_state`` partition on another broker, and
the partition leader verifies the way Kafka's brokers do with
AddPartitionsToTxn ``verifyOnly``:

* before the (synchronous) append, ``verify_request`` looks at each
  partition of a Produce this broker leads whose batch is transactional and
  whose producer has no transaction open in that partition yet; it sends the
  coordinator a ``VerifyTxnRequest`` and remembers a positive answer for
  ``(producer id, epoch)`` in this partition and leader term;
* the append's transaction check (``accepts``) then passes a batch whose
  producer already has a transaction open in the partition (later batches of
  the same transaction need no new round trip) or that was just verified;
* a marker written for the producer ends the transaction there and forgets the
  verification (``forget``), and a new leader term starts with none, so a
  batch arriving after the transaction ended must be verified again.

If the coordinator cannot answer (moving, loading, unreachable) the batch gets
NOT_ENOUGH_REPLICAS — retriable for every client, as Kafka answers.
``in_transaction`` asks the same of a TxnOffsetCommit's offsets partition on
a group coordinator that is not the transaction's coordinator.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from kcompat.broker.controller.internal_topics import TXN_TOPIC, partition_for
from kcompat.broker.replication import codec
from kcompat.wire import batch as wbatch

if TYPE_CHECKING:
    from kcompat.broker.replication.peer_calls import PeerCalls
    from kcompat.broker.replication.runtime import ClusterRuntime


class Coordinator(Protocol):
    """The transaction coordinator's answers this module needs (``TxnService``)."""

    def verify(self, tid: str, pid: int, epoch: int, partition: tuple[str, int]) -> ErrorCode: ...

    def serves_producer(self, pid: int) -> bool: ...

    async def add_locally(self, tid: str, pid: int, epoch: int,
                          partition: tuple[str, int]) -> ErrorCode: ...

log = logging.getLogger("kcompat.cluster")

VERIFY_TIMEOUT_S = 5.0
_RETRIABLE = (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
              ErrorCode.coordinator_load_in_progress, ErrorCode.request_timed_out,
              ErrorCode.concurrent_transactions)


class TxnVerifier:
    def __init__(self, runtime: ClusterRuntime, calls: PeerCalls, txns: Coordinator) -> None:
        self.rt = runtime
        self.calls = calls
        self.txns = txns
        runtime.inbound[codec.VerifyTxnRequest] = self.serve
        runtime.marker_listeners.append(self.forget)
        # (topic, index) -> (leader term, {(producer id, epoch)} verified in it)
        self._verified: dict[tuple[str, int], tuple[int, set[tuple[int, int]]]] = {}

    # -- the partition leader's side --------------------------------------------------

    def accepts(self, topic: str, index: int, header: wbatch.BatchHeader) -> bool:
        """May this transactional batch be appended without asking again?"""
        part = self.rt.state.partition(topic, index)
        group = self.rt.group_of(topic, index)
        if part is None or group is None:
            return False
        pid, epoch = header.producer_id, header.producer_epoch
        entry = part.log.producers.producers.get(pid)
        if entry is not None and entry.epoch == epoch and entry.txn_first_offset >= 0:
            return True  # the transaction is already open here
        term, verified = self._verified.get((topic, index), (-1, set()))
        return term == group.raft.term and (pid, epoch) in verified

    def forget(self, topic: str, index: int, pid: int) -> None:
        """A marker for ``pid`` ended its transaction in this partition."""
        found = self._verified.get((topic, index))
        if found is not None:
            found[1].difference_update({v for v in found[1] if v[0] == pid})

    async def verify_request(self, tid: str | None,
                             topics: Iterable[tuple[str, Iterable[Any]]]
                             ) -> dict[tuple[str, int], ErrorCode]:
        """Verify every partition of a Produce request that needs it (``topics``:
        (name, partition data) of the topics this broker knows); the errors to
        answer for partitions the coordinator did not confirm."""
        errors: dict[tuple[str, int], ErrorCode] = {}
        if tid is None:  # not a transactional producer: nothing to ask (the append
            return errors  # refuses a transactional batch without an id anyway)
        for name, partition_data in topics:
            for pdata in partition_data:
                header = _first_header(pdata.records)
                key = (name, pdata.index)
                if (header is None or not header.is_transactional
                        or not self.rt.leads(*key)
                        or self.txns.serves_producer(header.producer_id)
                        or self.accepts(*key, header)):
                    continue
                code = await self._ask(tid, header.producer_id, header.producer_epoch, *key)
                if code == ErrorCode.none:
                    group = self.rt.group_of(*key)
                    assert group is not None
                    term, verified = self._verified.get(key, (-1, set()))
                    if term != group.raft.term:
                        verified = set()
                    verified.add((header.producer_id, header.producer_epoch))
                    self._verified[key] = (group.raft.term, verified)
                else:
                    errors[key] = (ErrorCode.not_enough_replicas if code in _RETRIABLE
                                   else code)
        return errors

    async def in_transaction(self, tid: str, pid: int, epoch: int,
                             partition: tuple[str, int]) -> ErrorCode:
        """Is ``partition`` in the producer's ongoing transaction, by ``tid``'s
        coordinator here or on another broker (a TxnOffsetCommit's offsets
        partition, which Kafka's group coordinator verifies so): NONE, the
        coordinator's error, or COORDINATOR_NOT_AVAILABLE while it cannot
        answer (retriable for a producer)."""
        code = await self._ask(tid, pid, epoch, *partition)
        return ErrorCode.coordinator_not_available if code in _RETRIABLE else code

    async def _ask(self, tid: str, pid: int, epoch: int, topic: str,
                   index: int, add: bool = False) -> ErrorCode:
        """``tid``'s coordinator's answer, here or remote: is ``topic``-``index``
        in the producer's ongoing transaction (or, ``add``, make it so)."""
        rt = self.rt
        meta = rt.state.topics.get(TXN_TOPIC)
        if meta is None:
            return ErrorCode.coordinator_not_available
        coordinator = rt.partition_view(TXN_TOPIC, partition_for(tid, meta.partitions))[0]
        if coordinator == rt.node_id:
            if add:
                return await self.txns.add_locally(tid, pid, epoch, (topic, index))
            return self.txns.verify(tid, pid, epoch, (topic, index))
        if coordinator not in rt.peers:
            return ErrorCode.coordinator_not_available
        slot = await self.calls.call(coordinator, lambda rid: codec.VerifyTxnRequest(
            rid, tid, pid, epoch, topic, index, add), VERIFY_TIMEOUT_S)
        return slot[1]  # type: ignore[no-any-return]

    # -- the coordinator's side ---------------------------------------------------------

    def serve(self, src: int, req: codec.VerifyTxnRequest) -> None:
        if req.add:
            self.rt.spawn(self._serve_add, src, req)
            return
        code = self.txns.verify(req.transactional_id, req.producer_id, req.producer_epoch,
                                (req.topic, req.index))
        self.rt.send_internal(src, codec.VerifyTxnReply(req.request_id, int(code)))

    async def _serve_add(self, src: int, req: codec.VerifyTxnRequest) -> None:
        code = await self.txns.add_locally(req.transactional_id, req.producer_id,
                                           req.producer_epoch, (req.topic, req.index))
        self.rt.send_internal(src, codec.VerifyTxnReply(req.request_id, int(code)))

    async def add_partition(self, tid: str, header: wbatch.BatchHeader,
                            partition: tuple[str, int]) -> ErrorCode:
        """Have ``tid``'s coordinator add ``partition`` to the ongoing
        transaction of ``header``'s producer, so that its markers reach it too
        (a partition the broker writes to on the producer's behalf); an error
        as the producer gets it, a busy coordinator retriable as in
        ``verify_request``."""
        code = await self._ask(tid, header.producer_id, header.producer_epoch, *partition,
                               add=True)
        return ErrorCode.not_enough_replicas if code in _RETRIABLE else code


def _first_header(records: bytes | None) -> wbatch.BatchHeader | None:
    """The first batch's header (a malformed batch is the append's to report)."""
    if not records or len(records) < wbatch.HEADER_SIZE:
        return None
    return wbatch.parse_header(memoryview(records))
