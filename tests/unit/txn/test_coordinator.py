"""The transaction state machine (KIP-98 / KIP-360 / KIP-588), driven purely."""

from __future__ import annotations

import itertools

from kio.schema.errors import ErrorCode as E

from kcompat.txn.coordinator import Decision, TransactionCoordinator, TxnMeta
from kcompat.txn.coordinator import TxnState as S

TID = "app-1"
P = ("t", 0)
Q = ("t", 1)


class Driver:
    def __init__(self) -> None:
        self.c = TransactionCoordinator(max_timeout_ms=60_000)
        self.pids = itertools.count(1000)

    def do(self, decision: Decision) -> Decision:
        """Persist as the runtime would: PrepareX is followed by CompleteX."""
        if decision.persist is not None:
            self.c.apply(decision.persist)
            if decision.complete_after:
                self.c.apply(self.c.completed(decision.persist, 0))
        return decision

    def init(self, now: int = 0, pid: int = -1, epoch: int = -1, timeout: int = 10_000) -> Decision:
        return self.do(self.c.init_producer_id(TID, timeout, pid, epoch, now,
                                               lambda: next(self.pids)))

    @property
    def meta(self) -> TxnMeta:
        return self.c.txns[TID]


def test_init_then_epoch_bump_on_reinit() -> None:
    d = Driver()
    assert d.init().error == E.none
    assert (d.meta.producer_id, d.meta.producer_epoch, d.meta.state) == (1000, 0, S.EMPTY)
    d.init()
    assert (d.meta.producer_id, d.meta.producer_epoch) == (1000, 1)


def test_timeout_above_maximum_is_refused() -> None:
    assert Driver().init(timeout=60_001).error == E.invalid_transaction_timeout


def test_add_partitions_commit_cycle() -> None:
    d = Driver()
    d.init()
    assert d.do(d.c.add_partitions(TID, 1000, 0, {P}, 5)).error == E.none
    assert d.meta.state is S.ONGOING and d.meta.start_ms == 5
    d.do(d.c.add_partitions(TID, 1000, 0, {Q}, 7))
    assert d.meta.partitions == {P, Q} and d.meta.start_ms == 5
    assert d.c.in_transaction(1000, 0, Q) and not d.c.in_transaction(1000, 1, Q)
    end = d.c.end_txn(TID, 1000, 0, True, 9)
    assert end.persist is not None and end.persist.state is S.PREPARE_COMMIT and end.complete_after
    d.do(end)
    assert d.meta.state is S.COMPLETE_COMMIT and not d.meta.partitions
    assert d.c.end_txn(TID, 1000, 0, True, 10) == Decision()  # retried EndTxn
    assert d.c.end_txn(TID, 1000, 0, False, 10).error == E.invalid_txn_state


def test_end_without_transaction_is_invalid() -> None:
    d = Driver()
    d.init()
    assert d.c.end_txn(TID, 1000, 0, True, 0).error == E.invalid_txn_state


def test_zombie_is_fenced_by_reinit() -> None:
    d = Driver()
    d.init()
    d.do(d.c.add_partitions(TID, 1000, 0, {P}, 0))
    second = d.init(now=1)  # same id, new producer instance: aborts the open txn first
    assert second.error == E.concurrent_transactions
    assert d.meta.state is S.COMPLETE_ABORT and d.meta.producer_epoch == 1
    assert d.init(now=2).error == E.none and d.meta.producer_epoch == 2
    assert d.c.add_partitions(TID, 1000, 0, {P}, 3).error == E.producer_fenced
    assert d.c.end_txn(TID, 1000, 1, True, 3).error == E.producer_fenced
    assert d.c.add_partitions(TID, 999, 2, {P}, 3).error == E.invalid_producer_id_mapping


def test_kip360_init_with_expected_epoch() -> None:
    d = Driver()
    d.init()
    assert d.init(pid=1000, epoch=0).error == E.none and d.meta.producer_epoch == 1
    assert d.init(pid=1000, epoch=0).error == E.producer_fenced


def test_prepare_state_answers_concurrent_transactions() -> None:
    d = Driver()
    d.init()
    d.do(d.c.add_partitions(TID, 1000, 0, {P}, 0))
    prepare = d.c.end_txn(TID, 1000, 0, False, 1)
    assert prepare.persist is not None
    d.c.apply(prepare.persist)  # durable, markers not yet written
    assert d.c.add_partitions(TID, 1000, 0, {Q}, 2).error == E.concurrent_transactions
    assert d.c.end_txn(TID, 1000, 0, False, 2).error == E.concurrent_transactions
    assert d.c.end_txn(TID, 1000, 0, True, 2).error == E.invalid_txn_state
    assert d.c.init_producer_id(TID, 1000, -1, -1, 2, lambda: 1).error == (
        E.concurrent_transactions)
    assert [m.transactional_id for m in d.c.preparing()] == [TID]


def test_timeout_aborts_with_epoch_bump() -> None:
    d = Driver()
    d.init(timeout=1_000)
    d.do(d.c.add_partitions(TID, 1000, 0, {P}, 100))
    assert d.c.timed_out(1_100) == []
    (abort,) = d.c.timed_out(1_101)
    assert abort.persist is not None and abort.persist.state is S.PREPARE_ABORT
    assert abort.persist.producer_epoch == 1
    d.do(abort)
    assert d.meta.state is S.COMPLETE_ABORT


def test_epoch_exhaustion_allocates_new_producer_id() -> None:
    d = Driver()
    d.init()
    d.c.apply(TxnMeta(TID, 1000, 32766, 10_000, S.EMPTY))
    d.init()
    assert (d.meta.producer_id, d.meta.producer_epoch) == (1001, 0)
    assert d.c.by_producer[1001] == TID and 1000 not in d.c.by_producer


def test_metadata_json_round_trip() -> None:
    meta = TxnMeta(TID, 7, 3, 5000, S.ONGOING, frozenset({P, Q}), 10, 20)
    assert TxnMeta.from_json(TID, meta.to_json()) == meta
