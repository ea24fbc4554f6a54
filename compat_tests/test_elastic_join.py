"""A broker-only node joins a running cluster the Kafka 4.x way (issue 32).

Real processes: three combined broker+controller nodes (``_cluster``), a
topic of 6 partitions at replication factor 3 on them, and an idempotent
acks=all producer (confluent-kafka) writing to every partition from before
the join to after the move. Node 4 starts with ``process.roles=broker`` and
``controller.quorum.bootstrap.servers`` naming the controllers — no ids, no
``controller.quorum.voters`` (KIP-853) —, learns the voters from them,
registers, and appears in Metadata (AdminClient ``list_topics``) and in
DescribeCluster (``describe_cluster``); DescribeQuorum lists it as an observer,
and its own Metadata names every partition's leader though it replicates none.
``kcompat cluster rebalance --bootstrap-server a,b,c --execute --wait`` — the
CLI given the three brokers as one comma-separated list, as Kafka's tools take
it — moves replicas to it. Every record the producer saw acknowledged, before
and during the move, is read back afterwards, once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from kio.schema.metadata.v12 import request as metadata

from compat_tests._broker import Broker, free_port, unique_topic
from compat_tests._cluster import Cluster, read_log
from kcompat.cli._kio import Connection

PARTITIONS = 6
TIMEOUT_S = 60.0


def _wait(predicate: Callable[[], Any], what: str, timeout_s: float = TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            found = predicate()
        except Exception:  # noqa: BLE001 - a broker between states: ask again
            found = None
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


class _Writer:
    """An idempotent acks=all producer writing round the partitions until
    stopped; ``acked`` is every acknowledged value, ``failed`` every error."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "enable.idempotence": True, "linger.ms": 5,
                                  "log_level": 0})
        self.acked: list[bytes] = []
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _done(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.acked.append(msg.value())

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            self.producer.produce(self.topic, b"r-%07d" % i, partition=i % PARTITIONS,
                                  on_delivery=self._done)
            i += 1
            self.producer.poll(0.005 if i % 10 == 0 else 0)
        self.producer.flush(TIMEOUT_S)

    def __enter__(self) -> _Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT_S + 5)
        assert not self._thread.is_alive(), "the producer did not flush in time"


def _replicas(bootstrap: str, topic: str) -> dict[int, list[int]]:
    md = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(
        topic, timeout=10)
    return {p.id: list(p.replicas) for p in md.topics[topic].partitions.values()}


def _described_nodes(bootstrap: str) -> set[int]:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    return {n.id for n in admin.describe_cluster(request_timeout=10).result(timeout=15).nodes}


def _leaders_named_by(broker: Broker, topic: str) -> dict[int, int]:
    """partition -> leader (-1: none) in ``broker``'s own Metadata answer."""
    host, port = broker.bootstrap.rsplit(":", 1)
    conn = Connection(host, int(port), 5.0)
    try:
        answer = conn.call(metadata.MetadataRequest(
            topics=(metadata.MetadataRequestTopic(topic_id=None, name=topic),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    finally:
        conn.close()
    return {p.partition_index: p.leader_id for p in answer.topics[0].partitions}


def _observers(bootstrap: str) -> set[int]:
    """The metadata quorum's observers (kafka-python's DescribeQuorum)."""
    from kafka.admin import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        [part] = client.describe_metadata_quorum()["topics"][0]["partitions"]
        return {int(o["replica_id"]) for o in part["observers"]}
    finally:
        client.close()


def test_broker_only_node_joins_by_bootstrap_servers_and_takes_replicas(
        tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    # the controllers' inter-broker listeners, without ids: what Kafka 4.x names
    controllers = ",".join(v.split("@", 1)[1] for v in cluster.voters.split(","))
    port = free_port()
    fourth = Broker(tmp_path / "broker-4", port=port, extra_args=(
        "--node-id", "4", "--set", "process.roles=broker",
        "--set", f"controller.quorum.bootstrap.servers={controllers}",
        "--admin-port", "-1", "--set", "default.replication.factor=3",
        *cluster.link_args(port)))
    try:
        cluster.start()
        topic = unique_topic("elastic-join")
        cluster.create_topic(topic, PARTITIONS, replication=3)
        quiet = unique_topic("elastic-quiet")  # never written: its partitions stay quiet
        cluster.create_topic(quiet, PARTITIONS, replication=3)
        servers = cluster.bootstrap  # "a,b,c": the three first brokers
        with _Writer(servers, topic) as writer:
            _wait(lambda: len(writer.acked) >= 300, "records acknowledged before the join")
            fourth.start()
            _wait(lambda: 4 in AdminClient({"bootstrap.servers": servers, "log_level": 0})
                  .list_topics(timeout=10).brokers, "broker 4 in Metadata")
            _wait(lambda: 4 in _described_nodes(servers), "broker 4 in DescribeCluster")
            _wait(lambda: 4 in _observers(servers), "broker 4 an observer in DescribeQuorum")
            # it replicates none of them, yet names every leader: the leaders announce
            # them to a broker they link to (not only at their full announcement, every
            # 30 s; before, a partition whose leader did not change was LEADER_NOT_AVAILABLE
            # there, and a reader bootstrapped from it failed with Unknown partition)
            for name in (topic, quiet):
                _wait(lambda n=name: (named := _leaders_named_by(fourth, n))  # type: ignore
                      and len(named) == PARTITIONS and min(named.values()) > 0,
                      f"broker 4 naming every leader of {name}", 5)
            assert all(4 not in r for r in _replicas(servers, topic).values())
            before_move = len(writer.acked)
            run = subprocess.run(
                [sys.executable, "-m", "kcompat", "cluster", "rebalance", "--bootstrap-server",
                 servers, "--execute", "--wait", "--json"],
                capture_output=True, text=True, timeout=300)
            assert run.returncode == 0, run.stderr
            report = json.loads(run.stdout)
            assert report["executed"] is True and report["after"]["replicas"]["4"] > 0, report
            moved = _wait(lambda: (r := _replicas(servers, topic)) and sum(
                4 in replicas for replicas in r.values()) > 0 and r, "replicas on broker 4")
            assert all(len(replicas) == 3 for replicas in moved.values()), moved
            assert len(writer.acked) > before_move  # it wrote during the move
            _wait(lambda: len(writer.acked) >= before_move + 300, "records after the move")
        assert writer.failed == []
        acked = set(writer.acked)
        assert len(acked) == len(writer.acked)
        log = read_log(f"{fourth.bootstrap},{servers}", topic, PARTITIONS)
        values = [value for records in log.values() for _offset, value in records]
        assert len(values) == len(set(values)), "a record was written twice"
        lost = acked - set(values)
        assert not lost, f"{len(lost)} acknowledged records lost, e.g. {sorted(lost)[:5]}"
    finally:
        if fourth.running:
            fourth.kill()
        cluster.kill()
