"""A node of two shards (``kcompat broker --cores 2``) with real clients (issue 35).

One supervisor process runs two broker processes on one machine: shard 0 is
broker 1 (the node's address), shard 1 is broker 1001. Clients bootstrap from
the node's address and reach both shards through Metadata. Every scenario
here puts its partitions, coordinators or schedule on both shards, and checks
that the work crossing them behaves as on one broker: each client family's
produce and consume, a consumer group and a share group over partitions of
both, a transaction writing to both, a delayed record scheduled on one shard
for a partition of the other, and a kill -9 of a shard under load (the
supervisor restarts it; nothing acknowledged is lost). Then a cluster of three
such machines at replication factor 3: every partition's replicas on three
machines, and a kill -9 of a shard under load fails its partitions over to the
other machines with nothing acknowledged lost.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kcompat.broker.controller.internal_topics import partition_for

from ._broker import REPO_ROOT, Broker, unique_topic
from ._deployment import Deployment
from ._eos import EOS_CLUSTER_RECORDS, read_confluent, run_exactly_once
from ._groups import (
    TIMEOUT_S,
    BackgroundProducer,
    clean_leave_scenario,
    create_topic,
    unique_group,
    wait_for,
)
from ._shards import (
    SHARD_IDS,
    free_run,
    node_brokers,
    running_node,
    shard_pids,
    start_machines,
)
from ._share import modulo_problems, run_modulo

pytestmark = pytest.mark.timeout(240)

SCHEDULE_TOPIC = "__kc_schedule"
CROSSING_NAMES = 10  # topic names tried for a partition scheduled on the other shard (1/16 each)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    with running_node(tmp_path_factory.mktemp("shards")) as b:
        yield b


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return {p: m.leader for p, m in md.topics[topic].partitions.items()}


def test_the_node_is_one_machine_of_two_shards(node: Broker) -> None:
    out = subprocess.run([sys.executable, "-m", "kcompat", "cluster", "info", "--json",
                          "--bootstrap-server", node.bootstrap], capture_output=True,
                         text=True, timeout=60, cwd=REPO_ROOT, check=True).stdout
    brokers = {b["node_id"]: b for b in json.loads(out)["brokers"]}
    assert set(brokers) == set(SHARD_IDS), out
    assert {(b["machine"], b["shard"]) for b in brokers.values()} == {("1", 0), ("1", 1)}, out
    assert brokers[1]["port"] == node.port and brokers[1001]["port"] == node.port + 1, out
    assert (node.data_dir.parent / "data-shard1").is_dir()


def test_a_shard_that_cannot_start_stops_the_node(tmp_path: Path) -> None:
    """Shard 1's port is taken: the node does not run half-started, it exits
    with an error naming the shard."""
    port = free_run(2)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port + 1))
        taken.listen()
        out = subprocess.run([sys.executable, "-m", "kcompat", "broker", "--cores", "2",
                              "--port", str(port), "--admin-port", "-1",
                              "--data-dir", str(tmp_path / "data")],
                             capture_output=True, text=True, timeout=90, cwd=REPO_ROOT)
    assert out.returncode != 0, out.stderr[-2000:]
    assert "shard 1 (node 1001) exited with code" in out.stderr, out.stderr[-2000:]
    assert "kcompat broker ready on" not in out.stderr


def test_no_two_replicas_of_a_partition_share_the_machine(node: Broker) -> None:
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    name = unique_topic("rf2")
    with pytest.raises(KafkaException) as caught:
        admin.create_topics([NewTopic(name, 2, 2)])[name].result(timeout=TIMEOUT_S)
    assert caught.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR


def _produce_consume(client: str, bootstrap: str, topic: str, n: int) -> list[tuple[int, bytes]]:
    """Produce ``n`` keyed records round the topic's 4 partitions with ``client``,
    read them back with it; (partition, value) of what it read."""
    values = [(i % 4, b"%s-%d" % (client.encode(), i)) for i in range(n)]
    if client == "confluent":
        p = Producer({"bootstrap.servers": bootstrap})
        for part, v in values:
            p.produce(topic, value=v, key=v, partition=part)
        assert p.flush(TIMEOUT_S) == 0
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_group(),
                      "auto.offset.reset": "earliest"})
        c.assign([TopicPartition(topic, part, 0) for part in range(4)])
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < n and time.monotonic() < deadline:
            for m in c.consume(100, 0.5):
                if m.error() is None:
                    got.append((m.partition(), m.value()))
        c.close()
        return got
    if client == "kafka-python":
        from kafka import KafkaConsumer, KafkaProducer
        from kafka import TopicPartition as KTP

        kp = KafkaProducer(bootstrap_servers=bootstrap)
        for part, v in values:
            kp.send(topic, value=v, key=v, partition=part)
        kp.flush(TIMEOUT_S)
        kp.close()
        kc = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                           consumer_timeout_ms=5000)
        kc.assign([KTP(topic, part) for part in range(4)])
        got = [(r.partition, r.value) for r in kc]
        kc.close()
        return got
    if client == "aiokafka":
        return asyncio.run(_aiokafka(bootstrap, topic, values))
    assert client == "kcat"
    for part in range(4):
        mine = "".join(f"{v.decode()}\n" for p, v in values if p == part)
        subprocess.run(["kcat", "-P", "-b", bootstrap, "-t", topic, "-p", str(part)],
                       input=mine, text=True, check=True, timeout=60)
    out = subprocess.run(["kcat", "-C", "-b", bootstrap, "-t", topic, "-e", "-o", "beginning",
                          "-f", "%p:%s\n"], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    return [(int(p), v.encode()) for p, _, v in (line.partition(":") for line in out.split())]


async def _aiokafka(bootstrap: str, topic: str, values: list[tuple[int, bytes]]
                    ) -> list[tuple[int, bytes]]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATP

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for part, v in values:
            await producer.send(topic, value=v, key=v, partition=part)
        await producer.flush()
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    got: list[tuple[int, bytes]] = []
    try:
        consumer.assign([ATP(topic, part) for part in range(4)])
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < len(values) and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            got += [(r.partition, r.value) for rs in batches.values() for r in rs]
    finally:
        await consumer.stop()
    return got


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka", "kcat"])
def test_each_client_family_produces_and_consumes_over_both_shards(
        node: Broker, client: str) -> None:
    topic = unique_topic(f"shards-{client}")
    create_topic(node.bootstrap, topic, 4)
    assert set(leaders(node.bootstrap, topic).values()) == set(SHARD_IDS)
    n = 200
    got = _produce_consume(client, node.bootstrap, topic, n)
    want = sorted((i % 4, b"%s-%d" % (client.encode(), i)) for i in range(n))
    assert sorted(got) == want, f"{client}: read {len(got)} of {n}"


def test_a_consumer_group_spans_shards(node: Broker, tmp_path: Path) -> None:
    """Two members over 6 partitions led by both shards, the group coordinated
    by one of them; one leaves cleanly: nothing lost or doubled."""
    clean_leave_scenario("confluent", Deployment.single(node), tmp_path)


def test_a_share_group_spans_shards(node: Broker, tmp_path: Path) -> None:
    topic, group = unique_topic("shares"), unique_group("share")
    ledger = run_modulo(node.bootstrap, topic, group, tmp_path, replication=1,
                        configs={"share.auto.offset.reset": "earliest"})
    assert set(leaders(node.bootstrap, topic).values()) == set(SHARD_IDS)
    problems = modulo_problems(ledger)
    assert not problems, "\n".join(problems[:20])


def test_a_transaction_spans_shards(node: Broker, tmp_path: Path) -> None:
    """The exactly-once copy (consume, produce and commit offsets in one
    transaction, every tenth aborted) over 4 partitions led by both shards."""
    run_exactly_once("confluent", Deployment.single(node), tmp_path, read_confluent,
                     total=EOS_CLUSTER_RECORDS, partitions=4, kill=False)


def test_a_delayed_record_is_scheduled_on_the_other_shard(node: Broker) -> None:
    p = Producer({"bootstrap.servers": node.bootstrap})
    # A target partition's schedule partition follows from a hash of the
    # topic's name: with 4 partitions, every one of them has its schedule on
    # its own shard for one name in 16 (a CI run drew one). Another name then.
    for _name in range(CROSSING_NAMES):
        topic = unique_topic("shards-delayed")
        create_topic(node.bootstrap, topic, 4)
        p.produce(topic, value=b"first", partition=0, headers=[("kc-delay-ms", b"1")])
        assert p.flush(TIMEOUT_S) == 0  # the schedule topic exists from here on
        targets = leaders(node.bootstrap, topic)
        schedule = leaders(node.bootstrap, SCHEDULE_TOPIC)
        crossing = [part for part, leader in targets.items()
                    if schedule[partition_for(f"{topic}-{part}", len(schedule))] != leader]
        if crossing:
            break
    assert crossing, f"every partition's schedule is on its own shard: {targets} {schedule}"
    part = crossing[0]
    sent_ms = time.time() * 1000
    for i in range(20):
        p.produce(topic, value=b"late-%d" % i, partition=part,
                  headers=[("kc-delay-ms", b"1500")])
    assert p.flush(TIMEOUT_S) == 0
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": unique_group(),
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, part, 0)])
    seen: list[tuple[bytes, int]] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(seen) < 20 and time.monotonic() < deadline:
        for m in c.consume(100, 0.5):
            if m.error() is None and m.value().startswith(b"late-"):
                seen.append((m.value(), int(time.time() * 1000)))
    c.close()
    assert sorted(v for v, _ in seen) == sorted(b"late-%d" % i for i in range(20)), seen
    assert min(at for _, at in seen) >= sent_ms + 1500


def kill_shard_under_load(victim: Broker, bootstrap: str, topic: str, partitions: int
                          ) -> list[bytes]:
    """kill -9 shard 1 of ``victim`` once a third of 3,000 records are sent to
    ``topic``; once the supervisor restarted it and the producer is done, the
    acknowledged records not found where they were acknowledged."""
    before = shard_pids(victim)
    prod = BackgroundProducer(bootstrap, topic, partitions, 3000, rate=600)
    prod.start()
    wait_for(lambda: prod.sent >= 1000, 30, "the producer never sent 1000 records")
    subprocess.run(["kill", "-9", str(before[1])], check=True)
    wait_for(lambda: shard_pids(victim).get(1, before[1]) != before[1], 30,
             f"the supervisor on {victim.bootstrap} never restarted shard 1")
    acked = prod.finish()
    wait_for(lambda: len(node_brokers(bootstrap)) >= len(SHARD_IDS), 30,
             "the restarted shard never came back into Metadata")
    stored = read_confluent(bootstrap, topic, partitions, False, prod.end_offsets())
    at = {(r.partition, r.offset): r.value for rows in stored.values() for r in rows}
    assert shard_pids(victim)[0] == before[0], "shard 0 restarted too"
    return [v for v, where in acked.items() if at.get(where) != v]


def test_kill_9_of_a_shard_under_load_loses_nothing(node: Broker) -> None:
    topic = unique_topic("shards-kill")
    create_topic(node.bootstrap, topic, 4)
    lost = kill_shard_under_load(node, node.bootstrap, topic, 4)
    assert not lost, f"{len(lost)} acknowledged records not where they were acknowledged"
    wait_for(lambda: node_brokers(node.bootstrap) == set(SHARD_IDS), 30,
             "the restarted shard never came back into Metadata")


@pytest.fixture(scope="module")
def machines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Broker]]:
    ms = start_machines(tmp_path_factory.mktemp("machines"))
    try:
        yield ms
    finally:
        for m in ms:
            m.kill()


def test_three_machines_of_two_shards_keep_each_partition_on_three_machines(
        machines: list[Broker]) -> None:
    bootstrap = ",".join(m.bootstrap for m in machines)
    topic = unique_topic("machines")
    create_topic(bootstrap, topic, 12, 3)
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    parts = md.topics[topic].partitions
    for p, meta in parts.items():
        assert len({node % 1000 for node in meta.replicas}) == 3, (p, meta.replicas)
    assert {meta.leader for meta in parts.values()} == {1, 2, 3, 1001, 1002, 1003}

    # machine 2: kill -9 its shard 1 (node 1002) under load
    lost = kill_shard_under_load(machines[1], bootstrap, topic, 12)
    assert not lost, f"{len(lost)} acknowledged records not where they were acknowledged"
