"""Transaction handlers in-process at every advertised version, plus the data
path they drive: transactional produce, markers, LSO, read_committed fetch,
transactional offsets and recovery of a transaction left preparing."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from kio.schema.errors import ErrorCode as E
from kio.serial import entity_reader

from kcompat.broker.config import broker_config
from kcompat.broker.controller import admin
from kcompat.broker.controller.internal_topics import OFFSETS_TOPIC, TXN_TOPIC, partition_for
from kcompat.broker.handlers import HANDLERS
from kcompat.broker.host.broker import Broker
from kcompat.broker.host.context import RequestContext
from kcompat.testing import running
from kcompat.txn.coordinator import TxnState
from kcompat.wire import codec
from kcompat.wire import versions as v
from kcompat.wire.records import encode_batch


def make_state(path: Path) -> Broker:
    cfg = broker_config.load(None, {"log.dirs": str(path), "offsets.topic.num.partitions": "2",
                                    "transaction.state.log.num.partitions": "2",
                                    "transaction.abort.timed.out.transaction.cleanup.interval.ms":
                                        "100"}, {})
    b = Broker(cfg)
    return b


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = make_state(tmp_path)
    running.run(b, lambda: running.create_topic(b, "t", 2))
    yield b
    b.close()


async def call(broker: Broker, key: int, version: int, **fields: Any) -> Any:
    request = codec.build(codec.request_class(key, version), **fields)
    ctx = RequestContext(broker, key, version, 1, "cli", "/127.0.0.1")
    response = await HANDLERS[key](ctx, request)
    raw = codec.encode_response(key, version, 1, response)
    decoded, _ = entity_reader(type(response))(raw, 9 if codec.is_flexible(key, version) else 8)
    assert decoded == response
    return response


def top(key: int) -> int:
    return v.API_RANGES[key].max_version


async def produce_txn(broker: Broker, pid: int, epoch: int, seq: int, partition: int) -> Any:
    m = codec.request_module(v.PRODUCE, 9)
    records = encode_batch([(None, b"x%d" % seq, (), 1000)], producer_id=pid,
                           producer_epoch=epoch, base_sequence=seq, transactional=True)
    r = await call(broker, v.PRODUCE, 9, transactional_id="app", acks=-1,
                   timeout=datetime.timedelta(seconds=5), topic_data=(m.TopicProduceData(
                       name="t", partition_data=(m.PartitionProduceData(
                           index=partition, records=records),)),))
    return r.responses[0].partition_responses[0]


async def fetch_committed(broker: Broker, partition: int) -> Any:
    m = codec.request_module(v.FETCH, 12)
    r = await call(broker, v.FETCH, 12, max_wait=datetime.timedelta(0), min_bytes=1,
                   max_bytes=1 << 20, isolation_level=1, session_id=0, session_epoch=-1,
                   topics=(m.FetchTopic(topic="t", partitions=(m.FetchPartition(
                       partition=partition, fetch_offset=0, partition_max_bytes=1 << 20),)),),
                   forgotten_topics_data=(), rack_id="")
    return r.responses[0].partitions[0]


@pytest.mark.parametrize("version", range(0, top(v.END_TXN) + 1))
def test_transaction_cycle(broker: Broker, version: int) -> None:
    pv = min(version, top(v.ADD_PARTITIONS_TO_TXN))

    async def scenario() -> None:
        async with trio.open_nursery() as nursery:
            await running.start(nursery, broker)
            init = await call(broker, v.INIT_PRODUCER_ID, 4, transactional_id="app",
                              transaction_timeout=datetime.timedelta(seconds=30),
                              producer_id=-1, producer_epoch=-1)
            pid, epoch = init.producer_id, init.producer_epoch
            assert init.error_code == E.none and pid >= 0
            refused = await produce_txn(broker, pid, epoch, 0, 0)
            assert refused.error_code == E.invalid_txn_state  # partition not added yet
            m = codec.request_module(v.ADD_PARTITIONS_TO_TXN, pv)
            add = await call(broker, v.ADD_PARTITIONS_TO_TXN, pv,
                             v3_and_below_transactional_id="app", v3_and_below_producer_id=pid,
                             v3_and_below_producer_epoch=epoch, v3_and_below_topics=(
                                 m.AddPartitionsToTxnTopic(name="t", partitions=(0, 1)),))
            assert add.results_by_topic_v3_and_below[0].results_by_partition[0]\
                .partition_error_code == E.none
            assert (await produce_txn(broker, pid, epoch, 0, 0)).error_code == E.none
            part = broker.state.partition("t", 0)
            assert part is not None and part.last_stable_offset == 0 < part.high_watermark
            assert (await fetch_committed(broker, 0)).records == b""
            commit = version % 2 == 0
            end = await call(broker, v.END_TXN, version, transactional_id="app", producer_id=pid,
                             producer_epoch=epoch, committed=commit)
            assert end.error_code == E.none
            assert part.last_stable_offset == part.high_watermark == 2  # record + marker
            fetched = await fetch_committed(broker, 0)
            assert len(fetched.records) > 0
            aborted = [(a.producer_id, a.first_offset) for a in fetched.aborted_transactions]
            assert aborted == ([] if commit else [(pid, 0)])
            nursery.cancel_scope.cancel()

    trio.run(scenario)


def test_txn_offsets_visible_only_after_commit_and_recovery(tmp_path: Path) -> None:
    broker = make_state(tmp_path)
    running.run(broker, lambda: running.create_topic(broker, "t", 1))

    async def scenario() -> tuple[int, int]:
        async with trio.open_nursery() as nursery:
            await running.start(nursery, broker)
            init = await call(broker, v.INIT_PRODUCER_ID, 4, transactional_id="app",
                              transaction_timeout=datetime.timedelta(seconds=30),
                              producer_id=-1, producer_epoch=-1)
            pid, epoch = init.producer_id, init.producer_epoch
            r = await call(broker, v.ADD_OFFSETS_TO_TXN, 3, transactional_id="app",
                           producer_id=pid, producer_epoch=epoch, group_id="grp")
            assert r.error_code == E.none
            m = codec.request_module(v.TXN_OFFSET_COMMIT, 3)
            c = await call(broker, v.TXN_OFFSET_COMMIT, 3, transactional_id="app", group_id="grp",
                           producer_id=pid, producer_epoch=epoch, generation_id=-1, member_id="",
                           group_instance_id=None, topics=(m.TxnOffsetCommitRequestTopic(
                               name="t", partitions=(codec.build(
                                   m.TxnOffsetCommitRequestPartition, partition_index=0,
                                   committed_offset=42, committed_leader_epoch=-1,
                                   committed_metadata=""),)),))
            assert c.topics[0].partitions[0].error_code == E.none
            assert broker.groups is not None and broker.groups.store.committed("grp") == {}
            assert broker.groups.is_pending("grp", "t", 0)
            txns = broker.txns
            assert txns is not None
            prepare = txns.coordinator.end_txn("app", pid, epoch, True, 0)
            assert prepare.persist is not None
            await txns.persist(prepare.persist)  # crash before the markers are written
            nursery.cancel_scope.cancel()
        return pid, epoch

    trio.run(scenario)
    broker.close()
    again = make_state(tmp_path)
    assert again.txns is not None and again.groups is not None

    async def resume() -> None:
        assert again.txns is not None and again.groups is not None
        async with trio.open_nursery() as nursery:
            await running.start(nursery, again)
            # the new leader loaded its partitions as it took over
            preparing = again.txns.coordinator.preparing()
            assert [m.state for m in preparing] == [TxnState.PREPARE_COMMIT]
            assert again.groups.is_pending("grp", "t", 0)
            with trio.move_on_after(0.5):
                await again.txns.run()  # completes the preparing transaction, then idles
            nursery.cancel_scope.cancel()

    trio.run(resume)
    assert again.txns.coordinator.txns["app"].state is TxnState.COMPLETE_COMMIT
    assert again.groups.store.committed("grp")[("t", 0)].offset == 42
    again.close()


def test_add_offsets_before_the_offsets_topic_exists(tmp_path: Path) -> None:
    """A producer whose group nobody looked up yet: AddOffsetsToTxn adds the
    group's partition of the offsets topic by its configured count, as Kafka
    does (it answered COORDINATOR_NOT_AVAILABLE, and kafka-python then looks up
    the transaction coordinator and retries forever: send_offsets_to_transaction
    never returned). The TxnOffsetCommit after the group's FindCoordinator
    (which creates the topic) and the commit marker land in that partition."""
    broker = make_state(tmp_path)

    async def scenario() -> None:
        async with trio.open_nursery() as nursery:
            await running.start(nursery, broker, internal_topics=False)
            await running.create_topic(broker, "t", 1)
            await admin.execute(broker.controller, {"op": "auto_create", "name": TXN_TOPIC})
            init = await call(broker, v.INIT_PRODUCER_ID, 4, transactional_id="app",
                              transaction_timeout=datetime.timedelta(seconds=30),
                              producer_id=-1, producer_epoch=-1)
            pid, epoch = init.producer_id, init.producer_epoch
            assert init.error_code == E.none and OFFSETS_TOPIC not in broker.state.topics
            r = await call(broker, v.ADD_OFFSETS_TO_TXN, 3, transactional_id="app",
                           producer_id=pid, producer_epoch=epoch, group_id="grp")
            assert r.error_code == E.none
            assert broker.txns is not None and broker.groups is not None
            added = broker.txns.coordinator.txns["app"].partitions
            assert added == {(OFFSETS_TOPIC, partition_for("grp", 2))}
            f = await call(broker, v.FIND_COORDINATOR, 4, key_type=0, coordinator_keys=("grp",))
            assert f.coordinators[0].error_code in (E.none, E.coordinator_not_available)
            assert OFFSETS_TOPIC in broker.state.topics  # created by the group's lookup
            with trio.fail_after(10):
                while broker.groups.coordinator_error("grp") is not None:
                    await trio.sleep(0.01)
            m = codec.request_module(v.TXN_OFFSET_COMMIT, 3)
            c = await call(broker, v.TXN_OFFSET_COMMIT, 3, transactional_id="app", group_id="grp",
                           producer_id=pid, producer_epoch=epoch, generation_id=-1, member_id="",
                           group_instance_id=None, topics=(m.TxnOffsetCommitRequestTopic(
                               name="t", partitions=(codec.build(
                                   m.TxnOffsetCommitRequestPartition, partition_index=0,
                                   committed_offset=42, committed_leader_epoch=-1,
                                   committed_metadata=""),)),))
            assert c.topics[0].partitions[0].error_code == E.none
            end = await call(broker, v.END_TXN, 3, transactional_id="app", producer_id=pid,
                             producer_epoch=epoch, committed=True)
            assert end.error_code == E.none
            assert broker.groups.store.committed("grp")[("t", 0)].offset == 42
            nursery.cancel_scope.cancel()

    trio.run(scenario)
    broker.close()


def test_describe_and_list_transactions(broker: Broker) -> None:
    async def scenario() -> None:
        async with trio.open_nursery() as nursery:
            await running.start(nursery, broker)
            await call(broker, v.INIT_PRODUCER_ID, 4, transactional_id="app",
                       transaction_timeout=datetime.timedelta(seconds=30),
                       producer_id=-1, producer_epoch=-1)
            d = await call(broker, v.DESCRIBE_TRANSACTIONS, 0, transactional_ids=("app", "nope"))
            assert [s.error_code for s in d.transaction_states] == [
                E.none, E.transactional_id_not_found]
            assert d.transaction_states[0].transaction_state == "Empty"
            for version in (0, 1):
                lst = await call(broker, v.LIST_TRANSACTIONS, version,
                                 state_filters=("Empty", "Bogus"), producer_id_filters=())
                assert [t.transactional_id for t in lst.transaction_states] == ["app"]
                assert lst.unknown_state_filters == ("Bogus",)
            m = codec.request_module(v.DESCRIBE_PRODUCERS, 0)
            dp = await call(broker, v.DESCRIBE_PRODUCERS, 0, topics=(
                m.TopicRequest(name="t", partition_indexes=(0, 7)),))
            assert [p.error_code for p in dp.topics[0].partitions] == [
                E.none, E.unknown_topic_or_partition]
            nursery.cancel_scope.cancel()

    trio.run(scenario)


def test_partitions_hosted_elsewhere_join_a_transaction(broker: Broker) -> None:
    """AddPartitionsToTxn and TxnOffsetCommit check the metadata image, not the
    local replicas: partition 1 of "t", taken out of the local replicas as if
    another broker hosted it, is added and its offset committed; partition 2,
    which the image lacks, is refused."""
    elsewhere = broker.state.partitions.pop(("t", 1))

    async def scenario() -> None:
        async with trio.open_nursery() as nursery:
            await running.start(nursery, broker)
            init = await call(broker, v.INIT_PRODUCER_ID, 4, transactional_id="app",
                              transaction_timeout=datetime.timedelta(seconds=30),
                              producer_id=-1, producer_epoch=-1)
            pid, epoch = init.producer_id, init.producer_epoch
            pv = top(v.ADD_PARTITIONS_TO_TXN)
            m = codec.request_module(v.ADD_PARTITIONS_TO_TXN, pv)

            async def add(*partitions: int) -> list[E]:
                r = await call(broker, v.ADD_PARTITIONS_TO_TXN, pv,
                               v3_and_below_transactional_id="app", v3_and_below_producer_id=pid,
                               v3_and_below_producer_epoch=epoch, v3_and_below_topics=(
                                   m.AddPartitionsToTxnTopic(name="t", partitions=partitions),))
                return [p.partition_error_code
                        for p in r.results_by_topic_v3_and_below[0].results_by_partition]

            assert await add(1, 2) == [E.operation_not_attempted, E.unknown_topic_or_partition]
            assert await add(0, 1) == [E.none, E.none]
            r = await call(broker, v.ADD_OFFSETS_TO_TXN, 3, transactional_id="app",
                           producer_id=pid, producer_epoch=epoch, group_id="grp")
            assert r.error_code == E.none
            cv = top(v.TXN_OFFSET_COMMIT)
            t = codec.request_module(v.TXN_OFFSET_COMMIT, cv)
            c = await call(broker, v.TXN_OFFSET_COMMIT, cv, transactional_id="app",
                           group_id="grp", producer_id=pid, producer_epoch=epoch,
                           generation_id=-1, member_id="", group_instance_id=None,
                           topics=(t.TxnOffsetCommitRequestTopic(name="t", partitions=tuple(
                               codec.build(t.TxnOffsetCommitRequestPartition, partition_index=i,
                                           committed_offset=7, committed_leader_epoch=-1,
                                           committed_metadata="") for i in (0, 1, 2))),))
            assert [p.error_code for p in c.topics[0].partitions] == [
                E.none, E.none, E.unknown_topic_or_partition]
            assert broker.groups is not None and broker.groups.is_pending("grp", "t", 1)
            nursery.cancel_scope.cancel()

    try:
        trio.run(scenario)
    finally:
        broker.state.partitions[("t", 1)] = elsewhere


def elsewhere(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker's group coordinator sees the transaction's coordinator as
    another broker's, which the verifier asks (KIP-890) and which answers as
    this broker's coordinator does."""
    txns = broker.txns
    assert txns is not None
    real = txns.coordinator_error

    async def remote(tid: str, pid: int, epoch: int, partition: tuple[str, int]) -> E:
        with monkeypatch.context() as m:
            m.setattr(txns, "coordinator_error", real)
            return txns.verify(tid, pid, epoch, partition)

    monkeypatch.setattr(txns, "coordinator_error", lambda tid: E.not_coordinator)
    monkeypatch.setattr(txns.verifier, "in_transaction", remote)


def test_txn_offset_commit_elsewhere_needs_the_offsets_partition_in_the_transaction(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    """A group coordinator that does not coordinate the transaction asks the
    one that does whether AddOffsetsToTxn added the group's offsets partition:
    INVALID_TXN_STATE without it, as Kafka verifies (kcompat took the offsets)."""
    async def scenario() -> list[E]:
        async with trio.open_nursery() as nursery:
            await running.start(nursery, broker)
            init = await call(broker, v.INIT_PRODUCER_ID, 4, transactional_id="app",
                              transaction_timeout=datetime.timedelta(seconds=30),
                              producer_id=-1, producer_epoch=-1)
            pid, epoch = init.producer_id, init.producer_epoch
            t = codec.request_module(v.TXN_OFFSET_COMMIT, 3)
            seen = []
            for _ in range(2):
                elsewhere(broker, monkeypatch)
                c = await call(broker, v.TXN_OFFSET_COMMIT, 3, transactional_id="app",
                               group_id="grp", producer_id=pid, producer_epoch=epoch,
                               generation_id=-1, member_id="", group_instance_id=None,
                               topics=(t.TxnOffsetCommitRequestTopic(name="t", partitions=(
                                   codec.build(t.TxnOffsetCommitRequestPartition,
                                               partition_index=0, committed_offset=7,
                                               committed_leader_epoch=-1,
                                               committed_metadata=""),)),))
                seen.append(E(c.topics[0].partitions[0].error_code))
                monkeypatch.undo()  # AddOffsetsToTxn at the transaction's coordinator
                r = await call(broker, v.ADD_OFFSETS_TO_TXN, 3, transactional_id="app",
                               producer_id=pid, producer_epoch=epoch, group_id="grp")
                assert r.error_code == E.none
            nursery.cancel_scope.cancel()
        return seen

    assert trio.run(scenario) == [E.invalid_txn_state, E.none]


def test_fenced_txn_offset_commit_is_refused_by_a_group_coordinator_elsewhere(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    """A producer fenced after AddOffsetsToTxn (a newer one with its transactional
    id aborted its transaction, writing the abort marker with a bumped epoch to the
    group's offsets partition) sends TxnOffsetCommit to a group coordinator that
    does not coordinate the transaction (as in a cluster): PRODUCER_FENCED, as
    Kafka's log refuses the stale epoch, and nothing stays pending (a pending
    offset no marker will ever resolve keeps OffsetFetch UNSTABLE_OFFSET_COMMIT)."""
    async def init() -> Any:
        return await call(broker, v.INIT_PRODUCER_ID, 4, transactional_id="app",
                          transaction_timeout=datetime.timedelta(seconds=30),
                          producer_id=-1, producer_epoch=-1)

    async def txn_offset_commit(version: int, pid: int, epoch: int) -> E:
        t = codec.request_module(v.TXN_OFFSET_COMMIT, version)
        c = await call(broker, v.TXN_OFFSET_COMMIT, version, transactional_id="app",
                       group_id="grp", producer_id=pid, producer_epoch=epoch,
                       generation_id=-1, member_id="", group_instance_id=None,
                       topics=(t.TxnOffsetCommitRequestTopic(name="t", partitions=(
                           codec.build(t.TxnOffsetCommitRequestPartition, partition_index=0,
                                       committed_offset=7, committed_leader_epoch=-1,
                                       committed_metadata=""),)),))
        return E(c.topics[0].partitions[0].error_code)

    async def scenario() -> None:
        async with trio.open_nursery() as nursery:
            await running.start(nursery, broker)
            first = await init()
            pid, epoch = first.producer_id, first.producer_epoch
            r = await call(broker, v.ADD_OFFSETS_TO_TXN, 3, transactional_id="app",
                           producer_id=pid, producer_epoch=epoch, group_id="grp")
            assert r.error_code == E.none
            assert (await init()).error_code == E.concurrent_transactions  # fence + abort
            again = await init()
            assert (again.producer_id, again.producer_epoch) == (pid, epoch + 2)
            assert broker.txns is not None and broker.groups is not None
            elsewhere(broker, monkeypatch)
            assert await txn_offset_commit(top(v.TXN_OFFSET_COMMIT), pid, epoch) == \
                E.producer_fenced
            assert await txn_offset_commit(2, pid, epoch) == E.invalid_producer_epoch
            assert not broker.groups.is_pending("grp", "t", 0)
            nursery.cancel_scope.cancel()

    trio.run(scenario)


def test_txn_offset_commit_of_a_missing_partition_is_unknown_before_the_txn_state(
        tmp_path: Path) -> None:
    # Kafka filters partitions its metadata lacks out first: UNKNOWN_TOPIC_OR_PARTITION
    # for them, even with no AddOffsetsToTxn (INVALID_TXN_STATE for the others)
    broker = make_state(tmp_path)
    running.run(broker, lambda: running.create_topic(broker, "t", 1))

    async def scenario() -> list[tuple[str, int, int]]:
        async with trio.open_nursery() as nursery:
            await running.start(nursery, broker)
            init = await call(broker, v.INIT_PRODUCER_ID, 4, transactional_id="app",
                              transaction_timeout=datetime.timedelta(seconds=30),
                              producer_id=-1, producer_epoch=-1)
            m = codec.request_module(v.TXN_OFFSET_COMMIT, 3)
            c = await call(broker, v.TXN_OFFSET_COMMIT, 3, transactional_id="app",
                           group_id="grp", producer_id=init.producer_id,
                           producer_epoch=init.producer_epoch, generation_id=-1, member_id="",
                           group_instance_id=None, topics=tuple(
                               m.TxnOffsetCommitRequestTopic(name=name, partitions=(codec.build(
                                   m.TxnOffsetCommitRequestPartition, partition_index=index,
                                   committed_offset=7, committed_leader_epoch=-1,
                                   committed_metadata=""),))
                               for name, index in (("t", 0), ("t", 1), ("missing", 0))))
            nursery.cancel_scope.cancel()
        return [(t.name, p.partition_index, p.error_code) for t in c.topics
                for p in t.partitions]

    assert trio.run(scenario) == [("t", 0, E.invalid_txn_state),
                                  ("t", 1, E.unknown_topic_or_partition),
                                  ("missing", 0, E.unknown_topic_or_partition)]
    broker.close()


def test_txn_offset_commit_creates_an_unknown_group_empty(broker: Broker) -> None:
    """As Kafka: the group a producer commits offsets for exists from then on
    (Empty, no protocol type), whatever becomes of the transaction."""
    async def scenario() -> None:
        async with trio.open_nursery() as nursery:
            await running.start(nursery, broker)
            init = await call(broker, v.INIT_PRODUCER_ID, 4, transactional_id="app",
                              transaction_timeout=datetime.timedelta(seconds=30),
                              producer_id=-1, producer_epoch=-1)
            pid, epoch = init.producer_id, init.producer_epoch
            r = await call(broker, v.ADD_OFFSETS_TO_TXN, 3, transactional_id="app",
                           producer_id=pid, producer_epoch=epoch, group_id="new")
            assert r.error_code == E.none
            assert broker.groups is not None and "new" not in broker.groups.coordinator.groups
            t = codec.request_module(v.TXN_OFFSET_COMMIT, 3)
            c = await call(broker, v.TXN_OFFSET_COMMIT, 3, transactional_id="app",
                           group_id="new", producer_id=pid, producer_epoch=epoch,
                           generation_id=-1, member_id="", group_instance_id=None,
                           topics=(t.TxnOffsetCommitRequestTopic(name="t", partitions=(
                               codec.build(t.TxnOffsetCommitRequestPartition,
                                           partition_index=0, committed_offset=7,
                                           committed_leader_epoch=-1,
                                           committed_metadata=""),)),))
            assert c.topics[0].partitions[0].error_code == E.none
            group = broker.groups.coordinator.groups.get("new")
            assert group is not None and group.state.value == "Empty"
            nursery.cancel_scope.cancel()

    trio.run(scenario)
