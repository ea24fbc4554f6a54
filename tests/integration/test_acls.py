"""CreateAcls, DescribeAcls, DeleteAcls and ``kcompat acls`` against real broker
processes: a broker with Kafka's StandardAuthorizer and ``User:ANONYMOUS`` (the
unauthenticated test client) among its super users manages ACLs; one without
an authorizer answers SECURITY_DISABLED; one where the client is no super user
needs CLUSTER permissions. The ACLs live in the metadata log: they survive a
restart, from the log and from a metadata checkpoint.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.create_acls.v3 import request as ca
from kio.schema.delete_acls.v3 import request as dl
from kio.schema.describe_acls.v3 import request as da
from kio.static.primitive import i8

from compat_tests._broker import Broker
from kcompat.cli._kio import Connection
from kcompat.security.acl import STANDARD_AUTHORIZER

pytestmark = pytest.mark.timeout(60)

AUTHORIZER = ("--admin-port", "-1", "--set", f"authorizer.class.name={STANDARD_AUTHORIZER}")
MANAGER = (*AUTHORIZER, "--set", "super.users=User:admin;User:ANONYMOUS")
TOPIC, GROUP, CLUSTER, TXN = 2, 3, 4, 5
ANY, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
ALL, READ, WRITE, ALTER, DESCRIBE = 2, 3, 4, 7, 8
DENY, ALLOW = 2, 3
Row = tuple[int, str, int, str, str, int, int]  # type, name, pattern, principal, host, op, perm


def connect(broker: Broker) -> Connection:
    host, port = broker.bootstrap.rsplit(":", 1)
    return Connection(host, int(port), 15)


def create(conn: Connection, *rows: Row) -> list[tuple[str, str | None]]:
    r = conn.call(ca.CreateAclsRequest(creations=tuple(
        ca.AclCreation(resource_type=i8(t), resource_name=n, resource_pattern_type=i8(pt),
                       principal=p, host=h, operation=i8(op), permission_type=i8(perm))
        for t, n, pt, p, h, op, perm in rows)))
    return [(x.error_code.name, x.error_message) for x in r.results]


def _filter(cls: Any, t: int = ANY, name: str | None = None, pt: int = ANY,
            principal: str | None = None, host: str | None = None, op: int = ANY,
            perm: int = ANY) -> Any:
    return cls(resource_type_filter=i8(t), resource_name_filter=name, pattern_type_filter=i8(pt),
               principal_filter=principal, host_filter=host, operation=i8(op),
               permission_type=i8(perm))


def describe(conn: Connection, **f: Any) -> tuple[str, str | None, list[Row]]:
    r = conn.call(_filter(da.DescribeAclsRequest, **f))
    rows = sorted((x.resource_type, x.resource_name, x.pattern_type, a.principal, a.host,
                   a.operation, a.permission_type) for x in r.resources for a in x.acls)
    return r.error_code.name, r.error_message, rows


def delete(conn: Connection, *filters: dict[str, Any]) -> list[tuple[str, str | None, list[Row]]]:
    r = conn.call(dl.DeleteAclsRequest(filters=tuple(
        _filter(dl.DeleteAclsFilter, **f) for f in filters)))
    return [(x.error_code.name, x.error_message, sorted(
        (m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host, m.operation,
         m.permission_type) for m in x.matching_acls)) for x in r.filter_results]


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A broker with an authorizer whose ACLs the test client may manage; its
    metadata log checkpoints after (almost) every record."""
    b = Broker(tmp_path_factory.mktemp("acls") / "broker", extra_args=(
        *MANAGER, "--set", "metadata.log.max.record.bytes.between.snapshots=1"))
    b.start()
    try:
        yield b
    finally:
        b.close()


ALICE_READS = (TOPIC, "orders", LITERAL, "User:alice", "*", READ, ALLOW)
BOB_DENIED = (GROUP, "app-", PREFIXED, "User:bob", "10.0.0.1", ALL, DENY)
EVERYONE_DESCRIBES = (TOPIC, "*", LITERAL, "User:*", "*", DESCRIBE, ALLOW)
CARL_WRITES = (TXN, "tx-", PREFIXED, "User:carl", "*", WRITE, ALLOW)


def test_create_describe_delete(manager: Broker) -> None:
    conn = connect(manager)
    assert create(conn, ALICE_READS, BOB_DENIED, EVERYONE_DESCRIBES, CARL_WRITES,
                  ALICE_READS) == [("none", "")] * 5  # a duplicate succeeds, is stored once
    code, message, rows = describe(conn)
    assert (code, message) == ("none", "")
    assert rows == sorted([ALICE_READS, BOB_DENIED, EVERYONE_DESCRIBES, CARL_WRITES])
    # MATCH: every ACL that covers topic orders (its name and the literal *)
    assert describe(conn, t=TOPIC, name="orders", pt=MATCH)[2] == sorted(
        [ALICE_READS, EVERYONE_DESCRIBES])
    assert describe(conn, t=GROUP, name="app-1", pt=MATCH)[2] == [BOB_DENIED]
    assert describe(conn, principal="User:bob", host="10.0.0.1")[2] == [BOB_DENIED]
    assert describe(conn, op=WRITE, perm=ALLOW)[2] == [CARL_WRITES]
    # an ACL two filters match is listed by both, deleted once
    assert delete(conn, {"t": TOPIC}, {"principal": "User:alice"}, {"t": 99}) == [
        ("none", None, sorted([ALICE_READS, EVERYONE_DESCRIBES])),
        ("none", None, [ALICE_READS]),
        ("invalid_request", "Unknown patternFilter.", []),
    ]
    assert describe(conn)[2] == sorted([BOB_DENIED, CARL_WRITES])


def test_bad_bindings_are_refused_as_kafka_refuses_them(manager: Broker) -> None:
    conn = connect(manager)
    good = (TOPIC, "bad-input-ok", LITERAL, "User:dave", "*", READ, ALLOW)
    assert create(conn, good,
                  (CLUSTER, "other", LITERAL, "User:dave", "*", ALTER, ALLOW),
                  (TOPIC, "", LITERAL, "User:dave", "*", READ, ALLOW),
                  (99, "t", LITERAL, "User:dave", "*", READ, ALLOW),
                  (TOPIC, "t", 99, "User:dave", "*", READ, ALLOW),
                  (TOPIC, "t", LITERAL, "dave", "*", READ, ALLOW),
                  (TOPIC, "t", LITERAL, "User:dave", "", READ, ALLOW)) == [
        ("none", ""),
        ("invalid_request", "The only valid name for the CLUSTER resource is kafka-cluster"),
        ("invalid_request", "Invalid empty resource name"),
        ("invalid_request", "Invalid resourceType UNKNOWN"),
        ("invalid_request", "Invalid patternType UNKNOWN"),
        ("invalid_request", "Could not parse principal from `dave` (no colon is present "
                            "separating the principal type from the principal name)"),
        ("invalid_request", "Host pattern cannot be null or empty"),
    ]
    # ANY or MATCH where a value is due: the whole request fails, nothing is created
    whole = (TOPIC, "bad-input-whole", LITERAL, "User:dave", "*", READ, ALLOW)
    assert create(conn, whole, (TOPIC, "t", MATCH, "User:dave", "*", READ, ALLOW)) == [
        ("unknown_server_error", None)] * 2
    assert describe(conn, principal="User:dave")[2] == [good]


def test_acls_survive_a_restart(manager: Broker) -> None:
    conn = connect(manager)
    kept = (TOPIC, "restart-kept", LITERAL, "User:erin", "*", WRITE, ALLOW)
    gone = (TOPIC, "restart-gone", LITERAL, "User:erin", "*", WRITE, ALLOW)
    assert create(conn, kept, gone) == [("none", "")] * 2
    assert delete(conn, {"name": "restart-gone"})[0][2] == [gone]
    # a checkpoint is cut a little behind what was applied: one more change
    later = (TOPIC, "restart-later", LITERAL, "User:erin", "*", WRITE, ALLOW)
    assert create(conn, later) == [("none", "")]
    conn.close()
    deadline = time.monotonic() + 20
    while not _checkpointed(manager, '"restart-kept"'):
        assert time.monotonic() < deadline, "no metadata checkpoint holds the ACL"
        time.sleep(0.1)
    manager.restart()
    assert describe(connect(manager), principal="User:erin")[2] == sorted([kept, later])


def _checkpointed(broker: Broker, text: str) -> bool:
    return any(text in p.read_text()
               for p in (broker.data_dir / "__cluster_metadata-0").glob("*.checkpoint"))


def test_without_an_authorizer_security_is_disabled(broker: Broker) -> None:
    conn = connect(broker)
    disabled = ("security_disabled", "No Authorizer is configured.")
    assert create(conn, ALICE_READS, BOB_DENIED) == [disabled] * 2
    assert describe(conn) == (*disabled, [])
    assert delete(conn, {}, {"t": TOPIC}) == [(*disabled, [])] * 2


def test_cluster_permissions_are_needed(tmp_path: Path) -> None:
    """No super user: while no ACL covers the cluster anyone may manage ACLs
    (allow.everyone.if.no.acl.found). Then DENYs for the client's own address
    (not ``*``): one of DESCRIBE refuses describing, one of ALTER creating and
    deleting (Kafka 4.4's answer to those: UNKNOWN_SERVER_ERROR)."""
    b = Broker(tmp_path / "broker", extra_args=(
        *AUTHORIZER, "--set", "allow.everyone.if.no.acl.found=true")).start()
    try:
        conn = connect(b)
        me = ("User:ANONYMOUS", "127.0.0.1")
        allow_all = (CLUSTER, "kafka-cluster", LITERAL, "User:ANONYMOUS", "*", ALL, ALLOW)
        deny_describe = (CLUSTER, "kafka-cluster", LITERAL, *me, DESCRIBE, DENY)
        deny_alter = (CLUSTER, "kafka-cluster", LITERAL, *me, ALTER, DENY)
        assert create(conn, allow_all, deny_describe) == [("none", "")] * 2
        code, message, rows = describe(conn)
        assert code == "cluster_authorization_failed" and rows == []
        assert message is not None and message.endswith("needs DESCRIBE permission.")
        assert create(conn, deny_alter) == [("none", "")]
        assert create(conn, ALICE_READS) == [("unknown_server_error", None)]
        assert delete(conn, {}) == [("unknown_server_error", None, [])]
    finally:
        b.close()


def kc(broker: Broker, *args: str, expect: int = 0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "kcompat", "acls", *args,
                           "--bootstrap-server", broker.bootstrap],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == expect, (args, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    return proc


def test_cli_add_list_remove(manager: Broker) -> None:
    added = json.loads(kc(manager, "add", "--allow-principal", "User:cli", "--operation", "Read",
                          "--operation", "describe-configs", "--topic", "cli-orders",
                          "--group", "cli-app", "--resource-pattern-type", "prefixed",
                          "--json").stdout)["added"]
    assert len(added) == 4
    kc(manager, "add", "--deny-principal", "User:cli2", "--host", "10.0.0.9", "--cluster")
    listed = json.loads(kc(manager, "list", "--topic", "cli-orders-eu",
                           "--resource-pattern-type", "match", "--json").stdout)
    assert sorted((x["name"], x["operation"]) for x in listed) == [
        ("cli-orders", "DESCRIBE_CONFIGS"), ("cli-orders", "READ")]
    assert {"resource_type": "CLUSTER", "name": "kafka-cluster", "pattern_type": "LITERAL",
            "principal": "User:cli2", "host": "10.0.0.9", "operation": "ALL",
            "permission": "DENY"} in json.loads(kc(manager, "list", "--json").stdout)
    table = kc(manager, "list", "--principal", "User:cli").stdout
    assert "cli-app" in table and "PREFIXED" in table
    err = kc(manager, "add", "--allow-principal", "cli", "--topic", "x", expect=1).stderr
    assert "INVALID_REQUEST" in err and "Could not parse principal" in err
    removed = json.loads(kc(manager, "remove", "--topic", "cli-orders",
                            "--resource-pattern-type", "prefixed", "--json").stdout)["removed"]
    assert len(removed) == 2
    left = json.loads(kc(manager, "list", "--principal", "User:cli", "--json").stdout)
    assert {x["name"] for x in left} == {"cli-app"}
