"""The HTTP API's ACLs (REST Proxy v3 ``/acls``) against kafka-python's admin client.

What HTTP creates or deletes is checked with ``describe_acls``, what the Kafka
client creates is searched over HTTP. The ACL APIs need an authorizer, which
``hbroker`` lacks: this module runs its own single broker and 3-broker clusters
(``rf1``, ``rf3``) with the StandardAuthorizer and ``allow.everyone.if.no.acl.found``
(the harness, ``User:ANONYMOUS``, may do what no ACL covers). Each test has its
own principal and resources; only the 403 test puts ACLs on the cluster (denying
``User:ANONYMOUS`` from 127.0.0.2, the HTTP client's bound source address) and
removes them. HTTP goes to the first broker; the others are polled.
"""

from __future__ import annotations

import http.client
import json
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)

from .._broker import Broker, running, unique_topic
from .._cluster import Cluster
from .._deployment import SINGLE_AND_RF3, Deployment
from .test_rest_v3 import _until

pytestmark = pytest.mark.timeout(240)

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
#: a super user nobody is (a secured inter-broker link adds its own to it)
AUTHORIZER_ARGS = ("--set", f"authorizer.class.name={STANDARD_AUTHORIZER}",
                   "--set", "allow.everyone.if.no.acl.found=true",
                   "--set", "super.users=User:nobody-at-all")
FIELDS = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation",
          "permission")
Row = tuple[str, ...]  # an ACL: FIELDS' values, enum names
ANY = {"resource_type": "ANY", "pattern_type": "ANY", "operation": "ANY", "permission": "ANY"}


@pytest.fixture(scope="module", params=SINGLE_AND_RF3)  # ACLs do not depend on the RF
def adep(request: pytest.FixtureRequest,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    kind = request.param
    root = tmp_path_factory.mktemp(f"acls-{kind}")
    if kind == "single":
        for b in running(Broker(root, extra_args=("--admin-port", "0", *AUTHORIZER_ARGS))):
            yield Deployment.single(b)
        return
    cluster = Cluster(root, extra_args=(*Deployment.cluster_args(kind), *AUTHORIZER_ARGS))
    try:
        cluster.start()
        yield Deployment.of_cluster(cluster, kind)
    finally:
        cluster.kill()


@pytest.fixture(scope="module")
def kadmin(adep: Deployment) -> Iterator[KafkaAdminClient]:
    admin = KafkaAdminClient(bootstrap_servers=adep.bootstrap)
    yield admin
    admin.close()


class Rest:
    """A REST v3 client over http.client, from ``source`` (an address to bind)."""

    def __init__(self, broker: Broker, source: str | None = None) -> None:
        url = urllib.parse.urlsplit(broker.admin_url)
        self.host, self.port = url.hostname or "127.0.0.1", url.port
        self.source = source
        self.headers: dict[str, str] = {}
        status, body = self.call("GET", "/clusters")
        assert status == 200, body
        self.acls = f"/clusters/{body['data'][0]['cluster_id']}/acls"

    def call(self, method: str, path: str, body: Any = None, **query: Any) -> tuple[int, Any]:
        """``path`` under /v3 (or an absolute URL of this broker); ``body`` JSON, or bytes."""
        if path.startswith("http"):
            split = urllib.parse.urlsplit(path)
            target = split.path + ("?" + split.query if split.query else "")
        else:
            target = "/v3" + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=40, source_address=(
            (self.source, 0) if self.source else None))
        try:
            conn.request(method, target, body=data, headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            text = r.read().decode()
            self.headers = {k.lower(): v for k, v in r.getheaders()}
            return r.status, json.loads(text) if text else None
        finally:
            conn.close()

    def search(self, **query: str) -> list[Row]:
        status, body = self.call("GET", self.acls, **query)
        assert status == 200, body
        return [_row(d) for d in body["data"]]


def _row(data: dict[str, Any]) -> Row:
    return tuple(data[f] for f in FIELDS)


def _doc(row: Row) -> dict[str, str]:
    return dict(zip(FIELDS, row, strict=True))


def _kafka_filter(principal: str, rt: ResourceType = ResourceType.ANY) -> ACLFilter:
    return ACLFilter(principal, None, ACLOperation.ANY, ACLPermissionType.ANY,
                     ResourcePatternFilter(rt, None, ACLResourcePatternType.ANY))


def _described(admin: KafkaAdminClient, principal: str) -> set[Row]:
    """The ACLs of ``principal`` as the Kafka client describes them."""
    acls, _ = admin.describe_acls(_kafka_filter(principal))
    return {(a.resource_pattern.resource_type.name, a.resource_pattern.resource_name,
             a.resource_pattern.pattern_type.name, a.principal, a.host, a.operation.name,
             a.permission_type.name) for a in acls}


def _create(admin: KafkaAdminClient, rows: list[Row]) -> None:
    result = admin.create_acls([ACL(p, host, ACLOperation[op], ACLPermissionType[perm],
                                    ResourcePattern(ResourceType[rt], name,
                                                    ACLResourcePatternType[pt]))
                                for rt, name, pt, p, host, op, perm in rows])
    assert not result["failed"], result


def _everywhere(dep: Deployment, principal: str, expected: set[Row]) -> None:
    """Every broker's REST API lists exactly ``expected`` of ``principal`` (polled)."""
    for b in dep.brokers:
        rest = Rest(b)
        _until(lambda rest=rest: set(rest.search(principal=principal)), expected.__eq__)


def test_acls_created_over_http_are_the_ones_kafka_clients_describe(
        adep: Deployment, kadmin: KafkaAdminClient) -> None:
    rest = Rest(adep.brokers[0])
    p = "User:" + unique_topic("created")
    one = ("TOPIC", unique_topic("t"), "LITERAL", p, "*", "READ", "ALLOW")
    batch = [("GROUP", unique_topic("g"), "PREFIXED", p, "127.0.0.1", "DESCRIBE", "DENY"),
             ("TRANSACTIONAL_ID", unique_topic("tx"), "LITERAL", p, "*", "WRITE", "ALLOW")]
    assert rest.call("POST", rest.acls, _doc(one)) == (201, None)
    status, located = rest.call("GET", rest.headers["location"])  # the search for it alone
    assert status == 200 and [_row(d) for d in located["data"]] == [one]
    assert rest.call("POST", rest.acls + ":batch", {"data": [_doc(r) for r in batch]}
                     ) == (201, None)
    expected: set[Row] = {one, *batch}
    assert set(rest.search(principal=p)) == expected  # answered once this broker shows them
    _until(lambda: _described(kadmin, p), expected.__eq__)
    _everywhere(adep, p, expected)
    assert rest.call("POST", rest.acls, _doc(one)) == (201, None)  # exists: still 201, once
    assert sorted(rest.search(principal=p)) == sorted(expected)


def test_search_finds_what_kafka_clients_created_by_filter(
        adep: Deployment, kadmin: KafkaAdminClient) -> None:
    rest = Rest(adep.brokers[0])
    p, q = "User:" + unique_topic("alice"), "User:" + unique_topic("bob")
    t, g = unique_topic("t"), unique_topic("g")
    prefixed = ("TOPIC", t[:8], "PREFIXED", p, "*", "WRITE", "ALLOW")
    literal = ("TOPIC", t, "LITERAL", p, "*", "READ", "ALLOW")
    group = ("GROUP", g, "LITERAL", p, "10.0.0.1", "READ", "DENY")
    other = ("TOPIC", t, "LITERAL", q, "*", "DESCRIBE", "ALLOW")
    _create(kadmin, [group, literal, other, prefixed])
    _everywhere(adep, p, {prefixed, literal, group})
    status, body = rest.call("GET", rest.acls, principal=p)
    assert status == 200 and body["kind"] == "KafkaAclList", body
    assert body["metadata"]["self"].endswith(rest.acls + "?" + urllib.parse.urlencode(
        {"principal": p}))
    # sorted by resource type (TOPIC before GROUP), name, pattern type, ..., permission
    assert [_row(d) for d in body["data"]] == [prefixed, literal, group]
    item = body["data"][1]
    assert {k: v for k, v in item.items() if k not in FIELDS} == {
        "kind": "KafkaAcl", "metadata": {"self": item["metadata"]["self"]},
        "cluster_id": rest.acls.split("/")[2]}
    status, found = rest.call("GET", item["metadata"]["self"])  # finds exactly that ACL
    assert status == 200 and [_row(d) for d in found["data"]] == [literal]
    assert rest.search(principal=p, resource_type="TOPIC") == [prefixed, literal]
    assert rest.search(principal=p, resource_type="GROUP") == [group]
    assert rest.search(principal=p, host="10.0.0.1") == [group]
    assert rest.search(principal=p, operation="READ", permission="DENY") == [group]
    assert rest.search(resource_type="TOPIC", resource_name=t) == [literal, other]
    assert rest.search(resource_type="TOPIC", resource_name=t, pattern_type="MATCH"
                       ) == [prefixed, literal, other]
    assert rest.search(resource_type="TOPIC", resource_name=t, pattern_type="PREFIXED") == []
    assert set(rest.search(principal=q)) == {other}


def test_delete_by_filter_removes_and_lists_what_it_deleted(
        adep: Deployment, kadmin: KafkaAdminClient) -> None:
    rest = Rest(adep.brokers[0])
    p = "User:" + unique_topic("doomed")
    t, g = unique_topic("t"), unique_topic("g")
    read = ("TOPIC", t, "LITERAL", p, "*", "READ", "ALLOW")
    write = ("TOPIC", t, "LITERAL", p, "*", "WRITE", "ALLOW")
    group = ("GROUP", g, "LITERAL", p, "*", "READ", "ALLOW")
    _create(kadmin, [write, group, read])
    _until(lambda: set(rest.search(principal=p)), {read, write, group}.__eq__)
    status, body = rest.call("DELETE", rest.acls, **{**ANY, "resource_type": "TOPIC"},
                             principal=p)
    assert status == 200 and set(body) == {"data"}, body  # no kind, no metadata
    assert [_row(d) for d in body["data"]] == [read, write]
    assert all(d["kind"] == "KafkaAcl" and set(d["metadata"]) == {"self"} for d in body["data"])
    assert set(rest.search(principal=p)) == {group}
    _until(lambda: _described(kadmin, p), {group}.__eq__)
    assert rest.call("DELETE", rest.acls, **{**ANY, "resource_type": "TOPIC"},
                     principal=p) == (200, {"data": []})
    status, body = rest.call("DELETE", rest.acls, resource_type="ANY", resource_name=g,
                             pattern_type="LITERAL", operation="READ", permission="ALLOW",
                             principal=p)
    assert status == 200 and [_row(d) for d in body["data"]] == [group]
    _until(lambda: _described(kadmin, p), set().__eq__)
    _everywhere(adep, p, set())


def test_bad_input_is_400_and_changes_nothing(adep: Deployment,
                                              kadmin: KafkaAdminClient) -> None:
    rest = Rest(adep.brokers[0])
    p = "User:" + unique_topic("careful")
    keep = ("TOPIC", unique_topic("t"), "LITERAL", p, "*", "READ", "ALLOW")
    new = _doc(("GROUP", unique_topic("g"), "LITERAL", p, "*", "READ", "ALLOW"))
    assert rest.call("POST", rest.acls, _doc(keep)) == (201, None)
    bad_op = {**new, "operation": "READS"}
    no_host = {k: v for k, v in new.items() if k != "host"}
    query = {**ANY, "principal": p}
    batch = rest.acls + ":batch"
    for method, path, kw, words, code in (
            ("POST", rest.acls, {"body": bad_op}, ("operation", "READS"), 400),
            ("POST", rest.acls, {"body": no_host}, ("host",), 400),
            ("POST", rest.acls, {"body": b"{not json"}, ("JSON",), 400),
            ("POST", rest.acls, {"body": {**new, "pattern_type": "MATCH"}},
             ("pattern_type", "MATCH"), 400),
            ("POST", rest.acls, {"body": {**new, "permission": "ANY"}}, ("permission", "ANY"),
             400),
            ("POST", rest.acls, {"body": {**new, "resource_type": "CLUSTER"}},  # Kafka's check
             ("kafka-cluster",), 40002),
            ("POST", rest.acls, {"body": {**new, "principal": "bob"}}, ("colon",), 40002),
            # one bad ACL of a batch: none is created
            ("POST", batch, {"body": {"data": [new, bad_op]}}, ("data[1]", "READS"), 400),
            ("POST", batch, {"body": {"data": "nope"}}, ("data",), 400),
            ("POST", batch, {"body": b"[1,"}, ("JSON",), 400),
            ("DELETE", rest.acls, {k: v for k, v in query.items() if k != "permission"},
             ("permission",), 400),
            ("DELETE", rest.acls, {k: v for k, v in query.items() if k != "resource_type"},
             ("resource_type",), 400),
            ("DELETE", rest.acls, {**query, "operation": "READS"}, ("operation", "READS"), 400),
            ("DELETE", rest.acls, {**query, "pattern_type": "UNKNOWN"}, ("UNKNOWN",), 400),
            ("GET", rest.acls, {"resource_type": "TOPICS"}, ("resource_type", "TOPICS"), 400)):
        status, body = rest.call(method, path, **kw)
        assert (status, body["error_code"]) == (400, code), (method, kw, body)
        assert all(w in body["message"] for w in words), (method, kw, body)
    assert rest.search(principal=p) == [keep]
    _until(lambda: _described(kadmin, p), {keep}.__eq__)
    _everywhere(adep, p, {keep})


def test_caller_without_alter_on_the_cluster_is_refused_403(
        adep: Deployment, kadmin: KafkaAdminClient) -> None:
    rest = Rest(adep.brokers[0])
    other = Rest(adep.brokers[0], source="127.0.0.2")  # User:ANONYMOUS from 127.0.0.2
    anon = "User:ANONYMOUS"
    cluster = ("CLUSTER", "kafka-cluster", "LITERAL", anon)
    allow = (*cluster, "*", "ALL", "ALLOW")  # else the cluster ACLs would deny everyone
    deny_alter = (*cluster, "127.0.0.2", "ALTER", "DENY")
    deny_describe = (*cluster, "127.0.0.2", "DESCRIBE", "DENY")
    p = "User:" + unique_topic("refused")
    new = ("TOPIC", unique_topic("t"), "LITERAL", p, "*", "READ", "ALLOW")
    try:
        _create(kadmin, [allow, deny_alter])
        _until(lambda: set(rest.search(principal=anon)), {allow, deny_alter}.__eq__)
        assert set(other.search(principal=anon)) == {allow, deny_alter}  # may DESCRIBE
        for method, path, kw in (
                ("POST", other.acls, {"body": _doc(new)}),
                ("POST", other.acls + ":batch", {"body": {"data": [_doc(new)]}}),
                ("DELETE", other.acls, {**ANY, "principal": p})):
            status, body = other.call(method, path, **kw)
            assert (status, body["error_code"]) == (403, 40301), (method, path, body)
        assert rest.search(principal=p) == []
        assert set(rest.search(principal=anon)) == {allow, deny_alter}
        _create(kadmin, [deny_describe])
        _until(lambda: len(rest.search(principal=anon)), (3).__eq__)
        status, body = other.call("GET", other.acls)
        assert (status, body["error_code"]) == (403, 40301), body
    finally:
        result = kadmin.delete_acls([_kafka_filter(anon, ResourceType.CLUSTER)])
        assert result[0][2].errno == 0, result
    _everywhere(adep, anon, set())
    assert rest.call("POST", rest.acls, _doc(new)) == (201, None)  # allowed again
    _until(lambda: _described(kadmin, p), {new}.__eq__)


def test_without_an_authorizer_acls_are_refused(tmp_path: Path) -> None:
    row = ("TOPIC", "t", "LITERAL", "User:alice", "*", "READ", "ALLOW")
    for b in running(Broker(tmp_path / "b", extra_args=("--admin-port", "0"))):
        rest = Rest(b)
        for method, kw in (("GET", {}), ("POST", {"body": _doc(row)}), ("DELETE", ANY)):
            assert rest.call(method, rest.acls, **kw) == (400, {
                "error_code": 40002, "message": "No Authorizer is configured."}), method
