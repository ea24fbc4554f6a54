"""Partition reassignment and decommissioning (issue 19 item 3), and the
replacement of a dead controller (item 2, KIP-853), real processes.

Three combined brokers (voters) and broker 4, a broker-only node that joined
at run time. An idempotent acks=all producer writes to two partitions the
whole time: one of replication factor 3 on [1, 2, 3], one of replication
factor 1 on [1] (two topics: Kafka wants one replication factor per topic). ``kcompat topics reassign --plan`` (Kafka's reassignment
JSON) moves them to [2, 3, 4] and [4] — broker 4 catches up as a Raft
observer, is added as a voter, broker 1 is removed (it led both: it resigns
once its removal commits) — and returns once ListPartitionReassignments shows
nothing moving; Metadata then lists the targets, broker 1 no longer has the
partitions' directories and broker 4 has them. Bad input through the CLI gets
Kafka's errors and changes nothing: a broker that is not registered
(INVALID_REPLICA_ASSIGNMENT), a cancellation with nothing in progress
(NO_REASSIGNMENT_IN_PROGRESS); as in Kafka 4.4, a replication factor (and
a reassignment target) below ``min.insync.replicas`` is accepted. ``kcompat cluster rebalance`` is a dry run
that moves nothing; ``kcompat cluster decommission 2`` moves every replica
off broker 2 — the internal topics' too: a group's committed offset stays —
and reports the spread, then unregisters it: while that process runs it
stays out of Metadata and a replica assignment naming it is refused
(INVALID_REPLICA_ASSIGNMENT), a second unregistration is
BROKER_ID_NOT_REGISTERED. Broker 2,
killed -9 and restarted, registers again, replays the metadata log and deletes nothing it
should keep and keeps nothing it should not. Every acknowledged record is
then read exactly once, in order, from each partition.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests._broker import Broker, unique_topic
from compat_tests._cluster import Cluster
from tests.integration import _elastic as el
from tests.integration._elastic import FAST_SESSIONS, TIMEOUT_S, grown_cluster


@pytest.fixture
def grown(tmp_path: Path) -> Iterator[tuple[Cluster, Broker]]:
    with grown_cluster(tmp_path, FAST_SESSIONS + ("--set", "offsets.topic.num.partitions=4")
                       ) as both:
        yield both


def _replicas(bootstrap: str) -> dict[tuple[str, int], list[int]]:
    """Each partition's replicas in Metadata; its ISR must be among them (a
    replica a reassignment removed leaves the ISR with it)."""
    md = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=10)
    for t, meta in md.topics.items():
        for p in meta.partitions.values():
            assert set(p.isrs) <= set(p.replicas), (t, p.id, p.replicas, p.isrs)
    return {(t, p.id): list(p.replicas) for t, meta in md.topics.items()
            for p in meta.partitions.values()}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kcompat", *args], capture_output=True,
                          text=True, timeout=120)


class _Writer:
    """An idempotent acks=all producer writing to partition 0 of both topics
    until stopped; ``acked`` holds what each acknowledged, in order."""

    def __init__(self, bootstrap: str, topics: tuple[str, str]) -> None:
        self.topics = topics
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                  "linger.ms": 5, "log_level": 0})
        self.acked: dict[str, list[bytes]] = {t: [] for t in topics}
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _done(self, err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            self.failed.append(str(err))
        else:
            self.acked[msg.topic()].append(msg.value())

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            self.producer.produce(self.topics[i % 2], b"r-%06d" % i, partition=0,
                                  on_delivery=self._done)
            i += 1
            self.producer.poll(0.002 if i % 20 == 0 else 0)
        self.producer.flush(TIMEOUT_S)

    def __enter__(self) -> _Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT_S + 5)


def test_replicas_move_while_a_producer_writes_and_a_broker_is_decommissioned(
        grown: tuple[Cluster, Broker], tmp_path: Path) -> None:
    cluster, fourth = grown
    one = cluster.brokers[1].bootstrap
    admin = AdminClient({"bootstrap.servers": one, "log_level": 0})
    el.wait(lambda: 4 in admin.list_topics(timeout=10).brokers, "broker 4 in Metadata")
    wide, lone = unique_topic("moving-rf3"), unique_topic("moving-rf1")
    # min.insync.replicas 2 on every topic: Kafka 4.4 neither refuses a replication
    # factor below it (CreateTopics) nor a reassignment to fewer replicas, and an
    # acks=all producer writes to such a partition (probed on 3 Kafka brokers)
    for name, replicas in ((wide, [1, 2, 3]), (lone, [1])):
        admin.create_topics([NewTopic(name, 1, replica_assignment=[replicas],
                                      config={"min.insync.replicas": "2"})],
                            operation_timeout=20)[name].result(30)
    el.wait(lambda: {(wide, 0), (lone, 0)} <= set(_replicas(one)), "the topics' partitions")

    bad = _cli("topics", "reassign", wide, "--partition", "0", "--replicas", "2,9",
               "--bootstrap-server", one)
    assert bad.returncode == 1 and "INVALID_REPLICA_ASSIGNMENT" in bad.stderr \
        and "broker 9" in bad.stderr, bad
    idle = _cli("topics", "reassign", lone, "--partition", "0", "--cancel",
                "--bootstrap-server", one)
    assert idle.returncode == 1 and "NO_REASSIGNMENT_IN_PROGRESS" in idle.stderr, idle
    assert _replicas(one)[(wide, 0)] == [1, 2, 3] and _replicas(one)[(lone, 0)] == [1]

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": wide, "partition": 0, "replicas": [2, 3, 4]},
        {"topic": lone, "partition": 0, "replicas": [4]}]}))
    with _Writer(one, (wide, lone)) as writer:
        el.wait(lambda: min(map(len, writer.acked.values())) >= 200, "records before the move")
        moved = _cli("topics", "reassign", "--plan", str(plan), "--wait",
                     "--bootstrap-server", one)
        assert moved.returncode == 0, moved.stderr
        listed = json.loads(_cli("topics", "reassign", "--list", "--json",
                                 "--bootstrap-server", one).stdout)
        assert listed == [], listed
        # the controller said done; broker 1 describes it once it applied that too
        el.wait(lambda: (r := _replicas(one))[(wide, 0)] == [2, 3, 4] and r[(lone, 0)] == [4],
                "Metadata listing the targets")
        el.wait(lambda: not list(cluster.brokers[1].data_dir.glob("moving-*")),
              "broker 1 deleting the replicas it no longer holds")
        assert sorted(p.name for p in fourth.data_dir.glob("moving-*")) == sorted(
            [f"{wide}-0", f"{lone}-0"])
        counts = {t: len(v) for t, v in writer.acked.items()}
        el.wait(lambda: all(len(writer.acked[t]) > counts[t] + 100 for t in counts),
              "records acknowledged after the move")

        group = unique_topic("moving-group")
        _committed(one, group, wide, 150)  # __consumer_offsets now exists, RF 3
        dry = _cli("cluster", "rebalance", "--json", "--bootstrap-server", one)
        assert dry.returncode == 0 and json.loads(dry.stdout)["executed"] is False, dry
        assert _replicas(one)[(wide, 0)] == [2, 3, 4]  # a dry run moves nothing
        drained = _cli("cluster", "decommission", "2", "--json", "--bootstrap-server", one)
        assert drained.returncode == 0, drained.stderr
        report = json.loads(drained.stdout)
        spread, before = report["after"]["replicas"], report["before"]["replicas"]
        assert spread["2"] == 0 and before["2"] > 0, report
        assert sum(spread.values()) == sum(before.values()), report
        assert max(spread.values()) - min(v for k, v in spread.items() if k != "2") <= 1, report
        el.wait(lambda: all(2 not in r for r in _replicas(one).values()),
              "no replica left on broker 2")
        el.wait(lambda: not _partition_dirs(cluster.brokers[2]),
              "broker 2 deleting every partition directory")
        # decommission unregistered broker 2: fenced for good while this process
        # runs (its heartbeats re-register nothing), refused as a replica
        assert 2 not in admin.list_topics(timeout=10).brokers
        again = _cli("cluster", "unregister", "2", "--bootstrap-server", one)
        assert again.returncode == 1 and "BROKER_ID_NOT_REGISTERED" in again.stderr, again
        placed = unique_topic("on-retired")
        with pytest.raises(Exception, match="INVALID_REPLICA_ASSIGNMENT"):
            admin.create_topics([NewTopic(placed, 1, replica_assignment=[[2, 3]])],
                                operation_timeout=20)[placed].result(30)
    assert writer.failed == []
    final = _replicas(one)

    cluster.brokers[2].kill()
    cluster.brokers[2].restart()
    el.wait(lambda: 2 in admin.list_topics(timeout=10).brokers,
            "the restarted broker 2 registering again")
    el.wait(lambda: _replicas(cluster.brokers[2].bootstrap) == final,
          "the restarted broker 2 describing the same replicas")
    assert _partition_dirs(cluster.brokers[2]) == []
    assert sorted(p.name for p in fourth.data_dir.glob("moving-*")) == sorted(
        [f"{wide}-0", f"{lone}-0"])
    assert _committed(cluster.brokers[2].bootstrap, group, wide) == 150
    for name in (wide, lone):
        acked = writer.acked[name]
        assert el.read_all(fourth.bootstrap, name, 1, len(acked)) == acked


def _committed(bootstrap: str, group: str, topic: str, offset: int | None = None) -> int:
    """Commit ``offset`` for partition 0 of ``topic`` in ``group`` (if given),
    then read the group's committed offset back."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "log_level": 0})
    try:
        if offset is not None:
            consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
        [found] = consumer.committed([TopicPartition(topic, 0)], timeout=TIMEOUT_S)
        return int(found.offset)
    finally:
        consumer.close()


def _partition_dirs(broker: Broker) -> list[str]:
    return [p.name for p in broker.data_dir.iterdir()
            if p.is_dir() and not p.name.startswith("__cluster_metadata")]


def _quorum(bootstrap: str) -> tuple[list[int], list[int]]:
    """(voters, observers) of the metadata quorum (DescribeQuorum)."""
    part = el.quorum(bootstrap)
    return (sorted(v["replica_id"] for v in part["current_voters"]),
            sorted(o["replica_id"] for o in part["observers"]))


def test_a_dead_controller_is_replaced_by_a_broker_only_node(
        grown: tuple[Cluster, Broker]) -> None:
    """KIP-853: voter 3 killed -9, broker 4 (an observer of the metadata log)
    added as a voter and 3 removed through the CLI (AddRaftVoter /
    RemoveRaftVoter); then the controller is killed too and the quorum {1, 2,
    4} less it still elects and commits a new topic. Broker 3 restarted
    follows as an observer (the voter set lives in the log, not in its
    ``controller.quorum.voters``). Bad input: an unknown voter, a duplicate."""
    cluster, fourth = grown
    one = cluster.brokers[1].bootstrap
    admin = AdminClient({"bootstrap.servers": one, "log_level": 0})
    el.wait(lambda: 4 in admin.list_topics(timeout=10).brokers, "broker 4 in Metadata")
    el.wait(lambda: 4 in _quorum(one)[1], "broker 4 observing the metadata quorum")
    cluster.brokers[3].kill()
    live = cluster.brokers[2].bootstrap

    added = _cli("cluster", "add-voter", "4", "--bootstrap-server", live)
    assert added.returncode == 0, added.stderr
    removed = _cli("cluster", "remove-voter", "3", "--bootstrap-server", live)
    assert removed.returncode == 0, removed.stderr
    assert _quorum(live)[0] == [1, 2, 4]
    unknown = _cli("cluster", "remove-voter", "9", "--bootstrap-server", live)
    assert unknown.returncode == 1 and "VOTER_NOT_FOUND" in unknown.stderr, unknown
    twice = _cli("cluster", "add-voter", "1", "--bootstrap-server", live)
    assert twice.returncode == 1 and "DUPLICATE_VOTER" in twice.stderr, twice

    controller = cluster.wait_for_controller()
    cluster.brokers[controller].kill()
    el.wait(lambda: controller not in AdminClient(
        {"bootstrap.servers": fourth.bootstrap, "log_level": 0}).list_topics(timeout=10).brokers,
        "the killed controller fenced, as broker 4 describes the cluster")
    topic = unique_topic("after-replace")
    admin4 = AdminClient({"bootstrap.servers": fourth.bootstrap, "log_level": 0})
    admin4.create_topics([NewTopic(topic, 1, 2)], operation_timeout=20)[topic].result(30)
    producer = Producer({"bootstrap.servers": fourth.bootstrap, "log_level": 0})
    producer.produce(topic, b"still here", partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    assert el.read_all(fourth.bootstrap, topic, 1, 1) == [b"still here"]

    cluster.brokers[3].restart()
    survivor = fourth.bootstrap
    el.wait(lambda: 3 in _quorum(survivor)[1], "broker 3 back, as an observer")
    assert _quorum(survivor)[0] == [1, 2, 4]
