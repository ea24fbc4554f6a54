"""The transaction coordinator (KIP-98), sans-IO, over ``__transaction_state``.

Theory of operation
-------------------
Each transactional id has a ``TxnMeta``: producer id and epoch, timeout, state
and the partitions in the current transaction. States and moves::

    Empty/CompleteCommit/CompleteAbort --AddPartitions--> Ongoing
    Ongoing --EndTxn(commit)--> PrepareCommit --markers written--> CompleteCommit
    Ongoing --EndTxn(abort) / timeout / InitProducerId--> PrepareAbort --> CompleteAbort

The coordinator never changes its state directly. Every request method
*validates* and returns the new ``TxnMeta`` to persist (or an error); the
caller appends it to the transaction log, waits until it is durable, and then
calls ``apply``, which is also what replay at start-up calls (docs/architecture.md, principle 5).
Between PrepareX and CompleteX the caller writes a commit/abort marker to every
partition of the transaction. A transaction is aborted with a bumped epoch when
it times out or when its id re-initialises, which fences the old producer:
its next request fails with PRODUCER_FENCED / INVALID_PRODUCER_EPOCH.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from kio.schema.errors import ErrorCode

EPOCH_MAX = 32767


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"


PREPARING = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
COMPLETE = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


@dataclass(frozen=True, slots=True)
class TxnMeta:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]] = frozenset()
    start_ms: int = -1
    update_ms: int = -1

    def to_json(self) -> bytes:
        return json.dumps({
            "pid": self.producer_id, "epoch": self.producer_epoch, "timeout": self.timeout_ms,
            "state": self.state.value, "partitions": sorted(self.partitions),
            "start": self.start_ms, "update": self.update_ms,
        }, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, transactional_id: str, data: bytes) -> TxnMeta:
        doc = json.loads(data)
        return cls(transactional_id, int(doc["pid"]), int(doc["epoch"]), int(doc["timeout"]),
                   TxnState(doc["state"]), frozenset((t, int(p)) for t, p in doc["partitions"]),
                   int(doc["start"]), int(doc["update"]))


@dataclass(frozen=True, slots=True)
class Decision:
    """What a request leads to: an error, or metadata to persist (or neither)."""

    error: ErrorCode = ErrorCode.none
    persist: TxnMeta | None = None
    complete_after: bool = False  # PrepareX persisted: write markers, then complete


@dataclass
class TransactionCoordinator:
    max_timeout_ms: int = 900_000
    txns: dict[str, TxnMeta] = field(default_factory=dict)
    by_producer: dict[int, str] = field(default_factory=dict)

    def apply(self, meta: TxnMeta) -> None:
        old = self.txns.get(meta.transactional_id)
        if old is not None and old.producer_id != meta.producer_id:
            self.by_producer.pop(old.producer_id, None)
        self.txns[meta.transactional_id] = meta
        self.by_producer[meta.producer_id] = meta.transactional_id

    # -- InitProducerId -------------------------------------------------------
    def init_producer_id(self, tid: str, timeout_ms: int, expected_pid: int,
                         expected_epoch: int, now_ms: int,
                         new_pid: Callable[[], int]) -> Decision:
        if timeout_ms <= 0 or timeout_ms > self.max_timeout_ms:
            return Decision(ErrorCode.invalid_transaction_timeout)
        meta = self.txns.get(tid)
        if meta is None:
            return Decision(persist=TxnMeta(tid, new_pid(), 0, timeout_ms, TxnState.EMPTY,
                                            update_ms=now_ms))
        if expected_pid >= 0 and (expected_pid != meta.producer_id
                                  or expected_epoch != meta.producer_epoch):
            return Decision(ErrorCode.producer_fenced)
        if meta.state in PREPARING:
            return Decision(ErrorCode.concurrent_transactions)
        if meta.state is TxnState.ONGOING:
            return self._fence_and_abort(meta, now_ms)
        if meta.producer_epoch + 1 >= EPOCH_MAX:
            pid, epoch = new_pid(), 0
        else:
            pid, epoch = meta.producer_id, meta.producer_epoch + 1
        return Decision(persist=replace(meta, producer_id=pid, producer_epoch=epoch,
                                        timeout_ms=timeout_ms, state=TxnState.EMPTY,
                                        partitions=frozenset(), start_ms=-1, update_ms=now_ms))

    def _fence_and_abort(self, meta: TxnMeta, now_ms: int) -> Decision:
        """Abort an ongoing transaction with a bumped epoch; the requester retries."""
        bumped = min(meta.producer_epoch + 1, EPOCH_MAX - 1)
        return Decision(ErrorCode.concurrent_transactions,
                        replace(meta, producer_epoch=bumped, state=TxnState.PREPARE_ABORT,
                                update_ms=now_ms), complete_after=True)

    # -- checks shared by the per-transaction requests -----------------------
    def _check(self, tid: str, pid: int, epoch: int) -> tuple[ErrorCode | None, TxnMeta | None]:
        meta = self.txns.get(tid)
        if meta is None or meta.producer_id != pid:
            return ErrorCode.invalid_producer_id_mapping, None
        if epoch != meta.producer_epoch:
            return ErrorCode.producer_fenced, None
        return None, meta

    # -- AddPartitionsToTxn / AddOffsetsToTxn --------------------------------
    def add_partitions(self, tid: str, pid: int, epoch: int,
                       partitions: set[tuple[str, int]], now_ms: int) -> Decision:
        error, meta = self._check(tid, pid, epoch)
        if error is not None or meta is None:
            return Decision(error or ErrorCode.invalid_producer_id_mapping)
        if meta.state in PREPARING:
            return Decision(ErrorCode.concurrent_transactions)
        if meta.state is TxnState.ONGOING and partitions <= meta.partitions:
            return Decision()
        start = meta.start_ms if meta.state is TxnState.ONGOING else now_ms
        base = meta.partitions if meta.state is TxnState.ONGOING else frozenset()
        return Decision(persist=replace(meta, state=TxnState.ONGOING,
                                        partitions=base | partitions, start_ms=start,
                                        update_ms=now_ms))

    # -- EndTxn ----------------------------------------------------------------
    def end_txn(self, tid: str, pid: int, epoch: int, commit: bool, now_ms: int) -> Decision:
        error, meta = self._check(tid, pid, epoch)
        if error is not None or meta is None:
            return Decision(error or ErrorCode.invalid_producer_id_mapping)
        if meta.state is TxnState.ONGOING:
            target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            return Decision(persist=replace(meta, state=target, update_ms=now_ms),
                            complete_after=True)
        if meta.state is (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT):
            return Decision()  # a retry of an EndTxn that already completed
        if meta.state in PREPARING:
            wanted = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            return Decision(ErrorCode.concurrent_transactions if meta.state is wanted
                            else ErrorCode.invalid_txn_state)
        return Decision(ErrorCode.invalid_txn_state)

    def completed(self, meta: TxnMeta, now_ms: int) -> TxnMeta:
        """The CompleteX metadata that follows a PrepareX once markers are written."""
        done = (TxnState.COMPLETE_COMMIT if meta.state is TxnState.PREPARE_COMMIT
                else TxnState.COMPLETE_ABORT)
        return replace(meta, state=done, partitions=frozenset(), start_ms=-1, update_ms=now_ms)

    # -- produce-path and offset checks (KIP-890 part 1) -----------------------
    def in_transaction(self, pid: int, epoch: int, partition: tuple[str, int]) -> bool:
        tid = self.by_producer.get(pid)
        meta = self.txns.get(tid) if tid is not None else None
        return (meta is not None and meta.producer_epoch == epoch
                and meta.state is TxnState.ONGOING and partition in meta.partitions)

    # -- time -----------------------------------------------------------------
    def timed_out(self, now_ms: int) -> list[Decision]:
        """Abort (with an epoch bump) every Ongoing transaction past its timeout."""
        return [self._fence_and_abort(m, now_ms) for m in self.txns.values()
                if m.state is TxnState.ONGOING and now_ms - m.start_ms > m.timeout_ms]

    def preparing(self) -> list[TxnMeta]:
        """Transactions left in PrepareX (after a restart): complete them."""
        return [m for m in self.txns.values() if m.state in PREPARING]
