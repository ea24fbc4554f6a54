"""ACLs enforced on a real broker, as kafka-python sees them.

One broker process with a SASL_PLAINTEXT listener (PLAIN users admin, alice and
bob), the StandardAuthorizer and ``super.users=User:admin``. The admin creates
the topics and grants alice WRITE and READ on ``orders`` and READ on the group
``g``, bob only DESCRIBE on ``orders``: alice produces and reads back in the
group, bob's producer gets TopicAuthorizationFailedError from Produce and his
consumer GroupAuthorizationFailedError, and neither sees the topic ``hidden``.
The same requests against Apache Kafka 4.4:
compat_tests/java/test_authorization_differential.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import (
    ACL,
    ACLOperation,
    ACLPermissionType,
    KafkaAdminClient,
    NewTopic,
    ResourcePattern,
    ResourceType,
)
from kafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError

from compat_tests._broker import Broker, free_port

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";')
TIMEOUT_MS = 15000


def _config(ports: dict[str, int], data: Path) -> dict[str, Any]:
    return {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "group.initial.rebalance.delay.ms": 0,
        "offsets.topic.num.partitions": 1,
        "log.dirs": str(data),
        "admin.port": -1,
    }


@pytest.fixture(scope="module")
def sasl_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("authz")
    ports = {n: free_port("127.0.0.1") for n in ("PLAINTEXT", "SASL_PLAINTEXT")}
    config = work / "broker.yaml"
    config.write_text(yaml.safe_dump(_config(ports, work / "data")))
    broker = Broker(work / "broker", port=ports["PLAINTEXT"],
                    extra_args=("--config", str(config))).start()
    bootstrap = f"127.0.0.1:{ports['SASL_PLAINTEXT']}"
    try:
        _set_up(bootstrap)
        yield bootstrap
    finally:
        broker.stop()


def login(user: str) -> dict[str, Any]:
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
            "sasl_plain_username": user, "sasl_plain_password": f"{user}-secret",
            "request_timeout_ms": TIMEOUT_MS}


def _set_up(bootstrap: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **login("admin"))
    try:
        admin.create_topics([NewTopic("orders", 1, 1), NewTopic("hidden", 1, 1)])

        def allow(who: str, rt: ResourceType, name: str, op: ACLOperation) -> ACL:
            return ACL(f"User:{who}", "*", op, ACLPermissionType.ALLOW,
                       ResourcePattern(rt, name))
        created = admin.create_acls([
            allow("alice", ResourceType.TOPIC, "orders", ACLOperation.WRITE),
            allow("alice", ResourceType.TOPIC, "orders", ACLOperation.READ),
            allow("alice", ResourceType.GROUP, "g", ACLOperation.READ),
            allow("bob", ResourceType.TOPIC, "orders", ACLOperation.DESCRIBE)])
        assert not created["failed"], created
    finally:
        admin.close()


def _producer(bootstrap: str, user: str) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=0,
                         max_block_ms=TIMEOUT_MS, **login(user))


def _consumer(bootstrap: str, user: str, *topics: str) -> KafkaConsumer:
    return KafkaConsumer(*topics, bootstrap_servers=bootstrap, group_id="g",
                         auto_offset_reset="earliest", enable_auto_commit=False,
                         consumer_timeout_ms=TIMEOUT_MS, **login(user))


def test_alice_produces_and_consumes_in_her_group(sasl_bootstrap: str) -> None:
    producer = _producer(sasl_bootstrap, "alice")
    try:
        for i in range(5):
            producer.send("orders", f"order-{i}".encode()).get(timeout=TIMEOUT_MS / 1000)
    finally:
        producer.close()
    consumer = _consumer(sasl_bootstrap, "alice", "orders")
    try:
        got = []
        for record in consumer:
            got.append(record.value.decode())
            if len(got) == 5:
                break
        assert got == [f"order-{i}" for i in range(5)]
        consumer.commit()
        assert consumer.committed(TopicPartition("orders", 0)) == 5
        assert consumer.topics() == {"orders"}  # hidden: no DESCRIBE
    finally:
        consumer.close()


def test_bob_is_refused(sasl_bootstrap: str) -> None:
    producer = _producer(sasl_bootstrap, "bob")
    try:
        # bob may DESCRIBE orders, so the refusal is Produce's, per partition
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("orders", b"not bob's").get(timeout=TIMEOUT_MS / 1000)
    finally:
        producer.close()
    consumer = _consumer(sasl_bootstrap, "bob", "orders")
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            consumer.poll(timeout_ms=TIMEOUT_MS)
        assert "hidden" not in consumer.topics()
    finally:
        consumer.close()
