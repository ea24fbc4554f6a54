"""Kafka's own administration tools (the kafka-tools 4.4 jar, unmodified main classes)
against kcompat, and the admin clients of kafka-python and confluent-kafka for the
same APIs (issue 18 item 5).

The tools run several per JVM (``_toolbatch``): on a single broker ``kafka-topics``
(create, list, describe, alter --partitions, delete), ``kafka-configs`` (topic
configs, client quotas of users, clients and ips), ``kafka-metadata-quorum``
(describe --status / --replication), ``kafka-log-dirs`` and
``kafka-consumer-groups`` (list, describe with lag, reset-offsets --to-earliest
--execute, delete); on a 3-broker cluster whose automatic leader rebalance is off,
after a restart moved two leaders off their preferred replica, confluent-kafka's
``elect_leaders`` for one and ``kafka-leader-election --election-type preferred
--all-topic-partitions`` for the rest, then ``kafka-topics --describe``,
``kafka-metadata-quorum`` (asked of a broker that is not the controller),
``kafka-log-dirs`` of every broker and ``kafka-reassign-partitions`` (--generate,
--execute of an RF-2 and an RF-1 partition onto other brokers, --list, --verify until
complete, which clears the throttles); quotas set through one broker, before and after
the restart, are described alike by all three. Each test asserts what the tools
printed: sizes, lags, offsets, leaders, voters, quota values, replica assignments.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ElectionType
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewTopic as CkNewTopic
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata
from kio.schema.alter_client_quotas.v1 import request as acq
from kio.schema.describe_client_quotas.v1 import request as dcq
from kio.static.primitive import f64, i8

from compat_tests._broker import Broker
from compat_tests._cluster import Cluster
from compat_tests.java._toolbatch import (
    CONFIGS,
    GROUPS,
    LEADER_ELECTION,
    LOG_DIRS,
    METADATA_QUORUM,
    REASSIGN,
    TOPICS,
    ToolRun,
    run_tools,
    until,
)
from kcompat.cli._kio import Connection

pytestmark = pytest.mark.timeout(180)

PER_PARTITION = 10
COMMITTED = 4
#: at least the value bytes _produce writes to each partition (the log adds headers)
VALUE_BYTES = sum(len(f"p0-{i}") * 20 for i in range(PER_PARTITION))


def _ok(run: ToolRun) -> str:
    assert run.code == 0, run.explain()
    return run.stdout


def _describe_rows(text: str) -> dict[int, dict[str, str]]:
    """kafka-topics --describe partition lines -> {partition: {Leader: .., Replicas: ..}}."""
    rows = {}
    for line in text.splitlines():
        if "\tPartition: " in line:
            fields = dict(re.findall(r"(\w+): ([^\t]*)", line))
            rows[int(fields["Partition"])] = fields
    return rows


def _log_dirs(text: str) -> dict:
    doc = next(line for line in text.splitlines() if line.startswith("{"))
    return json.loads(doc)


def _group_rows(text: str) -> dict[int, dict[str, str]]:
    lines = [ln.split() for ln in text.splitlines() if ln.strip()]
    head = next(i for i, ln in enumerate(lines) if ln[:2] == ["GROUP", "TOPIC"])
    header = lines[head]
    return {int(r[2]): dict(zip(header, r, strict=False)) for r in lines[head + 1:]
            if len(r) >= 6 and r[0] != "GROUP"}


def _produce(bootstrap: str, topic: str, partitions: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    futures = [producer.send(topic, value=f"p{p}-{i}".encode() * 20, partition=p)
               for p in range(partitions) for i in range(PER_PARTITION)]
    producer.flush()
    for f in futures:
        f.get(timeout=30)
    producer.close()


def _commit(bootstrap: str, group: str, topic: str, partitions: int) -> None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                             enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.commit({tp: OffsetAndMetadata(COMMITTED, None, -1) for tp in tps})
    consumer.close()


def test_tools_on_one_broker(module_broker: Broker) -> None:
    b = module_broker.bootstrap
    topic, group = "tools-topic", "tools-group"
    server = ["--bootstrap-server", b]
    first = run_tools([
        [TOPICS, *server, "--create", "--topic", topic, "--partitions", "2",
         "--replication-factor", "1"],
        [TOPICS, *server, "--alter", "--topic", topic, "--partitions", "3"],
        [TOPICS, *server, "--list"],
        [TOPICS, *server, "--describe", "--topic", topic],
        [CONFIGS, *server, "--alter", "--entity-type", "topics", "--entity-name", topic,
         "--add-config", "retention.ms=86400000,max.message.bytes=200000"],
        [CONFIGS, *server, "--describe", "--entity-type", "topics", "--entity-name", topic],
        [CONFIGS, *server, "--alter", "--entity-type", "topics", "--entity-name", topic,
         "--delete-config", "max.message.bytes"],
        [CONFIGS, *server, "--describe", "--entity-type", "topics", "--entity-name", topic],
        [CONFIGS, *server, "--alter", "--entity-type", "users", "--entity-name", "alice",
         "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048"],
        [CONFIGS, *server, "--alter", "--entity-type", "clients", "--entity-default",
         "--add-config", "request_percentage=50"],
        [CONFIGS, *server, "--alter", "--entity-type", "users", "--entity-name", "alice",
         "--delete-config", "consumer_byte_rate"],
        [CONFIGS, *server, "--describe", "--entity-type", "users"],
        [CONFIGS, *server, "--describe", "--entity-type", "clients"],
        [CONFIGS, *server, "--alter", "--entity-type", "users", "--entity-name", "bob",
         "--add-config", "producer_byte_rate=1.5"],
        [METADATA_QUORUM, *server, "describe", "--status"],
        [METADATA_QUORUM, *server, "describe", "--replication"],
        # KIP-919: the combined node's one listener is its controller endpoint too
        [METADATA_QUORUM, "--bootstrap-controller", b, "describe", "--status"],
        [METADATA_QUORUM, "--bootstrap-controller", b, "describe", "--replication"],
    ])
    created, altered, listed, described = (_ok(r) for r in first[:4])
    assert f"Created topic {topic}." in created
    assert topic in listed.split()
    rows = _describe_rows(described)
    assert sorted(rows) == [0, 1, 2] and {r["Leader"] for r in rows.values()} == {"1"}
    assert "retention.ms=86400000" in _ok(first[5]) and "max.message.bytes=200000" in first[5].stdout
    after_delete = _ok(first[7])
    assert "retention.ms=86400000" in after_delete and "max.message.bytes" not in after_delete
    for run in first[8:11]:
        _ok(run)
    users, clients = _ok(first[11]), _ok(first[12])
    assert "Quota configs for user-principal 'alice' are producer_byte_rate=1024.0" in users
    assert "consumer_byte_rate" not in users
    assert "Quota configs for the default client-id are request_percentage=50.0" in clients
    refused = first[13]
    assert refused.code != 0 and "producer_byte_rate cannot be a fractional value" in (
        refused.stdout + refused.stderr), refused.explain()
    status = dict(re.findall(r"^(\w+):\s+(.*)$", _ok(first[14]), re.M))
    assert (status["LeaderId"], status["MaxFollowerLag"]) == ("1", "0")
    assert int(status["HighWatermark"]) > 0 and status["CurrentObservers"] == "[]"
    assert json.loads(status["CurrentVoters"])[0]["id"] == 1
    replication = [ln.split() for ln in _ok(first[15]).splitlines()[1:] if ln.strip()]
    assert [(r[0], r[3], r[-1]) for r in replication] == [("1", "0", "Leader")]
    assert int(replication[0][2]) == int(status["HighWatermark"])
    by_controller = dict(re.findall(r"^(\w+):\s+(.*)$", _ok(first[16]), re.M))
    assert (by_controller["ClusterId"], by_controller["LeaderId"]) == (
        status["ClusterId"], "1"), first[16].explain()
    assert json.loads(by_controller["CurrentVoters"]) == json.loads(status["CurrentVoters"])
    assert [r[0] for r in (ln.split() for ln in _ok(first[17]).splitlines()[1:]
                            if ln.strip())] == ["1"]

    _produce(b, topic, 3)
    _commit(b, group, topic, 3)
    second = run_tools([
        [LOG_DIRS, *server, "--describe", "--topic-list", topic],
        [GROUPS, *server, "--list"],
        [GROUPS, *server, "--describe", "--group", group],
        [GROUPS, *server, "--reset-offsets", "--group", group, "--topic", topic,
         "--to-earliest", "--execute"],
        [GROUPS, *server, "--describe", "--group", group],
        [GROUPS, *server, "--delete", "--group", group],
        [GROUPS, *server, "--list"],
        [TOPICS, *server, "--delete", "--topic", topic],
        [TOPICS, *server, "--list"],
    ])
    dirs = _log_dirs(_ok(second[0]))
    [broker_dirs] = dirs["brokers"]
    [log_dir] = broker_dirs["logDirs"]
    assert log_dir["error"] is None and Path(log_dir["logDir"]) == module_broker.data_dir.resolve()
    sizes = {p["partition"]: (p["size"], p["offsetLag"]) for p in log_dir["partitions"]}
    assert set(sizes) == {f"{topic}-{p}" for p in range(3)}
    assert all(size > VALUE_BYTES and lag == 0 for size, lag in sizes.values()), sizes
    assert group in _ok(second[1]).split()
    lag = _group_rows(_ok(second[2]))
    assert {p: (r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) for p, r in lag.items()} == {
        p: (str(COMMITTED), str(PER_PARTITION), str(PER_PARTITION - COMMITTED)) for p in range(3)}
    reset = [ln.split() for ln in _ok(second[3]).splitlines() if ln.startswith(group)]
    assert sorted((int(r[2]), r[3]) for r in reset) == [(p, "0") for p in range(3)], reset
    lag = _group_rows(_ok(second[4]))
    assert {p: (r["CURRENT-OFFSET"], r["LAG"]) for p, r in lag.items()} == {
        p: ("0", str(PER_PARTITION)) for p in range(3)}
    assert "Deletion of requested consumer groups ('tools-group') was successful." in _ok(second[5])
    assert group not in _ok(second[6]).split()
    _ok(second[7])
    assert topic not in _ok(second[8]).split()


def test_python_admin_clients(module_broker: Broker) -> None:
    """kafka-python's describe_log_dirs / describe_metadata_quorum /
    list_config_resources / elect_leaders and confluent-kafka's elect_leaders on one
    broker (a lone replica leads already; the real elections are on 3 brokers)."""
    b = module_broker.bootstrap
    topic = "py-admin-topic"
    admin = KafkaAdminClient(bootstrap_servers=b)
    try:
        admin.create_topics([NewTopic(topic, 2, 1)])
        _produce(b, topic, 2)
        [described] = admin.describe_log_dirs()
        [log_dir] = described["log_dirs"]
        assert (described["broker"], log_dir["error_code"]) == (1, 0)
        assert log_dir["log_dir"] == str(module_broker.data_dir.resolve())
        assert log_dir["total_bytes"] >= log_dir["usable_bytes"] > 0
        sizes = {p["partition_index"]: (p["partition_size"], p["offset_lag"])
                 for t in log_dir["topics"] if t["name"] == topic for p in t["partitions"]}
        assert sorted(sizes) == [0, 1] and all(
            size > VALUE_BYTES and lag == 0 for size, lag in sizes.values()), sizes
        quorum = admin.describe_metadata_quorum()
        [part] = quorum["topics"][0]["partitions"]
        [voter] = part["current_voters"]
        assert (part["leader_id"], part["error"], voter["replica_id"]) == (1, None, 1)
        assert voter["log_end_offset"] == part["high_watermark"] > 0
        resources = admin.list_config_resources()
        assert resources["broker"] == ["1"] and topic in resources["topic"], resources
        elected = admin.elect_leaders(0, {topic: [0, 1]}, raise_errors=False)
        codes = {(t[0], p[0]): p[1] for t in elected.replica_election_results for p in t[1]}
        assert codes == {(topic, 0): 84, (topic, 1): 84}, elected  # ELECTION_NOT_NEEDED
    finally:
        admin.close()
    ck = AdminClient({"bootstrap.servers": b})
    future = ck.elect_leaders(ElectionType.PREFERRED, [CkTopicPartition(topic, 0),
                                                        CkTopicPartition(topic, 7)])
    results = future.result(timeout=30)
    errors = {(tp.topic, tp.partition): (err.name() if err is not None else None)
              for tp, err in results.items()}
    assert errors == {(topic, 0): "ELECTION_NOT_NEEDED", (topic, 7): "UNKNOWN_TOPIC_OR_PART"}


# -- a 3-broker cluster -----------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three brokers that never move leaders back by themselves."""
    c = Cluster(tmp_path_factory.mktemp("admin-tools-cluster"),
                extra_args=("--set", "auto.leader.rebalance.enable=false"))
    c.start()
    try:
        yield c
    finally:
        c.kill()


def _admin(bootstrap: str) -> AdminClient:
    """A confluent-kafka admin client that stays quiet about a broker the test killed."""
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})


def _leaders(bootstrap: str, topic: str) -> dict[int, tuple[int, tuple[int, ...], tuple[int, ...]]]:
    md = _admin(bootstrap).list_topics(topic, timeout=10)
    return {p: (m.leader, tuple(m.replicas), tuple(m.isrs))
            for p, m in md.topics[topic].partitions.items()}


def _wait(predicate, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _move_leaders_off(cluster: Cluster, topic: str, node: int) -> list[int]:
    """Restart ``node``: the partitions it led get other leaders; wait until it is
    back in every ISR. The partitions whose preferred leader it is."""
    cluster.brokers[node].restart()
    others = ",".join(b.bootstrap for n, b in cluster.brokers.items() if n != node)
    moved: list[int] = []

    def settled() -> bool:
        view = _leaders(others, topic)
        moved[:] = [p for p, (_, replicas, _) in view.items() if replicas[0] == node]
        return all(node in isr and leader >= 0 for leader, _, isr in view.values())

    _wait(settled, 30, f"broker {node} back in the ISRs of {topic}")
    return moved


def _quotas_of(broker: Broker, user: str) -> list[tuple[str, float]]:
    """A user's quota values as ``broker`` describes them (raw DescribeClientQuotas)."""
    conn = Connection(broker.host, broker.port, 10)
    r = conn.call(dcq.DescribeClientQuotasRequest(components=(
        dcq.ComponentData(entity_type="user", match_type=i8(0), match=user),), strict=True))
    return sorted((v.key, v.value) for x in r.entries for v in x.values)


def _set_quota(broker: Broker, user: str, key: str, value: float) -> None:
    conn = Connection(broker.host, broker.port, 10)
    r = conn.call(acq.AlterClientQuotasRequest(validate_only=False, entries=(acq.EntryData(
        entity=(acq.EntityData(entity_type="user", entity_name=user),),
        ops=(acq.OpData(key=key, value=f64(value), remove=False),)),)))
    assert [e.error_code.name for e in r.entries] == ["none"]


# -- partition reassignment (kafka-reassign-partitions) ---------------------------------

MOVED_RF2, MOVED_RF1 = "reassign-rf2", "reassign-rf1"
#: replicas at creation; partition 0 of each moves: [1, 2] -> [2, 3] and [1] -> [3]
PINNED = {MOVED_RF2: [[1, 2], [2, 3]], MOVED_RF1: [[1], [2]]}
MOVES = {(MOVED_RF2, 0): [2, 3], (MOVED_RF1, 0): [3]}


def _assignment(text: str, title: str) -> dict[tuple[str, int], list[int]]:
    """The reassignment JSON that the tool printed after the line ``title``."""
    lines = text.splitlines()
    doc = next(ln for ln in lines[lines.index(title) + 1:] if ln.startswith("{"))
    return {(p["topic"], p["partition"]): p["replicas"] for p in json.loads(doc)["partitions"]}


def _preferred_lead(admin: AdminClient, bootstrap: str) -> bool:
    """Whether each PINNED partition is led by its first replica; if not, a
    preferred election is asked for the others. The first replica of a new
    partition campaigns first, but on a loaded machine another replica's
    election timeout may come sooner, and this cluster never moves leaders
    back by itself (``auto.leader.rebalance.enable=false``)."""
    off = [CkTopicPartition(t, p) for t in PINNED
           for p, (ldr, replicas, _) in _leaders(bootstrap, t).items() if ldr != replicas[0]]
    if not off:
        return True
    try:
        admin.elect_leaders(ElectionType.PREFERRED, off).result(timeout=10)
    except Exception:  # noqa: BLE001 - no leader yet, or the first replica not in sync: again
        pass
    return False


def _prepare_moves(cluster: Cluster, workdir: Path, server: list[str]
                   ) -> tuple[list[list[str]], list[str]]:
    """Create the PINNED topics, wait until their first replicas lead (so the
    preferred election of the batch leaves them alone) and write PER_PARTITION
    records to each partition. The kafka-reassign-partitions steps: --generate of
    both topics onto brokers 2,3, --execute of MOVES and --list; then --verify,
    run again until it finds no reassignment in progress (it then clears the
    throttles)."""
    admin = _admin(cluster.bootstrap)  # kept alive until its futures resolve
    for future in admin.create_topics([CkNewTopic(t, len(a), replica_assignment=a)
                                       for t, a in PINNED.items()]).values():
        future.result(timeout=30)
    _wait(lambda: _preferred_lead(admin, cluster.bootstrap), 30,
          "the preferred leaders of the pinned topics")
    for t, a in PINNED.items():
        _produce(cluster.bootstrap, t, len(a))
    to_move, plan = workdir / "topics-to-move.json", workdir / "reassignment.json"
    to_move.write_text(json.dumps({"version": 1, "topics": [{"topic": t} for t in PINNED]}))
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r} for (t, p), r in MOVES.items()]}))
    return [
        [REASSIGN, *server, "--generate", "--topics-to-move-json-file", str(to_move),
         "--broker-list", "2,3"],
        [REASSIGN, *server, "--execute", "--reassignment-json-file", str(plan)],
        [REASSIGN, *server, "--list"],
    ], until("Clearing broker-level throttles", 30,
             [REASSIGN, *server, "--verify", "--reassignment-json-file", str(plan)])


def _read_back(bootstrap: str) -> dict[tuple[str, int], list[tuple[int, bytes]]]:
    """The first PER_PARTITION records (offset, value) of every partition of the
    PINNED topics. (A moved partition's log goes on with the control batches of
    its replicas' Raft group, which consumers skip: no waiting for the high
    watermark.)"""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reassign-reader",
                         "enable.auto.commit": False, "log_level": 0})
    consumer.assign([CkTopicPartition(t, p, 0) for t, a in PINNED.items()
                     for p in range(len(a))])
    out: dict[tuple[str, int], list[tuple[int, bytes]]] = {
        (t, p): [] for t, a in PINNED.items() for p in range(len(a))}
    deadline = time.monotonic() + 20
    try:
        while any(len(records) < PER_PARTITION for records in out.values()):
            assert time.monotonic() < deadline, {k: len(v) for k, v in out.items()}
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out[(msg.topic(), msg.partition())].append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    return out


def _metadata_views(cluster: Cluster) -> dict[int, dict[tuple[str, int], tuple[int, list[int]]]]:
    """Each broker's Metadata for the PINNED topics: {node: {(topic, partition):
    (leader, replicas)}}."""
    return {node: {(t, p): (ldr, list(replicas)) for t in PINNED
                   for p, (ldr, replicas, _) in _leaders(broker.bootstrap, t).items()}
            for node, broker in cluster.brokers.items()}


def _check_moves(cluster: Cluster, runs: list[ToolRun]) -> None:
    """What --generate, --execute, --list and --verify printed; then every broker's
    Metadata lists the targets as the replicas, and every record is read back."""
    generate, execute, listed, verify = runs
    before = {(t, p): r for t, a in PINNED.items() for p, r in enumerate(a)}
    assert _assignment(_ok(generate), "Current partition replica assignment") == before
    proposed = _assignment(generate.stdout, "Proposed partition reassignment configuration")
    assert sorted(proposed) == sorted(before), generate.explain()
    assert all(len(r) == len(set(r)) == len(before[k]) and set(r) <= {2, 3}
               for k, r in proposed.items()), generate.explain()
    moved = ",".join(f"{t}-{p}" for t, p in sorted(MOVES))
    assert f"Successfully started partition reassignments for {moved}" in _ok(execute)
    assert _assignment(execute.stdout, "Current partition replica assignment") == {
        k: before[k] for k in MOVES}, execute.explain()
    ongoing = {f"{t}-{p}: replicas: {','.join(map(str, r + [1]))}. adding: 3. removing: 1."
               for (t, p), r in MOVES.items()}
    shown = [ln for ln in _ok(listed).splitlines()[1:] if ln.strip()]
    assert listed.stdout.startswith("No partition reassignments found.") or (
        listed.stdout.startswith("Current partition reassignments:")
        and set(shown) <= ongoing), listed.explain()
    status = _ok(verify)
    assert all(f"Reassignment of partition {t}-{p} is completed." in status
               for t, p in MOVES), verify.explain()
    assert "Clearing broker-level throttles on brokers 1,2,3" in status, verify.explain()
    cleared = re.search(r"^Clearing topic-level throttles on topics (\S+)$", status, re.M)
    assert cleared and set(cleared.group(1).split(",")) == set(PINNED), verify.explain()

    after = {**before, **MOVES}

    def settled(view: dict[tuple[str, int], tuple[int, list[int]]]) -> bool:
        return {k: r for k, (_, r) in view.items()} == after and all(
            ldr in r for ldr, r in view.values())

    views = _metadata_views(cluster)
    deadline = time.monotonic() + 10  # a broker may apply the last change a moment later
    while not all(settled(v) for v in views.values()) and time.monotonic() < deadline:
        time.sleep(0.2)
        views = _metadata_views(cluster)
    assert all(settled(v) for v in views.values()), views
    assert _read_back(cluster.bootstrap) == {
        (t, p): [(i, f"p{p}-{i}".encode() * 20) for i in range(PER_PARTITION)]
        for t, a in PINNED.items() for p in range(len(a))}


def test_tools_on_three_brokers(cluster: Cluster, tmp_path: Path) -> None:
    """Leaders moved off their preferred replica by a restart go back with
    confluent-kafka's elect_leaders (one partition) and kafka-leader-election
    --all-topic-partitions (the rest); quotas set through one broker before the
    restart and through kafka-configs after it are described alike by all three;
    kafka-metadata-quorum asks a broker that is not the controller, with
    --bootstrap-server and with --bootstrap-controller;
    kafka-reassign-partitions moves an RF-2 and an RF-1 partition (``_prepare_moves``).
    Last, with a preferred replica killed, elect_leaders gets
    PREFERRED_LEADER_NOT_AVAILABLE for its partitions."""
    topic = "tools-rf3"
    cluster.create_topic(topic, 6, 3)
    _wait(lambda: all(ldr >= 0 for ldr, _, _ in _leaders(cluster.bootstrap, topic).values()),
          20, "leaders")
    _produce(cluster.bootstrap, topic, 6)
    _set_quota(cluster.brokers[3], "dave", "consumer_byte_rate", 512.0)
    preferred = _move_leaders_off(cluster, topic, 2)
    before = _leaders(cluster.bootstrap, topic)
    assert len(preferred) == 2 and all(before[p][0] != 2 for p in preferred), before
    assert _quotas_of(cluster.brokers[2], "dave") == [("consumer_byte_rate", 512.0)]

    by_confluent, by_tool = preferred
    ck = _admin(cluster.bootstrap)
    steady = next(p for p in range(6) if p not in preferred)  # led by its first replica
    results = ck.elect_leaders(ElectionType.PREFERRED, [
        CkTopicPartition(topic, by_confluent), CkTopicPartition(topic, steady)
    ]).result(timeout=30)
    errors = {tp.partition: (err.name() if err is not None else None)
              for tp, err in results.items()}
    assert errors == {by_confluent: None, steady: "ELECTION_NOT_NEEDED"}, (errors, preferred)
    assert _leaders(cluster.bootstrap, topic)[by_confluent][0] == 2

    controller = cluster.wait_for_controller()  # Metadata names a random live broker
    other = next(n for n in cluster.brokers if n != controller)
    one, asked = cluster.brokers[1].bootstrap, cluster.brokers[other].bootstrap
    start_moves, verify_moves = _prepare_moves(cluster, tmp_path, ["--bootstrap-server", one])
    runs = run_tools([
        [CONFIGS, "--bootstrap-server", asked, "--alter", "--entity-type", "users",
         "--entity-name", "carol", "--add-config", "producer_byte_rate=4096"],
        [LEADER_ELECTION, "--bootstrap-server", one, "--election-type", "preferred",
         "--all-topic-partitions"],
        # after the election, which would hand a moving partition to its target's first
        *start_moves,
        [TOPICS, "--bootstrap-server", one, "--describe", "--topic", topic],
        [METADATA_QUORUM, "--bootstrap-server", asked, "describe", "--status"],
        [METADATA_QUORUM, "--bootstrap-server", asked, "describe", "--replication"],
        [LOG_DIRS, "--bootstrap-server", one, "--describe", "--broker-list", "1,2,3",
         "--topic-list", topic],
        # a combined node that is not the active controller, as a controller endpoint
        [METADATA_QUORUM, "--bootstrap-controller", asked, "describe", "--replication"],
        verify_moves,  # the moves went on while the tools above ran
    ])
    runs, moves = runs[:2] + runs[5:-1], runs[2:5] + runs[-1:]
    _ok(runs[0])
    elected = _ok(runs[1])
    assert f"Successfully completed leader election (PREFERRED) for partitions {topic}-{by_tool}" \
        in elected, elected
    assert f"{topic}-{by_confluent}" not in elected, elected
    rows = _describe_rows(_ok(runs[2]))
    assert sorted(rows) == list(range(6))
    assert all(r["Leader"] == r["Replicas"].split(",")[0] for r in rows.values()), rows
    status = dict(re.findall(r"^(\w+):\s+(.*)$", _ok(runs[3]), re.M))
    voters = json.loads(status["CurrentVoters"])
    assert sorted(v["id"] for v in voters) == [1, 2, 3]
    assert int(status["LeaderId"]) == controller and int(status["HighWatermark"]) > 0
    assert int(status["MaxFollowerLag"]) >= 0 and status["CurrentObservers"] == "[]"
    replication = [ln.split() for ln in _ok(runs[4]).splitlines()[1:] if ln.strip()]
    assert sorted(r[0] for r in replication) == ["1", "2", "3"]
    assert sorted(r[-1] for r in replication) == ["Follower", "Follower", "Leader"]
    assert all(int(r[2]) > 0 and int(r[3]) >= 0 for r in replication), replication
    dirs = _log_dirs(_ok(runs[5]))
    assert sorted(br["broker"] for br in dirs["brokers"]) == [1, 2, 3]
    for br in dirs["brokers"]:
        parts = {p["partition"]: p["size"] for d in br["logDirs"] for p in d["partitions"]}
        assert set(parts) == {f"{topic}-{p}" for p in range(6)}, br
        assert all(size > VALUE_BYTES for size in parts.values()), br
    by_controller = [ln.split() for ln in _ok(runs[6]).splitlines()[1:] if ln.strip()]
    assert sorted((r[0], r[-1]) for r in by_controller) == sorted(
        (r[0], r[-1]) for r in replication), runs[6].explain()
    for node, broker in cluster.brokers.items():
        assert _quotas_of(broker, "carol") == [("producer_byte_rate", 4096.0)], node
        assert _quotas_of(broker, "dave") == [("consumer_byte_rate", 512.0)], node
    _check_moves(cluster, moves)

    # the preferred replica dead: its partitions lead elsewhere and cannot go back
    cluster.brokers[3].kill()
    survivors = ",".join(cluster.brokers[n].bootstrap for n in (1, 2))
    orphans = [p for p, (_, replicas, _) in _leaders(survivors, topic).items()
               if replicas[0] == 3]
    _wait(lambda: all(_leaders(survivors, topic)[p][0] in (1, 2) for p in orphans)
          and _admin(survivors).list_topics(timeout=10).controller_id in (1, 2), 20,
          "new leaders and controller after broker 3 died")
    # (confluent-kafka: kafka-python's admin may still pick the dead broker, listed
    # until the controller fences it)
    admin = _admin(survivors)  # kept alive until its future resolves
    results = admin.elect_leaders(
        ElectionType.PREFERRED, [CkTopicPartition(topic, p) for p in orphans]).result(timeout=30)
    errors = {tp.partition: (err.name() if err is not None else None)
              for tp, err in results.items()}
    assert orphans and errors == dict.fromkeys(orphans, "PREFERRED_LEADER_NOT_AVAILABLE"), errors
