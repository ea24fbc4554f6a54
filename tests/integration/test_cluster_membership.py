"""Broker lifecycle in cluster mode (3 real broker processes): registration,
heartbeats and fencing; live brokers in Metadata / DescribeCluster and in replica
placement; auto-creation through a non-controller; lazy internal topics;
controlled shutdown on SIGTERM; a restarted broker that never describes a stale
cluster. Real clients (confluent-kafka, and kafka-python's codec for raw
per-broker Metadata requests where the answer of one exact broker matters)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka.protocol.admin import DescribeClusterRequest, DescribeClusterResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from compat_tests._broker import unique_topic
from compat_tests._cluster import Cluster, diagnostics
from tests.integration._raw import RawConnection

# Short broker sessions so that fencing after a kill -9 is quick.
FAST_SESSIONS = ("--set", "broker.session.timeout.ms=2000",
                 "--set", "broker.heartbeat.interval.ms=500")
LEADER_NOT_AVAILABLE = 5


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, extra_args=FAST_SESSIONS)
    try:
        yield c.start()
    finally:
        c.close()


# -- helpers --------------------------------------------------------------------------------


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3000,
                        "log_level": 0})


def _raw_metadata(bootstrap: str, topics: list[str] | None = None,
                  auto_create: bool = False) -> dict[str, Any]:
    """Metadata v12 from exactly the broker at ``bootstrap`` (no client routing)."""
    req_topics = None if topics is None else [
        MetadataRequest[12].MetadataRequestTopic(topic_id=None, name=t) for t in topics]
    conn = RawConnection(bootstrap, timeout=15.0)
    try:
        answer: dict[str, Any] = conn.request(MetadataRequest[12](
            topics=req_topics, allow_auto_topic_creation=auto_create,
            include_topic_authorized_operations=False), MetadataResponse[12]).to_dict()
        return answer
    finally:
        conn.close()


def _raw_describe_cluster(bootstrap: str) -> dict[str, Any]:
    conn = RawConnection(bootstrap, timeout=15.0)
    try:
        answer: dict[str, Any] = conn.request(
            DescribeClusterRequest[0](include_cluster_authorized_operations=False),
            DescribeClusterResponse[0]).to_dict()
        return answer
    finally:
        conn.close()


def _listed(cluster: Cluster, node: int) -> dict[str, set[int]]:
    """Which brokers broker ``node`` lists: raw Metadata and DescribeCluster sent
    to exactly that broker, and confluent list_topics() / describe_cluster() from a
    client bootstrapped at it alone."""
    bootstrap = cluster.brokers[node].bootstrap
    admin = _admin(bootstrap)
    return {
        "raw_metadata": {b["node_id"] for b in _raw_metadata(bootstrap)["brokers"]},
        "raw_describe_cluster": {b["broker_id"] for b in
                                 _raw_describe_cluster(bootstrap)["brokers"]},
        "list_topics": set(admin.list_topics(timeout=5).brokers),
        "describe_cluster": {n.id for n in
                             admin.describe_cluster(request_timeout=5).result(timeout=10).nodes},
    }


def _wait_listed(cluster: Cluster, expected: set[int], timeout_s: float = 15.0) -> float:
    """Poll every running broker until all of them list exactly ``expected``
    in Metadata and DescribeCluster; the seconds it took."""
    start = time.monotonic()
    deadline = start + timeout_s
    seen: dict[int, Any] = {}
    while True:
        seen = {}
        for node, broker in cluster.brokers.items():
            if not broker.running:
                continue
            try:
                seen[node] = _listed(cluster, node)
            except Exception as e:  # noqa: BLE001 - a broker may be busy; keep polling
                seen[node] = repr(e)
        if all(isinstance(v, dict) and all(ids == expected for ids in v.values())
               for v in seen.values()):
            return time.monotonic() - start
        assert time.monotonic() < deadline, (
            f"after {timeout_s:.0f} s the brokers do not list exactly {sorted(expected)}: {seen}")
        time.sleep(0.25)


def _wait_led_by(cluster: Cluster, node: int, topic: str, live: set[int],
                 timeout_s: float) -> None:
    """Until broker ``node`` names a live leader for every partition of ``topic``."""
    deadline = time.monotonic() + timeout_s
    while True:
        parts = _raw_metadata(cluster.brokers[node].bootstrap, [topic])["topics"][0]["partitions"]
        if parts and all(p["leader_id"] in live for p in parts):
            return
        assert time.monotonic() < deadline, (node, parts)
        time.sleep(0.1)


def _wait_fenced(cluster: Cluster, victim: int, timeout_s: float = 15.0) -> None:
    """Until no running broker lists ``victim`` in DescribeCluster (which, unlike
    Metadata, names no partition leaders): its fencing is committed."""
    deadline = time.monotonic() + timeout_s
    while True:
        listed = {n: {b["broker_id"] for b in _raw_describe_cluster(b.bootstrap)["brokers"]}
                  for n, b in cluster.brokers.items() if b.running}
        if not any(victim in ids for ids in listed.values()):
            return
        assert time.monotonic() < deadline, f"broker {victim} still listed: {listed}"
        time.sleep(0.2)


def _create(bootstrap: str, topic: str, partitions: int, replication: int) -> None:
    admin = _admin(bootstrap)  # keep it alive until the future resolves
    futures = admin.create_topics([NewTopic(topic, partitions, replication)],
                                  operation_timeout=20, request_timeout=20)
    futures[topic].result(timeout=30)


def _replicas(bootstrap: str, topic: str) -> dict[int, list[int]]:
    md = _admin(bootstrap).list_topics(topic, timeout=5)
    return {p.id: list(p.replicas) for p in md.topics[topic].partitions.values()}


def _non_controller(cluster: Cluster) -> int:
    controller = cluster.wait_for_controller()
    return next(n for n in sorted(cluster.brokers) if n != controller)


def _produce(producer: Producer, topic: str, values: list[bytes],
             partition: int | None = None) -> tuple[set[bytes], list[str]]:
    acked: set[bytes] = set()
    failed: list[str] = []

    def report(err, msg):  # type: ignore[no-untyped-def]
        if err is None:
            acked.add(msg.value())
        else:
            failed.append(str(err))

    for value in values:
        if partition is None:
            producer.produce(topic, value, on_delivery=report)
        else:
            producer.produce(topic, value, partition=partition, on_delivery=report)
        producer.poll(0)
    producer.flush(30)
    return acked, failed


# -- 1. fencing after kill -9, placement on live brokers, re-registration ----------------------


def test_killed_broker_is_fenced_and_replicas_go_to_live_brokers(cluster: Cluster) -> None:
    everyone = set(cluster.brokers)
    _wait_listed(cluster, everyone, timeout_s=10)
    before = unique_topic("pre")
    cluster.create_topic(before, 3, 3)  # partitions led by the victim too: re-elected
    victim = _non_controller(cluster)
    live = everyone - {victim}
    live_bootstrap = ",".join(cluster.brokers[n].bootstrap for n in sorted(live))

    cluster.brokers[victim].kill()
    took = _wait_listed(cluster, live, timeout_s=15)
    print(f"broker {victim} (kill -9) unlisted by every live broker after {took:.2f} s")
    for node in sorted(live):  # its replicas are reported offline at once
        parts = _raw_metadata(cluster.brokers[node].bootstrap, [before])["topics"][0]["partitions"]
        assert len(parts) == 3, (node, parts)
        for p in parts:
            assert p["offline_replicas"] == [victim], (node, p)
            # never the fenced broker as leader; a partition it led may still be
            # electing (its Raft group, not the fencing, picks the next leader):
            # LEADER_NOT_AVAILABLE meanwhile, which clients retry
            assert p["leader_id"] != victim, (node, p)
            if p["leader_id"] < 0:
                assert p["error_code"] == 5, (node, p)
    for node in sorted(live):  # and its partitions' leaders move to live brokers
        _wait_led_by(cluster, node, before, live, timeout_s=15)

    rf3 = unique_topic("rf3-down")
    with pytest.raises(KafkaException) as failure:
        _create(live_bootstrap, rf3, 3, 3)
    err = failure.value.args[0]
    assert err.code() == KafkaError.INVALID_REPLICATION_FACTOR, err
    # Kafka (KRaft) says "... because only 2 broker(s) are registered."; the
    # count of live brokers must be the one named either way.
    assert re.search(r"\b2\b", err.str()) and "broker" in err.str(), err.str()
    assert rf3 not in _admin(live_bootstrap).list_topics(timeout=5).topics

    rf2 = unique_topic("rf2-down")
    _create(live_bootstrap, rf2, 6, 2)
    cluster.wait_for_leaders(rf2, 6, exclude=victim)
    placed = _replicas(live_bootstrap, rf2)
    assert len(placed) == 6
    for p, replicas in placed.items():
        assert len(replicas) == 2 and set(replicas) <= live, (p, replicas, "live", live)
    # CreatePartitions places the new partitions on live brokers too.
    admin = _admin(live_bootstrap)
    admin.create_partitions([NewPartitions(rf2, 8)],
                            operation_timeout=20, request_timeout=20)[rf2].result(timeout=30)
    cluster.wait_for_leaders(rf2, 8, exclude=victim)
    placed = _replicas(live_bootstrap, rf2)
    assert len(placed) == 8
    assert all(len(r) == 2 and set(r) <= live for r in placed.values()), placed

    cluster.brokers[victim].start()
    took = _wait_listed(cluster, everyone, timeout_s=15)
    print(f"broker {victim} listed again by every broker {took:.2f} s after its restart")
    rf3_again = unique_topic("rf3-up")
    _create(cluster.bootstrap, rf3_again, 3, 3)
    cluster.wait_for_leaders(rf3_again, 3)
    placed = _replicas(cluster.bootstrap, rf3_again)
    assert all(sorted(r) == sorted(everyone) for r in placed.values()), placed


def test_leaderless_partition_does_not_name_the_dead_broker(cluster: Cluster) -> None:
    """RF 2 partitions whose leader is killed -9 cannot elect another (no Raft
    majority left). Within a bounded wait, no live broker — in particular the
    one that is not a replica of the partition — may go on naming the fenced,
    dead broker as the leader (clients would be sent to it) nor, therefore, list
    it among the brokers: LEADER_NOT_AVAILABLE (leader -1) is the honest answer."""
    with diagnostics(cluster):  # its brokers' logs if it fails (a CreateTopics timed out once)
        controller = cluster.wait_for_controller()
        topic = unique_topic("rf2-leaderless")
        cluster.create_topic(topic, 6, 2)
        leaders = cluster.wait_for_leaders(topic, 6)
        victim = sorted(set(leaders.values()), key=lambda n: (n == controller, n))[0]
        led = sorted(p for p, ldr in leaders.items() if ldr == victim)
        live = set(cluster.brokers) - {victim}

        cluster.brokers[victim].kill()
        _wait_fenced(cluster, victim)
        deadline = time.monotonic() + 10
        while True:
            seen = {}
            for node in sorted(live):
                md = _raw_metadata(cluster.brokers[node].bootstrap, [topic])
                parts = {p["partition_index"]: (p["leader_id"], p["error_code"], p["replica_nodes"])
                         for p in md["topics"][0]["partitions"]}
                seen[node] = ({b["node_id"] for b in md["brokers"]}, {p: parts[p] for p in led})
            if all(victim not in brokers and all(v[0] != victim for v in parts.values())
                   for brokers, parts in seen.values()):
                break
            assert time.monotonic() < deadline, (
                f"broker {victim} (kill -9, fenced) still named leader / listed: "
                f"{{node: (brokers, {{partition: (leader, error, replicas)}})}} = {seen}")
            time.sleep(0.2)


# -- 2. auto-creation through a non-controller broker --------------------------------------------


def test_auto_creation_through_a_non_controller(tmp_path: Path) -> None:
    c = Cluster(tmp_path, extra_args=(*FAST_SESSIONS, "--set", "num.partitions=3"))
    try:
        c.start()
        other = _non_controller(c)
        at = c.brokers[other].bootstrap

        # Exactly this broker is asked (raw Metadata, allow_auto_topic_creation):
        # LEADER_NOT_AVAILABLE while the controller creates it, then the topic.
        raw_topic = unique_topic("auto-raw")
        deadline = time.monotonic() + 15
        codes: list[int] = []
        while True:
            answer = _raw_metadata(at, [raw_topic], auto_create=True)["topics"][0]
            codes.append(answer["error_code"])
            if answer["error_code"] == 0 and len(answer["partitions"]) == 3 and all(
                    p["leader_id"] >= 0 for p in answer["partitions"]):
                break
            assert answer["error_code"] in (0, LEADER_NOT_AVAILABLE), answer
            assert time.monotonic() < deadline, f"{raw_topic} never created: {answer}"
            time.sleep(0.2)
        print(f"raw Metadata at non-controller {other}: error codes {codes}")
        assert all(len(p["replica_nodes"]) == 3 for p in answer["partitions"]), answer

        # A real producer bootstrapped only at that broker.
        topic = unique_topic("auto-producer")
        producer = Producer({"bootstrap.servers": at, "acks": "all",
                             "message.timeout.ms": 20000, "log_level": 0})
        acked, failed = _produce(producer, topic, [f"v{i}".encode() for i in range(30)])
        assert not failed and len(acked) == 30, (failed[:3], len(acked))
        for node, broker in c.brokers.items():
            md = _admin(broker.bootstrap).list_topics(topic, timeout=5).topics[topic]
            assert md.error is None, (node, md.error)
            assert sorted(md.partitions) == [0, 1, 2], (node, md.partitions)
            assert all(len(p.replicas) == 3 for p in md.partitions.values()), node
    finally:
        c.close()


# -- 3. lazy internal topics -----------------------------------------------------------------


def test_internal_topics_are_created_on_first_use(tmp_path: Path) -> None:
    offsets_partitions = 5
    c = Cluster(tmp_path, extra_args=(
        *FAST_SESSIONS, "--set", f"offsets.topic.num.partitions={offsets_partitions}",
        "--set", "group.initial.rebalance.delay.ms=0"))
    try:
        c.start()
        topic = unique_topic("lazy")
        c.create_topic(topic, 2, 3)
        producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "log_level": 0})
        acked, failed = _produce(producer, topic, [f"m{i}".encode() for i in range(20)],
                                 partition=0)
        assert len(acked) == 20 and not failed, failed[:3]

        # No consumer group used yet: no broker knows an internal topic.
        for node, broker in c.brokers.items():
            names = {t["name"] for t in _raw_metadata(broker.bootstrap)["topics"]}
            assert names == {topic}, (node, names)
            names = set(_admin(broker.bootstrap).list_topics(timeout=5).topics)
            assert "__consumer_offsets" not in names, (node, names)

        group = unique_topic("lazy-group")
        config = {"bootstrap.servers": c.bootstrap, "group.id": group,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "session.timeout.ms": 6000, "log_level": 0}
        consumer = Consumer(config)
        consumer.subscribe([topic])
        seen = 0
        last: Any = None
        deadline = time.monotonic() + 45
        while seen < 12:
            assert time.monotonic() < deadline, f"consumed only {seen} records"
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen += 1
                last = msg
        commit = [TopicPartition(topic, last.partition(), last.offset() + 1)]
        consumer.commit(offsets=commit, asynchronous=False)
        got = consumer.committed([TopicPartition(topic, 0)], timeout=20)
        assert got[0].offset == last.offset() + 1, got
        consumer.close()

        # A new member of the group reads the committed offset back.
        reader = Consumer(config)
        got = reader.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=20)
        reader.close()
        assert [tp.offset for tp in got] == [last.offset() + 1, -1001], got  # -1001: none

        for node, broker in c.brokers.items():
            md = _admin(broker.bootstrap).list_topics(timeout=5).topics
            assert "__consumer_offsets" in md, (node, sorted(md))
            offsets = md["__consumer_offsets"]
            assert sorted(offsets.partitions) == list(range(offsets_partitions)), node
            assert all(len(p.replicas) == 3 for p in offsets.partitions.values()), node
            # Only what was used: no transaction coordinator was asked for.
            assert "__transaction_state" not in md, (node, sorted(md))
    finally:
        c.close()


# -- 4. controlled shutdown --------------------------------------------------------------------


def test_sigterm_moves_leadership_before_exit(tmp_path: Path) -> None:
    """Default broker sessions (9 s) and a long Raft election timeout (4 s):
    leaders seen right after the exit and the broker's disappearance from the
    broker list can only come from the controlled shutdown, not from an
    election or a session expiry."""
    partitions = 6
    c = Cluster(tmp_path, extra_args=("--set", "kcompat.raft.election.timeout.ms=4000",
                                      "--set", "auto.leader.rebalance.enable=false"))
    try:
        c.start()
        controller = c.wait_for_controller()
        topic = unique_topic("ctrl-shutdown")
        c.create_topic(topic, partitions, 3)
        leaders = c.wait_for_leaders(topic, partitions)
        # Preferably not the controller (a metadata leader change on top), if
        # the elections left a non-controller leading something.
        candidates = sorted(set(leaders.values()), key=lambda n: (n == controller, n))
        victim = candidates[0]
        led = sorted(p for p, ldr in leaders.items() if ldr == victim)
        survivor = next(n for n in sorted(c.brokers) if n != victim)
        at = c.brokers[survivor].bootstrap

        producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all",
                             "linger.ms": 2, "message.timeout.ms": 30000, "log_level": 0})
        acked: set[bytes] = set()
        failed: list[str] = []

        def report(err, msg):  # type: ignore[no-untyped-def]
            if err is None:
                acked.add(msg.value())
            else:
                failed.append(str(err))

        stop = threading.Event()
        sent: list[bytes] = []

        def keep_producing() -> None:
            i = 0
            while not stop.is_set():
                value = f"r{i}".encode()
                producer.produce(topic, value, partition=i % partitions, on_delivery=report)
                sent.append(value)
                producer.poll(0)
                i += 1
                time.sleep(0.005)

        writer = threading.Thread(target=keep_producing, daemon=True)
        writer.start()
        time.sleep(1.0)

        log_start = c.brokers[victim].log_size()
        sigterm_at = time.monotonic()
        rc = c.brokers[victim].stop(timeout=20)
        exited_at = time.monotonic()
        after = c.leaders(topic, _admin(at))
        answered_at = time.monotonic()
        print(f"broker {victim} (leader of {led}) exited {exited_at - sigterm_at:.2f} s after "
              f"SIGTERM with code {rc}; Metadata at {survivor} "
              f"{answered_at - exited_at:.2f} s later: {after}")
        assert len(after) == partitions, after
        assert all(ldr >= 0 and ldr != victim for ldr in after.values()), (
            f"leaders right after broker {victim} exited: {after}")
        with open(c.brokers[victim].log_path, "rb") as f:
            f.seek(log_start)
            shutdown_log = f.read().decode("utf-8", "replace")
        assert "still leading some groups" not in shutdown_log, shutdown_log[-3000:]

        # It asked to be fenced: unlisted well before its 9 s session would expire.
        deadline = exited_at + 3.0
        while True:
            listed = _listed(c, survivor)
            if all(ids == set(c.brokers) - {victim} for ids in listed.values()):
                break
            assert time.monotonic() < deadline, f"{victim} still listed: {listed}"
            time.sleep(0.1)

        time.sleep(1.0)  # keep producing after the exit
        stop.set()
        writer.join(10)
        assert producer.flush(40) == 0, "records still in flight"
        assert not failed, f"{len(failed)} of {len(sent)} failed: {failed[:3]}"
        assert acked == set(sent) and len(sent) > 100, (len(acked), len(sent))
    finally:
        c.close()


# -- 5. a restarted broker describes the whole cluster ----------------------------------------------


@pytest.mark.parametrize("restart", ["non-controller", "controller"])
def test_restarted_broker_answers_metadata_with_every_topic(cluster: Cluster,
                                                            restart: str) -> None:
    expected: dict[str, int] = {}  # topic -> partitions
    replication: dict[str, int] = {}
    for i, (partitions, rf) in enumerate(((1, 2), (3, 3), (4, 3), (6, 3))):
        name = unique_topic(f"before-{i}")
        cluster.create_topic(name, partitions, rf)
        expected[name], replication[name] = partitions, rf
    controller = cluster.wait_for_controller()
    victim = controller if restart == "controller" else _non_controller(cluster)
    cluster.brokers[victim].kill()
    live_bootstrap = cluster.live_bootstrap()
    _wait_fenced(cluster, victim)
    # Metadata changes the victim missed while it was down.
    for i, partitions in enumerate((2, 5)):
        name = unique_topic(f"during-{i}")
        _create(live_bootstrap, name, partitions, 2)
        expected[name], replication[name] = partitions, 2
    grown = next(iter(expected))  # RF 2: can grow while a broker is down
    admin = _admin(live_bootstrap)  # keep it alive until the future resolves
    admin.create_partitions(
        [NewPartitions(grown, 3)], operation_timeout=20, request_timeout=20)[grown].result(30)
    expected[grown] = 3

    at = cluster.brokers[victim].bootstrap
    cluster.brokers[victim].start()
    started_at = time.monotonic()
    raw = _raw_metadata(at)  # exactly this broker, at once
    raw_s = time.monotonic() - started_at
    md = _admin(at).list_topics(timeout=10)  # a client bootstrapped at it alone
    print(f"restarted broker {victim} answered Metadata {raw_s:.2f} s after its start")

    got = {t["name"]: sorted(p["partition_index"] for p in t["partitions"])
           for t in raw["topics"] if t["error_code"] == 0}
    assert got == {n: list(range(k)) for n, k in expected.items()}, raw["topics"]
    assert {b["node_id"] for b in raw["brokers"]} == set(cluster.brokers), raw["brokers"]
    for t in raw["topics"]:
        for p in t["partitions"]:
            assert len(p["replica_nodes"]) == replication[t["name"]], (t["name"], p)
    listed = {name: sorted(t.partitions) for name, t in md.topics.items() if t.error is None}
    assert listed == {n: list(range(k)) for n, k in expected.items()}, md.topics

    # Partition leaders it may learn a moment later (LEADER_NOT_AVAILABLE is
    # retriable), but within a bounded wait it names a live leader for every one.
    deadline = time.monotonic() + 5
    while True:
        raw = _raw_metadata(at, list(expected))
        leaderless = [(t["name"], p["partition_index"]) for t in raw["topics"]
                      for p in t["partitions"] if p["leader_id"] < 0]
        if not leaderless and len(raw["topics"]) == len(expected):
            break
        assert time.monotonic() < deadline, f"restarted broker {victim}: no leader {leaderless}"
        time.sleep(0.1)
    print(f"restarted broker {victim} named every leader {time.monotonic() - started_at:.2f} s "
          f"after its start")
