"""Fetch at the partition leaders — and from followers — on a single broker
and on a 3-broker cluster at replication factor 3 (one module broker or
cluster per kind, admin ports on so ``/metrics`` is read; the cluster's
brokers sit in racks a, b and c with Kafka's RackAwareReplicaSelector, as
the single broker in rack a).

Long polls wake per partition (``kcompat.broker.storage.partition``): 100 raw Fetch
requests (kafka-python's codec, max_wait 20 s, min_bytes 1) wait at the end
of the partitions of an idle topic, one more waits on a hot partition; then 5
appends go to the hot partition (confluent-kafka, acks=all). The hot fetch is
answered with the data at once; the 100 idle ones are still waiting, and
``kcompat_fetch_wakeups_total{api="Fetch"}`` (summed over the brokers) rose
by the hot fetch's wake-ups only — a broker-wide wake would add 100 per
append (measured: 1001 and 627 for the 5 appends). On the cluster the fetches
wait at each partition's leader and the hot partition's high watermark moves
by Raft commit, not by the append itself.

Zero copy at the leaders (``kcompat.broker.net.zero_copy``): kafka-python reads
back 3 partitions of ~1 MiB each exactly as confluent-kafka produced them
while the leaders answer with segment-file ranges
(``kcompat_fetch_sendfile_bytes_total``), cut at the high watermark — the
Raft commit index on the cluster.

Reads from followers (KIP-392, ``kcompat.broker.replication.read_replicas``):
raw Fetch requests show the leader sending a client of a follower's rack
there (no records, ``preferred_read_replica``, answered at once) and serving
one of its own rack or an unknown one, the follower serving v11+ reads up to
its high watermark with the leader's records and refusing v10, and an offset
past its log (OFFSET_OUT_OF_RANGE with a leader epoch, empty without); Kafka's
console consumer (Java client 4.4) with ``client.rack`` reads from that
follower. Then
a confluent-kafka consumer with ``client.rack`` reads every record once and
in order from the follower in its rack (the per-broker
``kcompat_topic_bytes_out_total``: all of it from the follower, none from
the leader); after a kill -9 of that follower it reads the next records from
the leader (last in the module: it leaves the cluster a broker short).
"""

from __future__ import annotations

import os
import select
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.record import MemoryRecords
from prometheus_client.parser import text_string_to_metric_families

from compat_tests._broker import Broker, free_port, running, unique_topic
from compat_tests._cluster import Cluster
from compat_tests.java._toolbatch import run_tools
from tests.integration._raw import RawConnection

IDLE_FETCHES = 100
IDLE_PARTITIONS = 4
APPENDS = 5
MAX_WAIT_MS = 20_000
TIMEOUT_S = 20.0
FT = FetchRequest.FetchTopic


RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"


def _rack(node: int) -> tuple[str, ...]:
    return ("--set", f"broker.rack={'abc'[node - 1]}", "--set",
            f"replica.selector.class={RACK_AWARE}")


class Deployment:
    """Brokers with their admin ports (``/metrics``), by node id."""

    def __init__(self, brokers: dict[int, Broker], admin_ports: dict[int, int]) -> None:
        self.brokers = brokers
        self.admin_ports = admin_ports

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    @property
    def live_bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.running)

    def metric(self, name: str, labels: dict[str, str] | None = None) -> dict[int, float]:
        """{node: the value of sample ``name`` (with exactly ``labels``, if
        given) in that broker's ``/metrics``}; brokers that are down are left out."""
        out = {}
        for node, port in self.admin_ports.items():
            if not self.brokers[node].running:
                continue
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                body = r.read().decode()
            out[node] = sum(s.value for family in text_string_to_metric_families(body)
                            for s in family.samples
                            if s.name == name and (labels is None or s.labels == labels))
        return out

    def wakeups(self) -> float:
        return sum(self.metric("kcompat_fetch_wakeups_total", {"api": "Fetch"}).values())

    def bytes_out(self, topic: str) -> dict[int, float]:
        return self.metric("kcompat_topic_bytes_out_total", {"topic": topic})

    def leaders(self, topic: str, partitions: int) -> dict[int, str]:
        """{partition: its leader's bootstrap address}."""
        return {p: self.brokers[node].bootstrap
                for p, (node, _epoch) in self.leader_nodes(topic, partitions).items()}

    def leader_nodes(self, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
        """{partition: (its leader's node id, leader epoch)} from raw Metadata v12."""
        conn = RawConnection(next(iter(self.brokers.values())).bootstrap, timeout=TIMEOUT_S)
        deadline = time.monotonic() + TIMEOUT_S
        try:
            while True:
                md = conn.request(MetadataRequest[12](
                    topics=[MetadataRequest[12].MetadataRequestTopic(topic_id=None, name=topic)],
                    allow_auto_topic_creation=False, include_topic_authorized_operations=False),
                    MetadataResponse[12]).to_dict()
                found = {p["partition_index"]: (p["leader_id"], p["leader_epoch"])
                         for p in md["topics"][0]["partitions"]}
                if len(found) == partitions and all(
                        node in self.brokers for node, _e in found.values()):
                    return found
                assert time.monotonic() < deadline, f"no leaders for {topic}: {md}"
                time.sleep(0.1)
        finally:
            conn.close()


@pytest.fixture(scope="module", params=["single", "cluster"])
def deployment(request: pytest.FixtureRequest,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    root = Path(tmp_path_factory.mktemp(f"wakeups-{request.param}"))
    if request.param == "single":
        port = free_port()
        broker = Broker(root, extra_args=("--set", f"admin.port={port}", *_rack(1)))
        for b in running(broker):
            yield Deployment({1: b}, {1: port})
        return
    cluster = Cluster(root)
    ports = {}
    for node, b in cluster.brokers.items():
        ports[node] = free_port()
        b.extra_args += ("--set", f"admin.port={ports[node]}", *_rack(node))
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
    return sum(deployment.metric("kcompat_fetch_sendfile_bytes_total").values())


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


# -- reads from followers (KIP-392) --------------------------------------------------


def _fetch(bootstrap: str, version: int, topic: str, offset: int, rack: str,
           epoch: int = -1, max_wait_ms: int = 5000) -> tuple[Any, float]:
    """One raw Fetch of partition 0: (its partition answer, seconds it took)."""
    conn = RawConnection(bootstrap, timeout=TIMEOUT_S)
    extra = {"rack_id": rack} if version >= 11 else {}
    try:
        started = time.monotonic()
        answer = conn.request(FetchRequest[version](
            replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20,
            isolation_level=0, session_id=0, session_epoch=-1,
            topics=[FT(topic=topic, partitions=[FT.FetchPartition(
                partition=0, current_leader_epoch=epoch, fetch_offset=offset,
                log_start_offset=-1, partition_max_bytes=1 << 20)])],
            forgotten_topics_data=[], **extra), FetchResponse[version])
        return answer.responses[0].partitions[0], time.monotonic() - started
    finally:
        conn.close()


def _values(records: bytes | None) -> list[bytes]:
    out = []
    batches = MemoryRecords(records or b"")
    while (batch := batches.next_batch()) is not None:
        out += [r.value for r in batch]
    return out


def _produce_values(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for v in values:
        producer.produce(topic, v, partition=0)
    assert producer.flush(TIMEOUT_S) == 0


def _topic_with(deployment: Deployment, prefix: str, values: list[bytes]) -> tuple[str, int, int]:
    """A new one-partition topic on every broker holding ``values``: (name, its
    leader's node id, leader epoch)."""
    topic = unique_topic(prefix)
    admin = AdminClient({"bootstrap.servers": deployment.bootstrap})
    admin.create_topics([NewTopic(topic, 1, len(deployment.brokers))],
                        operation_timeout=20)[topic].result(TIMEOUT_S)
    _produce_values(deployment.bootstrap, topic, values)
    [(leader, epoch)] = deployment.leader_nodes(topic, 1).values()
    return topic, leader, epoch


def test_leader_sends_a_rack_client_to_its_follower_which_serves_v11(
        deployment: Deployment) -> None:
    sent = [b"rack-%d" % i for i in range(20)]
    topic, leader, epoch = _topic_with(deployment, "rack-raw", sent)
    at_leader = deployment.brokers[leader].bootstrap
    own_rack = "abc"[leader - 1]
    for rack in (own_rack, "", "zz"):  # its own rack, none, one without a replica
        part, _s = _fetch(at_leader, 11, topic, 0, rack)
        assert (part.error_code, part.preferred_read_replica) == (0, -1), (rack, part)
        assert _values(part.records) == sent
    followers = [n for n in deployment.brokers if n != leader]
    if not followers:  # a lone replica: no follower to send a client to
        part, _s = _fetch(at_leader, 12, topic, 0, "b" if own_rack != "b" else "c")
        assert (part.error_code, part.preferred_read_replica) == (0, -1)
        assert _values(part.records) == sent
        return
    for follower in followers:
        rack = "abc"[follower - 1]
        part, took = _fetch(at_leader, 11, topic, 0, rack, epoch, max_wait_ms=10_000)
        assert (part.error_code, part.preferred_read_replica) == (0, follower), part
        assert not part.records and part.high_watermark == len(sent)
        assert took < 5, f"a redirect waited {took:.1f} s (max_wait 10 s)"
        at_follower = deployment.brokers[follower].bootstrap
        deadline = time.monotonic() + TIMEOUT_S  # its high watermark trails by a round trip
        while True:
            part, _s = _fetch(at_follower, 11, topic, 0, rack, epoch, max_wait_ms=500)
            if part.error_code or len(_values(part.records)) == len(sent) \
                    or time.monotonic() > deadline:
                break
        assert (part.error_code, part.preferred_read_replica) == (0, -1), part
        assert _values(part.records) == sent and part.high_watermark == len(sent)
        part, _s = _fetch(at_follower, 10, topic, 0, "")
        assert part.error_code == 6, part  # NOT_LEADER_OR_FOLLOWER: v10 reads leaders only
        part, _s = _fetch(at_follower, 11, topic, 1000, rack, epoch)
        assert part.error_code == 1, part  # OFFSET_OUT_OF_RANGE: it knows to ask the leader
        part, took = _fetch(at_follower, 11, topic, 1000, rack, -1, max_wait_ms=200)
        assert (part.error_code, part.records or b"") == (0, b""), part  # stale metadata: empty
    # Kafka's own consumer (its console consumer) in the last follower's rack reads there
    before = deployment.bytes_out(topic)
    [run] = run_tools([[CONSOLE_CONSUMER, "--bootstrap-server", deployment.bootstrap,
                        "--topic", topic, "--partition", "0", "--offset", "earliest",
                        "--max-messages", str(len(sent)), "--timeout-ms", "20000",
                        "--command-property", f"client.rack={rack}"]])
    assert run.code == 0 and run.stdout.split() == [v.decode() for v in sent], run.explain()
    served = {n: v - before[n] for n, v in deployment.bytes_out(topic).items()}
    assert served[follower] >= sum(len(v) for v in sent), served
    assert all(v == 0 for n, v in served.items() if n != follower), served


def test_rack_consumer_reads_from_its_follower_then_the_leader_after_kill9(
        deployment: Deployment) -> None:
    """Last in the module: the cluster loses a broker."""
    first = [b"first-%03d" % i for i in range(300)]
    topic, leader, _epoch = _topic_with(deployment, "rack-consumer", first)
    follower = next((n for n in deployment.brokers if n != leader), leader)
    rack = "abc"[follower - 1]
    before = deployment.bytes_out(topic)
    consumer = Consumer({"bootstrap.servers": deployment.bootstrap, "group.id": topic,
                         "client.rack": rack, "enable.auto.commit": False,
                         "fetch.error.backoff.ms": 100, "reconnect.backoff.max.ms": 500,
                         "log_level": 0})
    got: list[bytes] = []

    def read_until(count: int) -> None:
        deadline = time.monotonic() + 2 * TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())

    try:
        consumer.assign([CkTopicPartition(topic, 0, OFFSET_BEGINNING)])
        read_until(len(first))
        assert got == first, f"read {len(got)} of {len(first)} (or out of order)"
        after = deployment.bytes_out(topic)
        served = {n: after[n] - before.get(n, 0) for n in after}
        assert served[follower] > sum(len(v) for v in first), served
        assert all(v == 0 for n, v in served.items() if n != follower), served
        if follower == leader:
            return  # a lone broker: nothing to fail over to
        deployment.brokers[follower].kill()
        then = deployment.bytes_out(topic)
        second = [b"second-%03d" % i for i in range(300)]
        _produce_values(deployment.live_bootstrap, topic, second)
        read_until(len(first) + len(second))
        assert got == first + second, f"read {len(got) - len(first)} of {len(second)} more"
        assert deployment.bytes_out(topic)[leader] - then[leader] > sum(len(v) for v in second)
    finally:
        consumer.close()
