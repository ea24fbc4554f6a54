"""The HTTP API under the broker's security: basic auth as SASL users, the same ACLs.

A broker with SASL listeners serves REST requests only with HTTP basic auth
naming a user its SASL listeners accept — a PLAIN user of a listener's JAAS
config, or a SCRAM user made with AlterUserScramCredentials — and the request
acts as that user (``User:<name>``) under the StandardAuthorizer's ACLs,
exactly as the user's Kafka client would. Run on one broker (PLAIN and
SCRAM-SHA-512 on a SASL_PLAINTEXT listener; plain HTTP) and on a 3-broker
cluster whose clients and inter-broker link are SASL_SSL (``SecuredCluster``;
its admin ports speak HTTPS with the listeners' certificate), where produce
requests reach the partitions' leaders on other brokers in envelopes that
carry the user.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kafka.admin import (
    ACL,
    ACLOperation,
    ACLPermissionType,
    KafkaAdminClient,
    NewTopic,
    ResourcePattern,
    ResourceType,
)

from .._broker import Broker, free_port, unique_topic
from .._cluster import Cluster
from .._secured_listeners import add_scram_user
from .._tls import TestPki
from ..confluent._helpers import consumer
from ..test_secured_cluster import STANDARD_AUTHORIZER, SecuredCluster, _plain

pytestmark = pytest.mark.timeout(240)


def _single(root: Path) -> Broker:
    sasl = free_port()
    plain = free_port()
    config = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": _plain(
            {"alice": "alice-secret", "bob": "bob-secret"}),
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": "User:ANONYMOUS",  # the harness on PLAINTEXT
    }
    path = root / "broker.yaml"
    root.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return Broker(root / "b", port=plain, extra_args=("--config", str(path),
                                                      "--admin-port", "0"))


@pytest.fixture(scope="module", params=["single", "cluster"])
def secured(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[list[Broker], str]]:
    """(brokers, the PLAINTEXT bootstrap of the harness, a super user)."""
    root = tmp_path_factory.mktemp(f"rest-{request.param}")
    if request.param == "single":
        b = _single(root)
        b.start()
        try:
            yield [b], b.bootstrap
        finally:
            b.close()
        return
    pki = TestPki.create(root / "pki")
    (root / "c").mkdir()
    cluster: Cluster = SecuredCluster(root / "c", pki, "SASL_SSL",
                                      extra_args=("--admin-port", "0"))
    cluster.start()
    _TRUST[cluster.bootstrap] = ssl.create_default_context(cafile=str(pki.ca))
    try:
        yield list(cluster.brokers.values()), cluster.bootstrap
    finally:
        cluster.kill()


_TRUST: dict[str, ssl.SSLContext] = {}  # a secured cluster's bootstrap -> its test CA


def _call(broker: Broker, method: str, path: str, body: Any = None,
          auth: tuple[str, str] | None = None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(
            f"{auth[0]}:{auth[1]}".encode()).decode()
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(broker.admin_url + "/v3" + path, data=data, method=method,
                                 headers=headers)
    context = next(iter(_TRUST.values())) if broker.admin_url.startswith("https") else None
    try:
        with urllib.request.urlopen(req, timeout=40, context=context) as r:
            text, status = r.read().decode(), r.status
    except urllib.error.HTTPError as e:
        text, status = e.read().decode(), e.code
    return status, json.loads(text) if text else None


def _allow(bootstrap: str, user: str, topic: str, *ops: ACLOperation) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        result = admin.create_acls([ACL(f"User:{user}", "*", op, ACLPermissionType.ALLOW,
                                        ResourcePattern(ResourceType.TOPIC, topic))
                                    for op in ops])
        assert not result["failed"], result
    finally:
        admin.close()


def _wait_allowed(get: Any, timeout_s: float = 15.0) -> tuple[int, Any]:
    """ACLs reach every broker a moment after they commit: until not 403."""
    deadline = time.monotonic() + timeout_s
    while True:
        status, body = get()
        if status != 403 or time.monotonic() > deadline:
            return status, body
        time.sleep(0.2)


def test_basic_auth_names_the_user_and_acls_decide(secured: tuple[list[Broker], str]) -> None:
    brokers, bootstrap = secured
    topic = unique_topic("rest-acl")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 3, len(brokers))])
    finally:
        admin.close()
    http = brokers[0]
    assert http.admin_url.startswith("https://" if len(brokers) > 1 else "http://")
    status, cluster = _call(http, "GET", "/clusters")
    assert (status, cluster["error_code"]) == (401, 40101)  # no credentials: refused
    status, wrong = _call(http, "GET", "/clusters", auth=("alice", "nope"))
    assert (status, wrong["error_code"]) == (401, 40101)
    status, cluster = _call(http, "GET", "/clusters", auth=("alice", "alice-secret"))
    assert status == 200, cluster
    cl = f"/clusters/{cluster['data'][0]['cluster_id']}"
    records = {"value": {"type": "STRING", "data": "from alice"}}
    # alice may not see the topic yet: as for her Kafka client, it is not hers
    status, listed = _call(http, "GET", cl + "/topics", auth=("alice", "alice-secret"))
    assert status == 200 and topic not in {t["topic_name"] for t in listed["data"]}
    status, denied = _call(http, "POST", f"{cl}/topics/{topic}/records", records,
                           auth=("alice", "alice-secret"))
    assert (status, denied["error_code"]) == (403, 40301), denied
    _allow(bootstrap, "alice", topic, ACLOperation.DESCRIBE, ACLOperation.WRITE)
    sent = 0
    for _ in range(6):  # keyless records spread over the three partitions and leaders
        status, report = _wait_allowed(lambda: _call(
            http, "POST", f"{cl}/topics/{topic}/records", records,
            auth=("alice", "alice-secret")))
        assert status == 200 and report["error_code"] == 200, report
        sent += 1
    # bob is a user too, but the ACLs are alice's
    status, denied = _call(http, "POST", f"{cl}/topics/{topic}/records", records,
                           auth=("bob", "bob-secret"))
    if len(brokers) == 1:
        assert (status, denied["error_code"]) == (403, 40301), denied
    else:
        assert (status, denied["error_code"]) == (401, 40101), denied  # not a user there
    c = consumer(bootstrap, **{"auto.offset.reset": "earliest", "enable.partition.eof": False})
    try:
        c.subscribe([topic])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < sent:
            assert time.monotonic() < deadline, got
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        assert got == [b"from alice"] * sent
    finally:
        c.close()


def test_a_scram_user_logs_in_over_http(tmp_path: Path) -> None:
    """On the single broker, whose SASL listener enables SCRAM-SHA-512 too."""
    http = _single(tmp_path)
    http.start()
    try:
        _scram_user_over_http(http)
    finally:
        http.close()


def _scram_user_over_http(http: Broker) -> None:
    add_scram_user(http.bootstrap, "carol", "carol-secret")
    status, body = _call(http, "GET", "/clusters", auth=("carol", "carol-secret"))
    assert status == 200, body
    assert _call(http, "GET", "/clusters", auth=("carol", "alice-secret"))[0] == 401
    cl = f"/clusters/{body['data'][0]['cluster_id']}"
    topic = unique_topic("rest-scram")
    status, denied = _call(http, "POST", cl + "/topics", {"topic_name": topic},
                           auth=("carol", "carol-secret"))
    assert (status, denied["error_code"]) == (403, 40301), denied
    assert _call(http, "GET", f"{cl}/topics/{topic}", auth=("carol", "carol-secret"))[0] in (
        403, 404)
