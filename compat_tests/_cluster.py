"""A local kcompat cluster of real broker processes, for the cluster and chaos tests.

Each broker is a ``compat_tests._broker.Broker`` started with
``--node-id N --set controller.quorum.voters=...`` (cluster mode, issue 6) and
its own data dir; the helpers ask a live broker for Metadata through
librdkafka (confluent-kafka) to find partition leaders, and DescribeQuorum
(kafka-python's codec over a socket, ``quorum_leader``) to find the active
controller: as from Kafka 4, Metadata's ``controller_id`` is a random live
broker, not the controller.

``start`` returns only once every broker is registered and unfenced, so a test
may at once create a topic replicated on all of them: a broker prints its ready
line when it listens, and registers afterwards (its first heartbeat follows the
controller election, and the controller unfences it once it has caught up with
the metadata log).
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from compat_tests._broker import Broker, free_port

#: COMPAT_TEST_LINK=SSL or SASL_SSL: every Cluster's brokers talk to each other over
#: a secured inter-broker listener (make test-secured-link runs the cluster suite so)
LINK = os.environ.get("COMPAT_TEST_LINK", "PLAINTEXT").upper()


class Cluster:
    """``link``: the inter-broker listener's protocol. PLAINTEXT: one listener per
    broker, clients and peers alike. SSL (mutual TLS) or SASL_SSL (PLAIN): the
    brokers talk over their own INTERNAL listener, with certificates of a test CA
    made under ``root``, while the harness and the clients keep the PLAINTEXT one
    (``bootstrap``) — so every cluster scenario runs unchanged over a secured link."""

    def __init__(self, root: Path, size: int = 3, extra_args: tuple[str, ...] = (),
                 link: str = LINK, first_node: int = 1) -> None:
        ports = [free_port() for _ in range(size)]
        self.link = link
        self._link_config = None if link == "PLAINTEXT" else _link_config(root, link)
        inner = ports if link == "PLAINTEXT" else [free_port() for _ in range(size)]
        ids = range(first_node, first_node + size)  # node ids (1, 2, 3 unless asked)
        self.voters = ",".join(f"{n}@127.0.0.1:{p}" for n, p in zip(ids, inner, strict=True))
        self.brokers: dict[int, Broker] = {
            n: Broker(root / f"broker-{n}", port=ports[i], extra_args=(
                "--node-id", str(n), "--set", f"controller.quorum.voters={self.voters}",
                "--admin-port", "0", "--set", "default.replication.factor=3",
                *self.link_args(ports[i], inner[i]), *self._with_link(extra_args)))
            for i, n in enumerate(ids)
        }

    def link_args(self, port: int, inner: int | None = None) -> tuple[str, ...]:
        """What a broker of this cluster (one joining it later too) listening on
        ``port`` needs for the inter-broker link: nothing on PLAINTEXT, else the
        link's settings and its INTERNAL listener (on ``inner``, default a free port)."""
        if self._link_config is None:
            return ()
        inner = inner if inner is not None else free_port()
        return ("--config", str(self._link_config), "--set",
                f"listeners=INTERNAL://127.0.0.1:{inner},PLAINTEXT://127.0.0.1:{port}")

    def _with_link(self, args: tuple[str, ...]) -> tuple[str, ...]:
        """A test's own ``super.users`` keeps the brokers' link principal in it:
        Raft frames need CLUSTER_ACTION."""
        if self._link_config is None:
            return args
        return tuple(f"{a};User:broker" if a.startswith("super.users=") else a for a in args)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def start(self) -> Cluster:
        for b in self.brokers.values():
            b.start(wait=False)
        for b in self.brokers.values():
            b.wait_ready()
        self.wait_for_controller()
        self.wait_for_brokers()
        return self

    def close(self) -> None:
        for b in self.brokers.values():
            b.close()

    def kill(self) -> None:
        """SIGKILL every broker (a teardown that need not be graceful)."""
        for b in self.brokers.values():
            if b.running:
                b.kill()

    def live_bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.running)

    def _admin(self, socket_timeout_ms: int = 2000) -> AdminClient:
        """An admin client that gives up on a silent broker after
        ``socket_timeout_ms`` (polls move on to another broker quickly)."""
        return AdminClient({"bootstrap.servers": self.live_bootstrap(),
                            "socket.timeout.ms": socket_timeout_ms, "log_level": 0})

    def wait_for_controller(self, timeout_s: float = 30.0) -> int:
        """The active controller (the metadata quorum's leader) once a live
        broker names one in DescribeQuorum."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for b in self.brokers.values():
                if not b.running:
                    continue
                try:
                    leader = quorum_leader(b.bootstrap)
                except Exception:  # noqa: BLE001 - keep polling until the deadline
                    continue
                if leader >= 0 and self.brokers.get(leader) is not None \
                        and self.brokers[leader].running:
                    return leader
            time.sleep(0.2)
        raise AssertionError("no controller elected in time")

    def wait_for_brokers(self, timeout_s: float = 30.0) -> None:
        """Until the controller counts every broker as registered and unfenced:
        it accepts a validate-only CreateTopics of replication factor ``size``
        (the check that answers INVALID_REPLICATION_FACTOR, "only N broker(s)
        are registered", when one is missing). Broker lists in Metadata or
        DescribeCluster are no proof: they name the controller before its
        registration commits, and every voter before any broker registered."""
        from confluent_kafka.admin import NewTopic

        probe = NewTopic("kcompat-cluster-ready-probe", 1, len(self.brokers))
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        while time.monotonic() < deadline:
            try:
                admin = self._admin()  # keep it alive until the future resolves
                admin.create_topics([probe], validate_only=True, request_timeout=5)[
                    probe.topic].result(timeout=10)
                return
            except Exception as e:  # noqa: BLE001 - keep polling until the deadline
                last = str(e)
            time.sleep(0.2)
        raise AssertionError(f"not all {len(self.brokers)} brokers registered and unfenced "
                             f"within {timeout_s:.0f} s; the controller last said: {last}")

    def create_topic(self, name: str, partitions: int, replication: int = 3) -> None:
        from confluent_kafka.admin import NewTopic

        # a CreateTopics answers once the new partitions have leaders: seconds
        # on a loaded machine, past the 2 s that polls allow a request
        admin = self._admin(socket_timeout_ms=30_000)  # alive until the future resolves
        futures = admin.create_topics(
            [NewTopic(name, partitions, replication)], operation_timeout=20, request_timeout=20)
        futures[name].result(timeout=30)
        self.wait_for_leaders(name, partitions)

    def leaders(self, topic: str, admin: AdminClient | None = None) -> dict[int, int]:
        """{partition: leader id (-1 if none)} as a live broker sees it."""
        md = (admin or self._admin()).list_topics(topic, timeout=2)
        t = md.topics.get(topic)
        if t is None or t.error is not None and not t.partitions:
            return {}
        return {p.id: p.leader for p in t.partitions.values()}

    def wait_for_leaders(self, topic: str, partitions: int, timeout_s: float = 30.0,
                         exclude: int | None = None) -> dict[int, int]:
        deadline = time.monotonic() + timeout_s
        last: dict[int, int] = {}
        while time.monotonic() < deadline:
            try:
                last = self.leaders(topic)
            except Exception:  # noqa: BLE001
                last = {}
            if len(last) == partitions and all(
                    ldr >= 0 and ldr != exclude and self.brokers[ldr].running
                    for ldr in last.values()):
                return last
            time.sleep(0.05)
        raise AssertionError(f"partitions of {topic} have no live leader: {last}")


def _link_config(root: Path, link: str) -> Path:
    """The brokers' shared settings of a secured INTERNAL inter-broker listener."""
    from compat_tests._tls import TestPki

    if link not in ("SSL", "SASL_SSL"):
        raise ValueError(f"COMPAT_TEST_LINK={link}: use PLAINTEXT, SSL or SASL_SSL")
    root.mkdir(parents=True, exist_ok=True)
    pki = TestPki.create(root / "pki")
    lines = [
        f"listener.security.protocol.map: INTERNAL:{link},PLAINTEXT:PLAINTEXT",
        "inter.broker.listener.name: INTERNAL",
        "listener.name.internal.ssl.client.auth: required",
        # the brokers' certificate (OU=broker) is User:broker, as their SASL login is
        "ssl.principal.mapping.rules: 'RULE:^.*OU=broker.*$/broker/,DEFAULT'",
        "super.users: 'User:broker'",
        "ssl.keystore.type: PEM",
        f"ssl.keystore.location: {pki.server.keystore}",
        "ssl.truststore.type: PEM",
        f"ssl.truststore.location: {pki.ca}",
        "sasl.enabled.mechanisms: PLAIN",
        "sasl.mechanism.inter.broker.protocol: PLAIN",
        "listener.name.internal.plain.sasl.jaas.config: 'org.apache.kafka.common.security."
        "plain.PlainLoginModule required username=\"broker\" password=\"broker-secret\" "
        "user_broker=\"broker-secret\";'",
    ]
    path = root / "inter-broker-link.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def quorum_leader(bootstrap: str, timeout_s: float = 2.0) -> int:
    """The metadata quorum's leader (the active controller) as the broker at
    ``bootstrap`` reports it in DescribeQuorum v0, what ``kafka-metadata-quorum``
    shows; -1 while it knows none."""
    from kafka.protocol.admin import DescribeQuorumRequest, DescribeQuorumResponse

    topic = DescribeQuorumRequest.TopicData
    req = DescribeQuorumRequest(version=0, topics=[topic(
        topic_name="__cluster_metadata", partitions=[topic.PartitionData(partition_index=0)])])
    req.with_header(correlation_id=1, client_id="kcompat-cluster")
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        payload = bytes(req.encode(header=True))
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        frame = _read_exact(sock, struct.unpack(">i", _read_exact(sock, 4))[0])
    resp = DescribeQuorumResponse.decode(frame, version=0, header=True)
    part = resp.topics[0].partitions[0]
    return int(part.leader_id) if resp.error_code == 0 and part.error_code == 0 else -1


def _read_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed by broker")
        buf += chunk
    return bytes(buf)


#: librdkafka 2.x's answer to a watermark query for a partition whose leader
#: Metadata gives as -1 (LEADER_NOT_AVAILABLE, an election in progress): it
#: counts that leader as permanently missing and fails the query at once, and
#: asks the cluster again only when its metadata is refreshed (``list_topics``)
_LEADERLESS = "_UNKNOWN_PARTITION"


def _high_watermark(consumer: Any, tp: Any, timeout_s: float) -> int:
    """``tp``'s high watermark, asked again while the partition has no leader:
    after a broker comes back, the partitions it prefers to lead move back to
    it, each through an election, as Kafka's brokers take back their preferred
    leaderships after a restart; a Kafka client meets the same between two
    leaders. The query takes the leader from the client's cached metadata and
    never refreshes it: the topic's metadata is asked for again before each
    new try, or a leaderless answer cached once fails every try."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return int(consumer.get_watermark_offsets(tp, timeout=10)[1])
        except KafkaException as e:
            if e.args[0].name() != _LEADERLESS or time.monotonic() > deadline:
                raise
        time.sleep(0.2)
        consumer.list_topics(tp.topic, timeout=10)


def read_log(bootstrap: str, topic: str, partitions: int,
             timeout_s: float = 60.0) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of ``topic`` as (offset, value) per partition, from the log
    start up to the high watermark each partition has when reading starts. A
    (re)started broker answers Metadata only once it has caught up with the
    metadata log, so every partition is known to whichever broker answers; a
    partition may be between leaders though (``_high_watermark``)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "verifier",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "log_level": 0})
    try:
        ends = {p: _high_watermark(consumer, TopicPartition(topic, p), timeout_s)
                for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        done = {p for p, end in ends.items() if end <= 0}
        deadline = time.monotonic() + timeout_s
        while len(done) < partitions:
            assert time.monotonic() < deadline, \
                f"read only {[len(v) for v in out.values()]} of high watermarks {ends}"
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                # a partition may end in a batch that holds no record (the no-op batch a
                # new Raft leader commits its term with, after a restart moved leaders
                # back): the consumer's position passes it though no record came
                for tp in consumer.position([TopicPartition(topic, q)
                                             for q in sorted(set(ends) - done)]):
                    if tp.offset >= ends[tp.partition]:
                        done.add(tp.partition)
                continue
            p = msg.partition()
            out[p].append((msg.offset(), msg.value()))
            if msg.offset() + 1 >= ends[p]:
                done.add(p)
        return out
    finally:
        consumer.close()


def consume_all(bootstrap: str, topic: str, partitions: int,
                timeout_s: float = 60.0) -> dict[int, list[bytes]]:
    """Every record value of ``topic`` per partition (``read_log`` without offsets)."""
    return {p: [v for _o, v in recs]
            for p, recs in read_log(bootstrap, topic, partitions, timeout_s).items()}


@contextlib.contextmanager
def diagnostics(cluster: Cluster) -> Iterator[None]:
    """On failure, print every broker's stderr tail (shown in pytest's report)."""
    try:
        yield
    except BaseException:
        for node, b in cluster.brokers.items():
            state = "running" if b.running else f"down (last exit {b.last_returncode})"
            print(f"\n===== broker {node} {b.bootstrap} [{state}] {b.log_path}\n{b.tail(50)}")
        raise
