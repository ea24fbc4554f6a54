"""An elastic cluster under load (issue 19's proof), real processes.

Three combined brokers; an idempotent acks=all producer and a consumer group
(manual synchronous commits) run the whole time. Brokers 4 and 5 join
(broker-only nodes); ``kcompat cluster rebalance --execute --wait`` spreads
the replicas over the five; ``kcompat cluster decommission 1`` moves
everything off broker 1; broker 4 replaces broker 1 as a controller voter
(``kcompat cluster add-voter 4`` / ``remove-voter 1``) and broker 1 is
stopped. Then:

* every acknowledged record is read exactly once, in order, per partition
  (a fresh reader assigned to every partition, from broker 5);
* the group's committed offsets never went back, and what the group
  committed last is still there;
* replicas end within one of each other over brokers 2-5, leaders within
  two (the plan's preferred leaders, elected once the moves are done), and
  the spread is printed;
* the longest wait for an acknowledgement (a produce stall) is printed —
  a figure, never asserted (timings are benchmark figures).

It runs in ``make chaos`` (``CHAOS_SECONDS`` set); ``make test`` runs its
parts at a smaller size in ``tests/integration/test_cluster_reassign.py``
(moves under a producer, decommission, the replacement of a dead controller).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from compat_tests._broker import unique_topic
from compat_tests._cluster import Cluster
from tests.integration import _elastic as el

PARTITIONS = 6
pytestmark = pytest.mark.skipif(
    "CHAOS_SECONDS" not in os.environ,
    reason="the full elastic-cluster scenario runs in make chaos (CHAOS_SECONDS); make test "
           "covers its parts in tests/integration/test_cluster_reassign.py")


def _cli(*args: str) -> str:
    run = subprocess.run([sys.executable, "-m", "kcompat", *args], capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, (args, run.stderr)
    return run.stdout


class Load:
    """The producer and the consumer group, each in a thread."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic, self.group = topic, f"{topic}-group"
        self.bootstrap = bootstrap
        self.acked: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        self.failed: list[str] = []
        self.max_stall_s = 0.0
        self.commits: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        self.consumed = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._produce, daemon=True),
                         threading.Thread(target=self._consume, daemon=True)]

    def _produce(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                             "linger.ms": 5, "log_level": 0})
        i = 0
        while not self._stop.is_set():
            sent = time.monotonic()

            def done(err: Any, msg: Any, sent: float = sent) -> None:
                self.max_stall_s = max(self.max_stall_s, time.monotonic() - sent)
                if err is not None:
                    self.failed.append(str(err))
                else:
                    self.acked[msg.partition()].append(msg.value())

            producer.produce(self.topic, b"e-%07d" % i, partition=i % PARTITIONS,
                             on_delivery=done)
            i += 1
            producer.poll(0.001)
        producer.flush(60)

    def _consume(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "log_level": 0})
        consumer.subscribe([self.topic])
        try:
            while not self._stop.is_set():
                msgs = consumer.consume(500, 0.5)
                if not msgs:
                    continue
                self.consumed += len(msgs)
                try:
                    for tp in consumer.commit(asynchronous=False) or []:
                        if tp.error is None and tp.offset >= 0:
                            self.commits[tp.partition].append(tp.offset)
                except Exception:  # noqa: BLE001 - a rebalance in between: commit next time
                    continue
        finally:
            consumer.close()

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(90)


def _spread(bootstrap: str) -> dict[int, tuple[int, int]]:
    """Per broker: (replicas, leaders) of every partition in Metadata."""
    md = el.admin(bootstrap).list_topics(timeout=10)
    out: dict[int, list[int]] = {b: [0, 0] for b in md.brokers}
    for meta in md.topics.values():
        for p in meta.partitions.values():
            for r in p.replicas:
                out.setdefault(r, [0, 0])[0] += 1
            if p.leader >= 0:
                out.setdefault(p.leader, [0, 0])[1] += 1
    return {b: (v[0], v[1]) for b, v in sorted(out.items())}


@pytest.mark.timeout(900)
def test_brokers_join_replicas_spread_a_broker_leaves_and_a_controller_is_replaced(
        tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, extra_args=el.FAST_SESSIONS)
    joiners = {n: el.broker_only(cluster, tmp_path / f"broker-{n}", n) for n in (4, 5)}
    try:
        cluster.start()
        one = cluster.brokers[1].bootstrap
        topic = unique_topic("elastic")
        admin = el.admin(one)
        admin.create_topics([NewTopic(topic, PARTITIONS, 3)], operation_timeout=30)[
            topic].result(60)
        with Load(cluster.bootstrap, topic) as load:
            el.wait(lambda: load.consumed > 1000, "the group consuming")
            for broker in joiners.values():
                broker.start()
            el.wait(lambda: {4, 5} <= set(el.admin(one).list_topics(timeout=10).brokers),
                    "brokers 4 and 5 registered")
            print("rebalance:", _cli("cluster", "rebalance", "--execute", "--wait",
                                     "--bootstrap-server", one, "--timeout-ms", "300000"))
            print("decommission:", _cli("cluster", "decommission", "1",
                                        "--bootstrap-server", one, "--timeout-ms", "300000"))
            el.wait(lambda: all(1 not in r for r in _replicas(one).values()),
                    "nothing left on broker 1")
            two = cluster.brokers[2].bootstrap
            _cli("cluster", "add-voter", "4", "--bootstrap-server", two)
            _cli("cluster", "remove-voter", "1", "--bootstrap-server", two)
            cluster.brokers[1].stop()
            time.sleep(float(os.environ.get("CHAOS_SECONDS", "10")) / 20)  # load on the new layout
        five = joiners[5].bootstrap
        spread = _spread(five)
        print(f"spread (replicas, leaders) per broker: {spread}; produce stall max "
              f"{load.max_stall_s:.2f} s; acknowledged {sum(map(len, load.acked.values()))}")
        assert load.failed == [], load.failed[:5]
        assert 1 not in spread
        counts = [r for r, _l in spread.values()]
        assert max(counts) - min(counts) <= 1, spread
        leads = [ldr for _r, ldr in spread.values()]  # the plan's, elected after the moves
        assert max(leads) - min(leads) <= 2, spread
        voters = sorted(v["replica_id"] for v in el.quorum(five)["current_voters"])
        assert voters == [2, 3, 4], voters
        for partition, offsets in load.commits.items():
            assert offsets == sorted(offsets), (partition, offsets)  # never went back
        consumer = Consumer({"bootstrap.servers": five, "group.id": load.group,
                             "enable.auto.commit": False, "log_level": 0})
        try:
            committed = consumer.committed(
                [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
        finally:
            consumer.close()
        for tp in committed:
            last = load.commits[tp.partition][-1] if load.commits[tp.partition] else -1001
            assert tp.offset == last, (tp.partition, tp.offset, last)
        for partition in range(PARTITIONS):
            acked = load.acked[partition]
            got = _read_partition(five, topic, partition, len(acked))
            assert got == acked, (partition, len(got), len(acked))
    finally:
        for broker in joiners.values():
            if broker.running:
                broker.kill()
        cluster.kill()


def _replicas(bootstrap: str) -> dict[tuple[str, int], list[int]]:
    md = el.admin(bootstrap).list_topics(timeout=10)
    return {(t, p.id): list(p.replicas) for t, meta in md.topics.items()
            for p in meta.partitions.values()}


def _read_partition(bootstrap: str, topic: str, partition: int, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-check",
                         "enable.auto.commit": False, "log_level": 0})
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is None:
                    got.append(msg.value())
    finally:
        consumer.close()
    return got
