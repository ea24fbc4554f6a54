"""confluent-kafka (librdkafka) transactions against a real kcompat broker: an
exactly-once consume-transform-produce copy of 100,000 records across a kill -9 of
the broker with aborts on purpose, zombie fencing, and the broker aborting a hung
transaction after transaction.timeout.ms.

Tests on ``tbroker`` also run in a 3-broker cluster at replication factor 3
(conftest.py, ``TXN_KINDS``), where the copy runs without the broker kill
(test_exactly_once_copy_in_cluster).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from .._broker import Broker, unique_topic
from .._deployment import RF3_ONLY, SINGLE_ONLY, Deployment
from .._eos import (
    EOS_CLUSTER_RECORDS,
    TXN_BROKER_ARGS,
    OutRec,
    list_offsets,
    read_confluent,
    run_exactly_once,
)
from .._groups import create_topic

pytestmark = pytest.mark.timeout(240)

CLIENT = "confluent-kafka"



def txn_producer(bootstrap: str, txn_id: str, **extra: Any) -> Producer:
    cfg: dict[str, Any] = {"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                           "linger.ms": 5}
    cfg.update(extra)
    return Producer(cfg)


def read_values(bootstrap: str, topic: str, committed: bool, partitions: int = 1
                ) -> list[bytes]:
    ends = list_offsets(bootstrap, topic, partitions, committed)
    recs = read_confluent(bootstrap, topic, partitions, committed, ends, timeout=30.0)
    return [r.value for p in sorted(recs) for r in recs[p]]


def test_exactly_once_copy_across_broker_kill(tmp_path: Path) -> None:
    b = Broker(tmp_path / "broker", extra_args=TXN_BROKER_ARGS)
    b.start()
    try:
        def reader(bootstrap: str, topic: str, partitions: int, committed: bool,
                   ends: dict[int, int]) -> dict[int, list[OutRec]]:
            return read_confluent(bootstrap, topic, partitions, committed, ends)

        try:
            timings = run_exactly_once("confluent", Deployment.single(b), tmp_path, reader)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- broker tail ---\n{b.tail(40)}") from None
        print(f"\n{CLIENT} exactly-once timings: "
              + ", ".join(f"{k}={v:.1f}" for k, v in timings.items()))
    finally:
        b.close()


@pytest.mark.parametrize("tbroker", RF3_ONLY, indirect=True)
def test_exactly_once_copy_in_cluster(tbroker: Deployment, tmp_path: Path) -> None:
    """The copy without a broker kill in the 3-broker cluster at RF 3 (the single node has
    test_exactly_once_copy_across_broker_kill): its topics' leaders, the group
    coordinator and the transaction coordinator on different brokers."""
    timings = run_exactly_once("confluent", tbroker, tmp_path, read_confluent,
                               total=EOS_CLUSTER_RECORDS, kill=False)
    print(f"\n{CLIENT} exactly-once timings ({tbroker.kind}): "
          + ", ".join(f"{k}={v:.1f}" for k, v in timings.items()))


def test_zombie_producer_is_fenced(tbroker: Deployment) -> None:
    topic = unique_topic("fence-cf")
    create_topic(tbroker.bootstrap, topic, 1, tbroker.replication)
    txn_id = f"fence-{uuid.uuid4().hex[:8]}"

    zombie = txn_producer(tbroker.bootstrap, txn_id)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    for i in range(5):
        zombie.produce(topic, value=f"zombie-{i}".encode(), partition=0)
    assert zombie.flush(30) == 0

    fresh = txn_producer(tbroker.bootstrap, txn_id)
    fresh.init_transactions(30)  # bumps the epoch: fences the zombie, aborts its txn
    fresh.begin_transaction()
    for i in range(5):
        fresh.produce(topic, value=f"fresh-{i}".encode(), partition=0)
    fresh.commit_transaction(30)

    # The zombie goes on as if nothing happened.
    reports: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        reports.append(err)

    # The fenced produce fails (INVALID_PRODUCER_EPOCH) and librdkafka raises its fatal
    # error out of flush(); confluent-kafka 2.16 then reports the delivery callback as
    # "SystemError: ... returned a result with an exception set" (a client quirk).
    early: list[BaseException] = []
    try:
        zombie.produce(topic, value=b"zombie-late", partition=0, on_delivery=on_delivery)
        zombie.flush(10)
    except (KafkaException, SystemError) as exc:
        early.append(exc)
    with pytest.raises(KafkaException) as ei:
        zombie.commit_transaction(30)
    err = ei.value.args[0]
    del zombie, fresh  # destroy the clients now, not after the module's broker is gone
    print(f"\n{CLIENT}: zombie late produce: reports={reports} raised={early}; commit: {err!r}")
    fenced_codes = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                    KafkaError.INVALID_PRODUCER_EPOCH}
    assert err.fatal() and err.code() in fenced_codes, (
        f"{CLIENT}: zombie commit failed with {err!r} (fatal={err.fatal()}, "
        f"code={err.code()}), expected a fatal fencing error")
    assert all(r is not None for r in reports), (
        f"{CLIENT}: the zombie's late record was acknowledged: {reports}")

    committed = read_values(tbroker.bootstrap, topic, committed=True)
    assert committed == [f"fresh-{i}".encode() for i in range(5)], (
        f"{CLIENT}: read_committed sees {committed}")
    uncommitted = read_values(tbroker.bootstrap, topic, committed=False)
    assert [v for v in uncommitted if v.startswith(b"zombie-")] == [
        f"zombie-{i}".encode() for i in range(5)], (
        f"{CLIENT}: read_uncommitted sees {uncommitted} (the zombie's flushed records were "
        f"written and must stay aborted; its late one must have been rejected)")


@pytest.mark.parametrize("tbroker", SINGLE_ONLY, indirect=True)  # kafka-python: rf3
def test_hung_transaction_is_aborted_by_timeout(tbroker: Deployment) -> None:
    topic = unique_topic("hung-cf")
    create_topic(tbroker.bootstrap, topic, 1, tbroker.replication)

    hung = txn_producer(tbroker.bootstrap, f"hung-{uuid.uuid4().hex[:8]}",
                        **{"transaction.timeout.ms": 8000})  # room for a loaded machine
    hung.init_transactions(30)
    hung.begin_transaction()
    for i in range(10):
        hung.produce(topic, value=f"hung-{i}".encode(), partition=0)
    assert hung.flush(30) == 0
    t_hung = time.monotonic()

    other = txn_producer(tbroker.bootstrap, f"other-{uuid.uuid4().hex[:8]}")
    other.init_transactions(30)
    other.begin_transaction()
    for i in range(10):
        other.produce(topic, value=f"after-{i}".encode(), partition=0)
    other.commit_transaction(30)

    hw = list_offsets(tbroker.bootstrap, topic, 1, committed=False)[0]
    lso = list_offsets(tbroker.bootstrap, topic, 1, committed=True)[0]
    assert hw >= 21 and lso == 0, (
        f"{CLIENT}: while the hung transaction is open, expected LSO 0 and high watermark "
        f">= 21 (10 hung + 10 committed + marker), got LSO {lso}, HW {hw}")

    c = Consumer({"bootstrap.servers": tbroker.bootstrap, "group.id": f"hung-{uuid.uuid4().hex}",
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    got: list[bytes] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 20.0
        while len(got) < 10 and time.monotonic() < deadline:
            for m in c.consume(100, 0.2):
                if m.error() is None:
                    got.append(m.value())
    finally:
        c.close()
    waited = time.monotonic() - t_hung
    assert got == [f"after-{i}".encode() for i in range(10)], (
        f"{CLIENT}: read_committed consumer got {got} within {waited:.1f}s of the hung "
        f"transaction (timeout 8 s, broker check every 0.5 s); LSO now "
        f"{list_offsets(tbroker.bootstrap, topic, 1, committed=True)}")

    deadline = time.monotonic() + 10.0
    while True:
        hw = list_offsets(tbroker.bootstrap, topic, 1, committed=False)[0]
        lso = list_offsets(tbroker.bootstrap, topic, 1, committed=True)[0]
        if lso == hw or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert lso == hw, f"{CLIENT}: LSO {lso} never reached the high watermark {hw}"

    with pytest.raises(KafkaException) as ei:
        hung.commit_transaction(30)
    del hung, other
    print(f"\n{CLIENT}: hung txn visible-after {waited:.1f}s; late commit failed with "
          f"{ei.value.args[0]!r}")
    committed = read_values(tbroker.bootstrap, topic, committed=True)
    assert committed == [f"after-{i}".encode() for i in range(10)], (
        f"{CLIENT}: read_committed sees {committed} after the timed-out transaction")
    uncommitted = read_values(tbroker.bootstrap, topic, committed=False)
    assert [v for v in uncommitted if v.startswith(b"hung-")] == [
        f"hung-{i}".encode() for i in range(10)], f"{CLIENT}: read_uncommitted {uncommitted}"
