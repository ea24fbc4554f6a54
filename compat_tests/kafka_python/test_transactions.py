"""kafka-python 3.x transactions against a real kcompat broker: an exactly-once
consume-transform-produce copy of 100,000 records across a kill -9 of the broker with
aborts on purpose, zombie fencing, the broker aborting a hung transaction after
transaction_timeout_ms, and the transaction admin APIs (list/describe).

Tests on ``tbroker`` also run in a 3-broker cluster at replication factor 3
(conftest.py, ``TXN_KINDS``), where the copy runs without the broker kill
(test_exactly_once_copy_in_cluster).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import kafka.errors as Errors
import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from .._broker import Broker, unique_topic
from .._deployment import RF3_ONLY, Deployment
from .._eos import EOS_CLUSTER_RECORDS, TXN_BROKER_ARGS, OutRec, list_offsets, run_exactly_once
from .._groups import create_topic
from .._kafka_python_txn import keep_requests_across_a_dead_coordinator

pytestmark = pytest.mark.timeout(240)

CLIENT = "kafka-python"
FENCED = (Errors.ProducerFencedError, Errors.InvalidProducerEpochError)



def txn_producer(bootstrap: str, txn_id: str, **extra: Any) -> KafkaProducer:
    cfg: dict[str, Any] = {"bootstrap_servers": bootstrap, "transactional_id": txn_id,
                           "linger_ms": 5, "request_timeout_ms": 30_000, "max_block_ms": 30_000}
    cfg.update(extra)
    return KafkaProducer(**cfg)


def read_kafka_python(bootstrap: str, topic: str, partitions: int, committed: bool,
                      ends: dict[int, int], timeout: float = 60.0) -> dict[int, list[OutRec]]:
    """Every record up to ``ends`` with a KafkaConsumer of the given isolation level;
    done when each partition's position (which moves past transaction markers) is at
    its end."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      isolation_level="read_committed" if committed else "read_uncommitted",
                      fetch_max_wait_ms=100, max_poll_records=5000,
                      request_timeout_ms=30_000)
    tps = {p: TopicPartition(topic, p) for p in range(partitions)}
    out: dict[int, list[OutRec]] = {p: [] for p in range(partitions)}
    try:
        c.assign(list(tps.values()))
        c.seek_to_beginning()
        deadline = time.monotonic() + timeout
        while True:
            pos = {p: c.position(tp) for p, tp in tps.items()}
            if all(pos[p] >= ends[p] for p in tps):
                return out
            assert time.monotonic() < deadline, (
                f"{CLIENT} {'read_committed' if committed else 'read_uncommitted'} reader: "
                f"timed out at positions {pos}, ends {ends}, "
                f"records {[len(v) for v in out.values()]}")
            for tp, recs in c.poll(timeout_ms=300).items():
                out[tp.partition].extend(
                    OutRec(tp.partition, r.offset, r.key, r.value) for r in recs)
    finally:
        c.close()


def read_values(bootstrap: str, topic: str, committed: bool) -> list[bytes]:
    ends = list_offsets(bootstrap, topic, 1, committed)
    return [r.value for r in read_kafka_python(bootstrap, topic, 1, committed, ends, 30.0)[0]]


def fencing_error(exc: BaseException) -> BaseException | None:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, FENCED):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def zombie_fenced(producer: KafkaProducer, exc: BaseException) -> bool:
    """The error is a fencing error, or kafka-python's "Cannot execute transactional
    method because we are in an error state: ..." whose recorded fatal error is one."""
    if fencing_error(exc) is not None:
        return True
    tm = producer._transaction_manager
    last = tm.last_error if tm is not None and tm.has_fatal_error() else None
    return last is not None and fencing_error(last) is not None


def test_exactly_once_copy_across_broker_kill(tmp_path: Path) -> None:
    b = Broker(tmp_path / "broker", extra_args=TXN_BROKER_ARGS)
    b.start()
    try:
        try:
            timings = run_exactly_once("kafka-python", Deployment.single(b), tmp_path,
                                       read_kafka_python)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- broker tail ---\n{b.tail(40)}") from None
        print(f"\n{CLIENT} exactly-once timings: "
              + ", ".join(f"{k}={v:.1f}" for k, v in timings.items()))
    finally:
        b.close()


@pytest.fixture
def lone_broker(tmp_path: Path) -> Iterator[Broker]:
    """A broker of the test's own (fresh, or to be killed), as the copier's."""
    b = Broker(tmp_path / "broker", extra_args=TXN_BROKER_ARGS)
    b.start()
    try:
        yield b
    finally:
        b.close()


@contextmanager
def _in_transaction(b: Broker, topic: str, value: bytes,
                    keep_requests: bool = False) -> Iterator[KafkaProducer]:
    """A transactional producer with ``value`` sent to ``topic``'s partition 0 in
    an open transaction (``keep_requests``: with the copier's workaround of
    compat_tests/_kafka_python_txn.py); closed at the end."""
    p = txn_producer(b.bootstrap, f"{topic}-txn")
    if keep_requests:
        keep_requests_across_a_dead_coordinator(p)
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, value=value, partition=0)
        yield p
    finally:
        p.close(timeout=5)


def test_send_offsets_for_a_group_never_looked_up(lone_broker: Broker) -> None:
    """A fresh broker, and a producer sending offsets for a group no client has
    looked up: no ``__consumer_offsets`` yet. AddOffsetsToTxn answered
    COORDINATOR_NOT_AVAILABLE for it, kafka-python then looks up the transaction
    coordinator (which creates nothing) and retries, and send_offsets_to_transaction
    never returned. Kafka adds the group's partition regardless; the TxnOffsetCommit
    that follows looks the group up, which creates the topic."""
    b = lone_broker
    topic = unique_topic("fresh-kp")
    group = f"never-{uuid.uuid4().hex[:8]}"
    create_topic(b.bootstrap, topic, 1)
    with _in_transaction(b, topic, b"x") as p:
        _send_offsets(p, topic, group)("for a group never looked up", b)
        p.commit_transaction()
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        assert c.committed(TopicPartition(topic, 0)) == 1
    finally:
        c.close()


def test_a_request_taken_while_the_coordinator_is_down_is_sent_once_it_is_back(
        lone_broker: Broker) -> None:
    """kafka-python 3.0.12 drops a transactional request that its sender takes off
    the queue while the coordinator cannot be reached, and the call waits forever
    (compat_tests/_kafka_python_txn.py: the copy across a broker kill hung in
    send_offsets_to_transaction about once in sixty runs). Here the broker is
    killed between two transactional requests on purpose: with the copier's
    workaround, send_offsets_to_transaction returns once the broker is back, and the
    transaction commits the record and the offset."""
    b = lone_broker
    topic = unique_topic("coord-down-kp")
    group = f"coord-down-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition(topic, 0)
    create_topic(b.bootstrap, topic, 1)
    looked_up = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id=group,
                              enable_auto_commit=False)
    try:  # the group's coordinator found first, as the copier's OffsetFetch does
        assert looked_up.committed(tp) is None
    finally:
        looked_up.close()
    with _in_transaction(b, topic, b"kept", keep_requests=True) as p:
        p.flush()
        b.kill()
        returned = _send_offsets(p, topic, group)
        time.sleep(2.0)  # the sender takes AddOffsetsToTxn while nothing listens
        b.restart()
        returned("with the coordinator down", b)
        p.commit_transaction()
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id=group,
                      enable_auto_commit=False, isolation_level="read_committed")
    try:
        assert c.committed(tp) == 1
        c.assign([tp])
        c.seek(tp, 0)
        end = c.end_offsets([tp])[tp]  # the record and the commit marker
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while c.position(tp) < end and time.monotonic() < deadline:
            got += [r.value for r in c.poll(timeout_ms=1000).get(tp, [])]
        assert got == [b"kept"] and end == 2, (got, end)
    finally:
        c.close()


def _send_offsets(p: KafkaProducer, topic: str, group: str) -> Callable[[str, Broker], None]:
    """``send_offsets_to_transaction`` (offset 1 of ``topic``'s partition 0 for
    ``group``) in a thread; the function returned checks that it returned."""
    done: list[BaseException | None] = []
    sender = threading.Thread(target=lambda: done.append(_call(
        lambda: p.send_offsets_to_transaction(
            {TopicPartition(topic, 0): OffsetAndMetadata(1, "", -1)}, group))), daemon=True)
    sender.start()

    def returned(case: str, b: Broker) -> None:
        sender.join(60)  # a bound for a call that never returned, not a timing check
        assert done == [None], (f"{CLIENT}: send_offsets_to_transaction {case}: "
                                f"{done or 'still waiting'}\n{b.tail(20)}")
    return returned


def _call(fn: Any) -> BaseException | None:
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - reported by the test
        return exc
    return None


@pytest.mark.parametrize("tbroker", RF3_ONLY, indirect=True)
def test_exactly_once_copy_in_cluster(tbroker: Deployment, tmp_path: Path) -> None:
    """The copy without a broker kill in the 3-broker cluster at RF 3 (the single node has
    test_exactly_once_copy_across_broker_kill): its topics' leaders, the group
    coordinator and the transaction coordinator on different brokers."""
    timings = run_exactly_once("kafka-python", tbroker, tmp_path, read_kafka_python,
                               total=EOS_CLUSTER_RECORDS, kill=False)
    print(f"\n{CLIENT} exactly-once timings ({tbroker.kind}): "
          + ", ".join(f"{k}={v:.1f}" for k, v in timings.items()))


def test_zombie_producer_is_fenced(tbroker: Deployment) -> None:
    topic = unique_topic("fence-kp")
    create_topic(tbroker.bootstrap, topic, 1, tbroker.replication)
    txn_id = f"fence-{uuid.uuid4().hex[:8]}"

    zombie = txn_producer(tbroker.bootstrap, txn_id)
    fresh = None
    try:
        zombie.init_transactions()
        zombie.begin_transaction()
        for i in range(5):
            zombie.send(topic, value=f"zombie-{i}".encode(), partition=0)
        zombie.flush(timeout=30)

        fresh = txn_producer(tbroker.bootstrap, txn_id)
        fresh.init_transactions()  # bumps the epoch: fences the zombie, aborts its txn
        fresh.begin_transaction()
        for i in range(5):
            fresh.send(topic, value=f"fresh-{i}".encode(), partition=0)
        fresh.commit_transaction()

        # The zombie goes on as if nothing happened.
        late_error: BaseException | None = None
        try:
            fut = zombie.send(topic, value=b"zombie-late", partition=0)
            zombie.flush(timeout=30)
            fut.get(timeout=30)
        except Exception as exc:
            late_error = exc
        assert late_error is not None, f"{CLIENT}: the zombie's late record was acknowledged"
        # kafka-python 3.0.12 answers INVALID_PRODUCER_EPOCH on a produce with a KIP-360
        # epoch bump of its own (InitProducerId with its stale pid/epoch, which a correct
        # coordinator refuses with PRODUCER_FENCED). A commit issued while that bump is
        # in flight fails with a plain KafkaError ("Invalid transition ... from
        # BUMPING_PRODUCER_EPOCH"); the fencing error follows once the bump is refused.
        attempts: list[BaseException] = []
        deadline = time.monotonic() + 15.0
        while True:
            try:
                zombie.commit_transaction()
            except Exception as exc:
                attempts.append(exc)
                if zombie_fenced(zombie, exc) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
                continue
            raise AssertionError(f"{CLIENT}: the fenced zombie committed its transaction "
                                 f"(earlier attempts: {attempts})")
        print(f"\n{CLIENT}: zombie late send: {late_error!r}; commit attempts: {attempts}")
        assert zombie_fenced(zombie, attempts[-1]), (
            f"{CLIENT}: zombie commit keeps failing with {attempts[-3:]}, expected "
            f"ProducerFencedError/InvalidProducerEpochError")
    finally:
        zombie.close(timeout=5)
        if fresh is not None:
            fresh.close(timeout=5)

    committed = read_values(tbroker.bootstrap, topic, committed=True)
    assert committed == [f"fresh-{i}".encode() for i in range(5)], (
        f"{CLIENT}: read_committed sees {committed}")
    uncommitted = read_values(tbroker.bootstrap, topic, committed=False)
    assert [v for v in uncommitted if v.startswith(b"zombie-")] == [
        f"zombie-{i}".encode() for i in range(5)], (
        f"{CLIENT}: read_uncommitted sees {uncommitted} (the zombie's flushed records were "
        f"written and must stay aborted; its late one must have been rejected)")


@pytest.mark.parametrize("tbroker", RF3_ONLY, indirect=True)  # confluent: single
def test_hung_transaction_is_aborted_by_timeout(tbroker: Deployment) -> None:
    topic = unique_topic("hung-kp")
    create_topic(tbroker.bootstrap, topic, 1, tbroker.replication)

    hung = txn_producer(tbroker.bootstrap, f"hung-{uuid.uuid4().hex[:8]}",
                        transaction_timeout_ms=8000)  # room for a loaded machine
    other = txn_producer(tbroker.bootstrap, f"other-{uuid.uuid4().hex[:8]}")
    try:
        hung.init_transactions()
        hung.begin_transaction()
        for i in range(10):
            hung.send(topic, value=f"hung-{i}".encode(), partition=0)
        hung.flush(timeout=30)
        t_hung = time.monotonic()

        other.init_transactions()
        other.begin_transaction()
        for i in range(10):
            other.send(topic, value=f"after-{i}".encode(), partition=0)
        other.commit_transaction()

        tp = TopicPartition(topic, 0)
        c = KafkaConsumer(bootstrap_servers=tbroker.bootstrap, group_id=None,
                          isolation_level="read_committed", enable_auto_commit=False,
                          fetch_max_wait_ms=100)
        try:
            hw = list_offsets(tbroker.bootstrap, topic, 1, committed=False)[0]
            lso = c.end_offsets([tp])[tp]  # ListOffsets latest, read_committed
            assert hw >= 21 and lso == 0, (
                f"{CLIENT}: while the hung transaction is open, expected LSO 0 and high "
                f"watermark >= 21 (10 hung + 10 committed + marker), got LSO {lso}, HW {hw}")
            c.assign([tp])
            c.seek_to_beginning(tp)
            got: list[bytes] = []
            deadline = time.monotonic() + 20.0
            while len(got) < 10 and time.monotonic() < deadline:
                for recs in c.poll(timeout_ms=200).values():
                    got.extend(r.value for r in recs)
            waited = time.monotonic() - t_hung
            assert got == [f"after-{i}".encode() for i in range(10)], (
                f"{CLIENT}: read_committed consumer got {got} within {waited:.1f}s of the hung "
                f"transaction (timeout 8 s, broker check every 0.5 s); LSO now "
                f"{c.end_offsets([tp])[tp]}")
            deadline = time.monotonic() + 10.0
            while True:
                hw = list_offsets(tbroker.bootstrap, topic, 1, committed=False)[0]
                lso = c.end_offsets([tp])[tp]
                if lso == hw or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert lso == hw, f"{CLIENT}: LSO {lso} never reached the high watermark {hw}"
        finally:
            c.close()

        with pytest.raises(Exception) as ei:
            hung.commit_transaction()
        print(f"\n{CLIENT}: hung txn visible-after {waited:.1f}s; late commit failed with "
              f"{ei.value!r}")
    finally:
        hung.close(timeout=5)
        other.close(timeout=5)

    committed = read_values(tbroker.bootstrap, topic, committed=True)
    assert committed == [f"after-{i}".encode() for i in range(10)], (
        f"{CLIENT}: read_committed sees {committed} after the timed-out transaction")
    uncommitted = read_values(tbroker.bootstrap, topic, committed=False)
    assert [v for v in uncommitted if v.startswith(b"hung-")] == [
        f"hung-{i}".encode() for i in range(10)], f"{CLIENT}: read_uncommitted {uncommitted}"


def test_list_and_describe_transactions(tbroker: Deployment) -> None:
    topic = unique_topic("txadmin-kp")
    create_topic(tbroker.bootstrap, topic, 2, tbroker.replication)
    txn_id = f"admin-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=tbroker.bootstrap, request_timeout_ms=30_000)
    p = txn_producer(tbroker.bootstrap, txn_id, transaction_timeout_ms=45_000)
    try:
        p.init_transactions()
        p.begin_transaction()
        t_begin_ms = time.time() * 1000
        p.send(topic, value=b"x", partition=1).get(timeout=30)

        listed = [t for rows in admin.list_transactions().values() for t in rows
                  if t.transactional_id == txn_id]
        assert len(listed) == 1 and listed[0].state.value == "Ongoing", (
            f"{CLIENT}: list_transactions for {txn_id}: {listed}")
        desc = admin.describe_transactions([txn_id])[txn_id]
        assert desc.state.value == "Ongoing", f"{CLIENT}: describe: {desc}"
        assert desc.producer_id == listed[0].producer_id and desc.producer_id >= 0, desc
        assert desc.transaction_timeout_ms == 45_000, desc
        assert desc.topic_partitions == {TopicPartition(topic, 1)}, desc
        assert abs(desc.transaction_start_time_ms - t_begin_ms) < 10_000, (
            f"{CLIENT}: transaction_start_time_ms {desc.transaction_start_time_ms} vs "
            f"begin at {t_begin_ms:.0f}")
        ongoing = [t for rows in admin.list_transactions(state_filters=["Ongoing"]).values()
                   for t in rows]
        assert txn_id in {t.transactional_id for t in ongoing}, ongoing
        producers = admin.describe_producers([TopicPartition(topic, 1)])
        active = producers[TopicPartition(topic, 1)].active_producers
        assert [a.producer_id for a in active] == [desc.producer_id] and \
            active[0].current_transaction_start_offset == 0, (
                f"{CLIENT}: describe_producers {producers}")

        p.commit_transaction()
        after = admin.describe_transactions([txn_id])[txn_id]
        assert after.state.value == "CompleteCommit" and not after.topic_partitions, (
            f"{CLIENT}: after commit: {after}")
        done = [t for rows in admin.list_transactions(state_filters=["Ongoing"]).values()
                for t in rows]
        assert txn_id not in {t.transactional_id for t in done}, done
        with pytest.raises(Errors.TransactionalIdNotFoundError):
            admin.describe_transactions([f"nope-{uuid.uuid4().hex[:8]}"])
    finally:
        p.close(timeout=5)
        admin.close()
