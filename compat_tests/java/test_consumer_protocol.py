"""KIP-848 consumer groups (``group.protocol=consumer``) with real clients.

A group of three members in their own processes — two Java ``KafkaConsumer``
4.4 (``GroupConsumer`` with ``group.protocol=consumer``) and one confluent-kafka
2.16 (``compat_tests/_consumer_protocol_member.py``) — consumes a 6-partition
topic and commits after every poll; one member is killed with SIGKILL
mid-stream (the confluent one on the single node, a Java one on the cluster).
The survivors must take its partitions over once its session ends
(``group.consumer.session.timeout.ms`` = 2 s in these brokers), every record
must be consumed, and the group's committed offsets must reach the end of
every partition. On a single node and on 3 brokers with replication factor 1
(the partitions led by brokers other than the group coordinator).

Mixed groups (Kafka 4.4): a classic Java consumer (JoinGroup, eager range
assignor) forms a classic group; a Java ``group.protocol=consumer`` member joins
it, which converts the group online into a consumer group, and a second classic
consumer then joins that consumer group as a classic member. All three share the
partitions, consume every record and commit; ConsumerGroupDescribe lists two
classic members (type 0) and one consumer member (type 1).

A regex subscription (KIP-848's SubscribedTopicRegex, resolved by the
coordinator): a confluent-kafka member subscribed to ``^<prefix>.*`` consumes
the matching topic, not the other one, and is assigned a matching topic
created while it runs.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest

from compat_tests._broker import REPO_ROOT, unique_topic
from compat_tests._deployment import CONSUMER_PROTOCOL_ARGS, GROUP_KINDS, SINGLE_ONLY, Deployment
from compat_tests._groups import FAST_BROKER_ARGS, create_topic, unique_group, wait_for
from compat_tests.conftest import _deployment
from compat_tests.java.conftest import PKG, JsonLineProcess, java_cmd
from kcompat.cli._kio import Connection

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 6
PER_ROUND = 30
SESSION_S = 2.0


@pytest.fixture(scope="module", params=GROUP_KINDS)
def gbroker(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """The group suites' deployments, with 3 s consumer-protocol sessions."""
    yield from _deployment(request, tmp_path_factory, "kip848",
                           (*FAST_BROKER_ARGS, *CONSUMER_PROTOCOL_ARGS))


class Member(JsonLineProcess):
    """One member process; its JSON lines are read on a thread."""

    def __init__(self, cmd: list[str], name: str) -> None:
        self.name = name
        self.assignment: list[int] = []
        self.keys: set[str] = set()
        self.errors: list[str] = []
        super().__init__(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT))

    def drain(self) -> None:
        for ev in self.new_events():
            if ev["event"] == "assigned":
                self.assignment = list(ev["all"])
            elif ev["event"] == "record":
                self.keys.add(ev["key"])
            elif ev["event"] == "error":
                self.errors.append(ev["error"])

    def ask_to_stop(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write("stop\n")
                self.proc.stdin.close()
            except OSError:
                pass

    def wait_stopped(self) -> None:
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def stop_all(members: list[Member]) -> None:
    """Close every member (each leaves the group) at once."""
    for m in members:
        m.ask_to_stop()
    for m in members:
        m.wait_stopped()


def start_member(client: str, cp: str, bootstrap: str, topic: str, group: str,
                 name: str) -> Member:
    if client == "java":
        cmd = java_cmd(cp, f"{PKG}.GroupConsumer", bootstrap, topic, group, name,
                       "group.protocol=consumer", "fetch.max.wait.ms=100")
    else:
        cmd = [sys.executable, "-m", "compat_tests._consumer_protocol_member", bootstrap,
               topic, group, name]
    return Member(cmd, name)


def produce(bootstrap: str, topic: str, keys: list[str], partitions: int = PARTITIONS) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, key in enumerate(keys):
        p.produce(topic, key=key.encode(), value=b"v", partition=i % partitions)
    assert p.flush(30) == 0


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = [ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(PARTITIONS)])]
    found = admin.list_consumer_group_offsets(request)[group].result(timeout=30)
    return {tp.partition: tp.offset for tp in found.topic_partitions}


def test_group_of_three_survives_a_member_killed(gbroker: Deployment, clients_cp: str) -> None:
    """Two Java members and a confluent one; the confluent member is killed on
    the single node, a Java member on the cluster, so each client both dies
    and takes partitions over."""
    bootstrap = gbroker.bootstrap
    topic, group = unique_topic("kip848"), unique_group("kip848")
    create_topic(bootstrap, topic, PARTITIONS, gbroker.replication)
    produce(bootstrap, topic, [f"a{i}" for i in range(PER_ROUND)])
    # client.id prefixes name the family for ledger_scan
    members = [start_member(client, clients_cp, bootstrap, topic, group, name)
               for client, name in (("java", "consumer-kip848-0"),
                                    ("confluent", "rdkafka-kip848-1"),
                                    ("java", "consumer-kip848-2"))]
    try:
        def state() -> str:
            return "; ".join(f"{m.name} {m.assignment} {len(m.keys)} keys {m.errors[:2]} "
                             f"rc={m.proc.poll()} {m.stderr[-300:]}" for m in members)

        def settled(live: list[Member], keys: set[str]) -> bool:
            for m in members:
                m.drain()
            owned = [p for m in live for p in m.assignment]
            got = set().union(*(m.keys for m in members))
            return sorted(owned) == list(range(PARTITIONS)) and keys <= got and all(
                m.assignment for m in live)

        first = {f"a{i}" for i in range(PER_ROUND)}
        wait_for(lambda: settled(members, first), 60, state)
        victim = members[1] if gbroker.kind == "single" else members[0]
        survivors = [m for m in members if m is not victim]
        lost = list(victim.assignment)
        victim.proc.kill()
        victim.proc.wait()
        killed_at = time.monotonic()
        produce(bootstrap, topic, [f"b{i}" for i in range(PER_ROUND)])
        every = first | {f"b{i}" for i in range(PER_ROUND)}
        wait_for(lambda: settled(survivors, every), 30, state)
        took_over_s = time.monotonic() - killed_at
        assert set(lost) <= {p for m in survivors for p in m.assignment}
        # the coordinator waited for the session to end, not for the fetch to fail
        assert took_over_s >= SESSION_S - 0.5, (took_over_s, state())
        ends = {p: PER_ROUND * 2 // PARTITIONS for p in range(PARTITIONS)}
        wait_for(lambda: committed(bootstrap, group, topic) == ends, 15,
                 lambda: f"committed {committed(bootstrap, group, topic)} != {ends}")
        assert not [e for m in survivors for e in m.errors], state()
    finally:
        stop_all(members)


@pytest.mark.parametrize("gbroker", SINGLE_ONLY, indirect=True)
def test_regex_subscription_follows_new_topics(gbroker: Deployment) -> None:
    bootstrap = gbroker.bootstrap
    prefix = unique_topic("kip848re")
    first, later, other = f"{prefix}-one", f"{prefix}-two", unique_topic("kip848other")
    for name in (first, other):
        create_topic(bootstrap, name, 2, gbroker.replication)
        produce(bootstrap, name, [f"{name}/{i}" for i in range(4)], partitions=2)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_group("kip848re"),
                  "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    seen: set[str] = set()

    def consumed(want: set[str]) -> bool:
        m = c.poll(0.1)
        if m is not None and m.error() is None:
            seen.add(m.key().decode())
        return want <= seen

    try:
        c.subscribe([f"^{prefix}-.*"])
        wait_for(lambda: consumed({f"{first}/{i}" for i in range(4)}), 20,
                 lambda: f"consumed {sorted(seen)}")
        create_topic(bootstrap, later, 2, gbroker.replication)
        produce(bootstrap, later, [f"{later}/{i}" for i in range(4)], partitions=2)
        wait_for(lambda: consumed({f"{later}/{i}" for i in range(4)}), 20,
                 lambda: f"consumed {sorted(seen)}")
        assert not [k for k in seen if k.startswith(other)]
        assert {tp.topic for tp in c.assignment()} == {first, later}
    finally:
        c.close()


@pytest.mark.parametrize("gbroker", SINGLE_ONLY, indirect=True)
def test_classic_and_consumer_members_share_a_group(gbroker: Deployment,
                                                     clients_cp: str) -> None:
    bootstrap = gbroker.bootstrap
    topic, group = unique_topic("kip848mix"), unique_group("kip848mix")
    create_topic(bootstrap, topic, PARTITIONS, gbroker.replication)
    produce(bootstrap, topic, [f"a{i}" for i in range(PER_ROUND)])

    def member(name: str, protocol: str) -> Member:
        extra = ["group.protocol=consumer"] if protocol == "consumer" else [
            "session.timeout.ms=6000", "heartbeat.interval.ms=300"]
        return Member(java_cmd(clients_cp, f"{PKG}.GroupConsumer", bootstrap, topic, group,
                               name, "fetch.max.wait.ms=100", *extra), name)

    members: list[Member] = []
    try:
        def state() -> str:
            return "; ".join(f"{m.name} {m.assignment} {len(m.keys)} keys {m.errors[:2]} "
                             f"rc={m.proc.poll()} {m.stderr[-300:]}" for m in members)

        def settled(keys: set[str]) -> bool:
            for m in members:
                m.drain()
            owned = sorted(p for m in members for p in m.assignment)
            return owned == list(range(PARTITIONS)) and all(m.assignment for m in members) \
                and keys <= set().union(*(m.keys for m in members))

        first = {f"a{i}" for i in range(PER_ROUND)}
        members.append(member("consumer-mix-classic-0", "classic"))
        wait_for(lambda: settled(first), 60, state)  # a classic group
        # the new member's first heartbeat converts it; the classic member that joins
        # meanwhile joins the classic group or, once converted, the consumer group
        members += [member("consumer-mix-new-1", "consumer"),
                    member("consumer-mix-classic-2", "classic")]
        wait_for(lambda: settled(first), 60, state)
        produce(bootstrap, topic, [f"b{i}" for i in range(PER_ROUND)])
        wait_for(lambda: settled(first | {f"b{i}" for i in range(PER_ROUND)}), 30, state)
        ends = {p: PER_ROUND * 2 // PARTITIONS for p in range(PARTITIONS)}
        wait_for(lambda: committed(bootstrap, group, topic) == ends, 15,
                 lambda: f"committed {committed(bootstrap, group, topic)} != {ends}")
        host, port = bootstrap.split(",")[0].rsplit(":", 1)
        described = Connection(host, int(port), 10.0).call(ConsumerGroupDescribeRequest(
            group_ids=(group,), include_authorized_operations=False)).groups[0]
        assert described.error_code == 0, described
        assert sorted((m.client_id, m.member_type) for m in described.members) == [
            ("consumer-mix-classic-0", 0), ("consumer-mix-classic-2", 0),
            ("consumer-mix-new-1", 1)]
        assert not [e for m in members for e in m.errors], state()
    finally:
        stop_all(members)
