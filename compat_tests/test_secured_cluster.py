"""A 3-broker cluster whose inter-broker link is secured, with clients on SASL_SSL.

Each broker has three listeners: INTERNAL (the inter-broker one, named by
``inter.broker.listener.name``: SASL_SSL with PLAIN, or SSL with client
certificates both ways), CLIENT (SASL_SSL, PLAIN users) and PLAINTEXT (the
harness's probes: DescribeQuorum, the ready checks; trusted as a super user
in this test only). The StandardAuthorizer is on, with the brokers'
principal (``User:broker``, by SASL or by the certificate mapping rule) as a
super user, so Raft frames pass the CLUSTER_ACTION check.

Proven: the cluster forms over the secured link; kafka-python as ``alice``
over SASL_SSL (allowed by ACLs) produces to a topic replicated on all three
and consumes it back; after ``kill -9`` of a partition leader the survivors
elect a new one over the same link and every acknowledged record is still
there. A broker that authenticates with the wrong inter-broker password
never joins: its frames are refused and it stays unregistered.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from compat_tests._broker import Broker, free_port
from compat_tests._cluster import Cluster, diagnostics
from compat_tests._tls import TestPki

pytestmark = pytest.mark.timeout(240)

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def _plain(users: dict[str, str], me: tuple[str, str] | None = None) -> str:
    own = f'username="{me[0]}" password="{me[1]}" ' if me else ""
    entries = " ".join(f'user_{u}="{p}"' for u, p in users.items())
    return f"org.apache.kafka.common.security.plain.PlainLoginModule required {own}{entries};"


class SecuredCluster(Cluster):
    """``Cluster`` with per-broker config files (INTERNAL, CLIENT, PLAINTEXT listeners)."""

    def __init__(self, root: Path, pki: TestPki, internal: str,
                 broker_password: dict[int, str] | None = None,
                 extra_args: tuple[str, ...] = ()) -> None:
        size = 3
        plain = [free_port() for _ in range(size)]
        inner = [free_port() for _ in range(size)]
        self.client_ports = [free_port() for _ in range(size)]
        self.voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(inner))
        self.brokers = {}
        for i in range(size):
            node = i + 1
            password = (broker_password or {}).get(node, "broker-secret")
            config: dict[str, Any] = {
                "listeners": f"INTERNAL://127.0.0.1:{inner[i]},"
                             f"CLIENT://127.0.0.1:{self.client_ports[i]},"
                             f"PLAINTEXT://127.0.0.1:{plain[i]}",
                "listener.security.protocol.map":
                    f"INTERNAL:{internal},CLIENT:SASL_SSL,PLAINTEXT:PLAINTEXT",
                "inter.broker.listener.name": "INTERNAL",
                "sasl.enabled.mechanisms": "PLAIN",
                "sasl.mechanism.inter.broker.protocol": "PLAIN",
                "listener.name.internal.plain.sasl.jaas.config": _plain(
                    {"broker": "broker-secret"}, ("broker", password)),
                "listener.name.client.plain.sasl.jaas.config": _plain(
                    {"alice": "alice-secret"}),
                "listener.name.internal.ssl.client.auth": "required",
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(pki.server.keystore),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(pki.ca),
                # the brokers' certificate (OU=broker in its subject) is User:broker
                "ssl.principal.mapping.rules": "RULE:^.*OU=broker.*$/broker/,DEFAULT",
                "authorizer.class.name": STANDARD_AUTHORIZER,
                "super.users": "User:broker;User:ANONYMOUS",
                "controller.quorum.voters": self.voters,
                "default.replication.factor": 3,
                # a killed broker is fenced (and unlisted) within 3 s
                "broker.session.timeout.ms": 3000,
                "broker.heartbeat.interval.ms": 500,
            }
            path = root / f"broker-{node}.yaml"
            path.write_text(yaml.safe_dump(config))
            self.brokers[node] = Broker(root / f"broker-{node}", port=plain[i], extra_args=(
                "--node-id", str(node), "--config", str(path), "--admin-port", "-1",
                *extra_args))

    @property
    def sasl_bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for n, p in enumerate(self.client_ports, 1)
                        if self.brokers[n].running)


def _client(cluster: SecuredCluster, pki: TestPki) -> dict[str, Any]:
    return {"bootstrap_servers": cluster.sasl_bootstrap, "security_protocol": "SASL_SSL",
            "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice",
            "sasl_plain_password": "alice-secret", "ssl_cafile": str(pki.ca)}


def _allow_alice(cluster: SecuredCluster, topic: str) -> None:
    from kafka.admin import (
        ACL,
        ACLOperation,
        ACLPermissionType,
        KafkaAdminClient,
        ResourcePattern,
        ResourceType,
    )

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)  # PLAINTEXT, super user
    try:
        acls = [ACL("User:alice", "*", op, ACLPermissionType.ALLOW,
                    ResourcePattern(rtype, name))
                for rtype, name, op in ((ResourceType.TOPIC, topic, ACLOperation.ALL),
                                        (ResourceType.GROUP, "*", ACLOperation.ALL))]
        result = admin.create_acls(acls)
        assert not result["failed"], result
    finally:
        admin.close()


def _produce(cluster: SecuredCluster, pki: TestPki, topic: str, values: list[bytes]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(acks="all", **_client(cluster, pki))
    try:
        for v in values:
            producer.send(topic, v).get(timeout=30)
    finally:
        producer.close()


def _consume(cluster: SecuredCluster, pki: TestPki, topic: str, count: int) -> list[bytes]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, group_id=f"g-{time.monotonic_ns()}",
                             auto_offset_reset="earliest", consumer_timeout_ms=20000,
                             **_client(cluster, pki))
    got: list[bytes] = []
    try:
        for message in consumer:
            got.append(message.value)
            if len(got) >= count:
                break
    finally:
        consumer.close()
    return got


def _wait_unlisted(cluster: SecuredCluster, node: int, timeout_s: float = 30.0) -> None:
    """Until Metadata (a live broker's, on PLAINTEXT) no longer lists ``node``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if node not in cluster._admin().list_topics(timeout=2).brokers:
                return
        except Exception:  # noqa: BLE001 - keep polling until the deadline
            pass
        time.sleep(0.2)
    raise AssertionError(f"broker {node} still listed {timeout_s:.0f} s after its kill")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TestPki:
    return TestPki.create(tmp_path_factory.mktemp("pki"))


@pytest.mark.parametrize("internal", ["SASL_SSL", "SSL"])
def test_a_cluster_on_a_secured_link_replicates_and_fails_over(
        tmp_path: Path, pki: TestPki, internal: str) -> None:
    cluster = SecuredCluster(tmp_path, pki, internal)
    with diagnostics(cluster):
        try:
            cluster.start()
            topic = "secured"
            cluster.create_topic(topic, 3, 3)
            _allow_alice(cluster, topic)
            first = [f"a-{i}".encode() for i in range(60)]
            _produce(cluster, pki, topic, first)
            leader = cluster.leaders(topic)[0]
            cluster.brokers[leader].kill()
            cluster.wait_for_leaders(topic, 3, exclude=leader)
            second = [f"b-{i}".encode() for i in range(60)]
            _produce(cluster, pki, topic, second)
            # kafka-python 3.0.12 raises, not retries, when its FindCoordinator goes to a
            # broker that refuses connections: read once the dead one is fenced
            _wait_unlisted(cluster, leader)
            got = _consume(cluster, pki, topic, 120)
            assert sorted(got) == sorted(first + second)
            survivor = next(n for n, b in cluster.brokers.items() if b.running)
            assert "inter-broker frame from" not in cluster.brokers[survivor].tail(400)
        finally:
            cluster.close()


def test_a_broker_with_the_wrong_inter_broker_password_never_joins(
        tmp_path: Path, pki: TestPki) -> None:
    cluster = SecuredCluster(tmp_path, pki, "SASL_SSL", broker_password={3: "guess"})
    with diagnostics(cluster):
        try:
            for b in cluster.brokers.values():
                b.start(wait=False)
            for b in cluster.brokers.values():
                b.wait_ready()
            cluster.wait_for_controller()
            with pytest.raises(AssertionError, match="not all 3 brokers registered"):
                cluster.wait_for_brokers(timeout_s=8)
            assert "cannot secure the link to peer" in cluster.brokers[3].tail(200)
            assert "Invalid username or password" in cluster.brokers[3].tail(200)
        finally:
            cluster.close()
