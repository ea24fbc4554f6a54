"""Fetch at the partition leaders, on a single broker and on a 3-broker
cluster at replication factor 3 (one module broker or cluster per kind, admin
ports on so ``/metrics`` is read).

Long polls wake per partition (``kcompat.broker.partition``): 100 raw Fetch
requests (kafka-python's codec, max_wait 20 s, min_bytes 1) wait at the end
of the partitions of an idle topic, one more waits on a hot partition; then 5
appends go to the hot partition (confluent-kafka, acks=all). The hot fetch is
answered with the data at once; the 100 idle ones are still waiting, and
``kcompat_fetch_wakeups_total{api="Fetch"}`` (summed over the brokers) rose
by the hot fetch's wake-ups only — a broker-wide wake would add 100 per
append (measured: 1001 and 627 for the 5 appends). On the cluster the fetches
wait at each partition's leader and the hot partition's high watermark moves
by Raft commit, not by the append itself.

Zero copy at the leaders (``kcompat.broker.zero_copy``): kafka-python reads
back 3 partitions of ~1 MiB each exactly as confluent-kafka produced them
while the leaders answer with segment-file ranges
(``kcompat_fetch_sendfile_bytes_total``), cut at the high watermark — the
Raft commit index on the cluster.
"""

from __future__ import annotations

import os
import select
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from prometheus_client.parser import text_string_to_metric_families

from compat_tests._broker import Broker, free_port, running, unique_topic
from compat_tests._cluster import Cluster
from tests.integration._raw import RawConnection

IDLE_FETCHES = 100
IDLE_PARTITIONS = 4
APPENDS = 5
MAX_WAIT_MS = 20_000
TIMEOUT_S = 20.0
FT = FetchRequest.FetchTopic


class Deployment:
    """Brokers with their admin ports (``/metrics``), by node id."""

    def __init__(self, brokers: dict[int, Broker], admin_ports: dict[int, int]) -> None:
        self.brokers = brokers
        self.admin_ports = admin_ports

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def wakeups(self) -> float:
        total = 0.0
        for port in self.admin_ports.values():
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                body = r.read().decode()
            for family in text_string_to_metric_families(body):
                for s in family.samples:
                    if s.name == "kcompat_fetch_wakeups_total" and s.labels == {"api": "Fetch"}:
                        total += s.value
        return total

    def leaders(self, topic: str, partitions: int) -> dict[int, str]:
        """{partition: its leader's bootstrap address}."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            t = admin.list_topics(topic, timeout=5).topics[topic]
            found = {p.id: p.leader for p in t.partitions.values()}
            if len(found) == partitions and all(ldr in self.brokers for ldr in found.values()):
                return {p: self.brokers[ldr].bootstrap for p, ldr in found.items()}
            assert time.monotonic() < deadline, f"no leaders for {topic}: {found}"
            time.sleep(0.1)


@pytest.fixture(scope="module", params=["single", "cluster"])
def deployment(request: pytest.FixtureRequest,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    root = Path(tmp_path_factory.mktemp(f"wakeups-{request.param}"))
    if request.param == "single":
        port = free_port()
        broker = Broker(root, extra_args=("--set", f"admin.port={port}"))
        for b in running(broker):
            yield Deployment({1: b}, {1: port})
        return
    cluster = Cluster(root)
    ports = {}
    for node, b in cluster.brokers.items():
        ports[node] = free_port()
        b.extra_args += ("--set", f"admin.port={ports[node]}")
    try:
        cluster.start()
        yield Deployment(cluster.brokers, ports)
    finally:
        cluster.kill()


def _waiting_fetch(bootstrap: str, topic: str, partition: int) -> RawConnection:
    conn = RawConnection(bootstrap, timeout=TIMEOUT_S)
    conn.send(FetchRequest[12](
        replica_id=-1, max_wait_ms=MAX_WAIT_MS, min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, session_id=0, session_epoch=-1,
        topics=[FT(topic=topic, partitions=[FT.FetchPartition(
            partition=partition, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
            partition_max_bytes=1 << 20)])],
        forgotten_topics_data=[], rack_id=""))
    return conn


def test_an_append_wakes_only_the_fetches_of_its_partition(deployment: Deployment) -> None:
    idle, hot = unique_topic("wake-idle"), unique_topic("wake-hot")
    replication = len(deployment.brokers)
    admin = AdminClient({"bootstrap.servers": deployment.bootstrap})
    futures = admin.create_topics([NewTopic(idle, IDLE_PARTITIONS, replication),
                                   NewTopic(hot, 1, replication)], operation_timeout=20)
    for f in futures.values():
        f.result(TIMEOUT_S)
    idle_leaders = deployment.leaders(idle, IDLE_PARTITIONS)
    hot_leader = deployment.leaders(hot, 1)[0]
    producer = Producer({"bootstrap.servers": deployment.bootstrap, "acks": "all",
                         "linger.ms": 0})
    producer.produce(hot, b"warm-up", partition=0)  # metadata and connections first
    assert producer.flush(TIMEOUT_S) == 0
    waiting = [_waiting_fetch(idle_leaders[i % IDLE_PARTITIONS], idle, i % IDLE_PARTITIONS)
               for i in range(IDLE_FETCHES)]
    try:
        time.sleep(0.5)  # every fetch read its empty partition and waits
        hot_conn = RawConnection(hot_leader, timeout=TIMEOUT_S)
        hot_conn.send(FetchRequest[12](
            replica_id=-1, max_wait_ms=MAX_WAIT_MS, min_bytes=1, max_bytes=1 << 20,
            isolation_level=0, session_id=0, session_epoch=-1,
            topics=[FT(topic=hot, partitions=[FT.FetchPartition(
                partition=0, current_leader_epoch=-1, fetch_offset=1, log_start_offset=-1,
                partition_max_bytes=1 << 20)])],
            forgotten_topics_data=[], rack_id=""))
        time.sleep(0.2)
        before = deployment.wakeups()
        started = time.monotonic()
        for i in range(APPENDS):
            producer.produce(hot, b"news-%d" % i, partition=0)
            assert producer.flush(TIMEOUT_S) == 0
        _cid, answer = hot_conn.recv(FetchResponse[12])
        answered_s = time.monotonic() - started
        hot_conn.close()
        part = answer.responses[0].partitions[0]
        assert part.error_code == 0 and part.records, "the hot fetch got no data"
        assert answered_s < MAX_WAIT_MS / 2000, "the hot fetch was not woken by the append"
        time.sleep(0.2)
        woken = deployment.wakeups() - before
        ready, _w, _x = select.select([c.sock for c in waiting], [], [], 0)
        assert not ready, f"{len(ready)} idle fetches were answered before max_wait"
        # the hot fetch: one wake-up (single broker), or a few while the high
        # watermark catches up with the append (cluster); never one per idle fetch
        assert 1 <= woken <= 2 * APPENDS, f"{woken} wake-ups for {APPENDS} appends"
    finally:
        for conn in waiting:
            conn.close()


def _sendfile_bytes(deployment: Deployment) -> float:
    total = 0.0
    for port in deployment.admin_ports.values():
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            body = r.read().decode()
        for family in text_string_to_metric_families(body):
            for s in family.samples:
                if s.name == "kcompat_fetch_sendfile_bytes_total":
                    total += s.value
    return total


def test_consumers_read_file_ranges_up_to_the_high_watermark(deployment: Deployment) -> None:
    topic = unique_topic("ranges")
    admin = AdminClient({"bootstrap.servers": deployment.bootstrap})
    admin.create_topics([NewTopic(topic, 3, len(deployment.brokers))],
                        operation_timeout=20)[topic].result(TIMEOUT_S)
    deployment.leaders(topic, 3)
    producer = Producer({"bootstrap.servers": deployment.bootstrap, "acks": "all",
                         "linger.ms": 20, "batch.size": 131072})
    sent = {(i % 3, i // 3): os.urandom(900) for i in range(3000)}  # (partition, n) -> value
    for (partition, _n), value in sorted(sent.items(), key=lambda kv: kv[0][1]):
        producer.produce(topic, value, partition=partition)
    assert producer.flush(TIMEOUT_S) == 0
    before = _sendfile_bytes(deployment)
    consumer = KafkaConsumer(bootstrap_servers=deployment.bootstrap, enable_auto_commit=False,
                             max_partition_fetch_bytes=256 * 1024)
    got: dict[tuple[int, int], bytes] = {}
    try:
        consumer.assign([KafkaTopicPartition(topic, p) for p in range(3)])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < len(sent) and time.monotonic() < deadline:
            for tp, msgs in consumer.poll(500).items():
                got.update(((tp.partition, m.offset), m.value) for m in msgs)
    finally:
        consumer.close()
    assert got == sent, f"read {len(got)} of {len(sent)} records, or other bytes"
    assert _sendfile_bytes(deployment) - before > 2 << 20, "the answers were not file ranges"
