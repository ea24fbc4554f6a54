"""Differential: CreateAcls, DescribeAcls and DeleteAcls at the wire level, Apache
Kafka 4.4 (StandardAuthorizer) against kcompat, one broker each with the same
settings: ``authorizer.class.name`` set, no super user but ``User:admin`` and
``allow.everyone.if.no.acl.found=true``, so the unauthenticated client may
manage ACLs while no ACL covers the cluster.

One script (``run_script``) sends the same raw requests to each and keeps what
every answer says, lists sorted where Kafka's order is a hash map's: valid
bindings of every resource type (a duplicate among them), each invalid one
(Kafka's error code and message), the ANY / MATCH values that fail a whole
request, v1 and v2 requests, DescribeAcls filters (ANY, MATCH, LITERAL,
PREFIXED, principal, host, operation, permission, unknown codes), DeleteAcls
filters overlapping and unknown, and at the end a DENY of ALTER on the cluster
for the client: what creating, deleting and describing answer then; and how
DescribeConfigs lists the authorizer's keys. Each step is a test: kcompat's
observation must equal Kafka's.

Left out: a code 0 (UNKNOWN) in a field, which makes Kafka close the connection
while parsing and kcompat answer it as an unknown code (the handlers' docstrings).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.create_acls.v1 import request as ca1
from kio.schema.create_acls.v3 import request as ca
from kio.schema.delete_acls.v3 import request as dl
from kio.schema.describe_acls.v2 import request as da2
from kio.schema.describe_acls.v3 import request as da
from kio.schema.describe_configs.v4 import request as dc
from kio.static.primitive import i8

from compat_tests._broker import Broker
from compat_tests.java._differential import kcompat_with, reference_answers
from kcompat.cli._kio import Connection
from kcompat.security.acl import STANDARD_AUTHORIZER

pytestmark = pytest.mark.timeout(180)

SETTINGS = {"authorizer.class.name": STANDARD_AUTHORIZER,
            "allow.everyone.if.no.acl.found": "true", "super.users": "User:admin"}
ANY, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
T, G, C, TX, TOKEN, USER = 2, 3, 4, 5, 6, 7
Row = tuple[int, str, int, str, str, int, int]
Obs = Any


def _creation(m: Any, row: Row) -> Any:
    t, name, pt, principal, host, op, perm = row
    return m.AclCreation(resource_type=i8(t), resource_name=name, resource_pattern_type=i8(pt),
                         principal=principal, host=host, operation=i8(op),
                         permission_type=i8(perm))


def _create(conn: Connection, *rows: Row, m: Any = ca) -> Obs:
    r = conn.call(m.CreateAclsRequest(creations=tuple(_creation(m, row) for row in rows)))
    return [(x.error_code.name, x.error_message) for x in r.results]


def _filter(cls: Any, t: int = ANY, name: str | None = None, pt: int = ANY,
            principal: str | None = None, host: str | None = None, op: int = 1,
            perm: int = 1) -> Any:
    return cls(resource_type_filter=i8(t), resource_name_filter=name, pattern_type_filter=i8(pt),
               principal_filter=principal, host_filter=host, operation=i8(op),
               permission_type=i8(perm))


def _describe(conn: Connection, m: Any = da, **f: Any) -> Obs:
    r = conn.call(_filter(m.DescribeAclsRequest, **f))
    return (r.error_code.name, r.error_message, sorted(
        (x.resource_type, x.resource_name, x.pattern_type, a.principal, a.host, a.operation,
         a.permission_type) for x in r.resources for a in x.acls))


def _delete(conn: Connection, *filters: dict[str, Any]) -> Obs:
    r = conn.call(dl.DeleteAclsRequest(filters=tuple(
        _filter(dl.DeleteAclsFilter, **f) for f in filters)))
    return [(x.error_code.name, x.error_message, sorted(
        (m.error_code.name, m.error_message, m.resource_type, m.resource_name, m.pattern_type,
         m.principal, m.host, m.operation, m.permission_type) for m in x.matching_acls))
        for x in r.filter_results]


def _until(conn: Connection, principal: str, present: bool) -> None:
    """Until this broker's answers show (or no longer show) ``principal``'s
    ACLs: Kafka answers a change once its controller committed it, and the
    broker's own image may show it a moment later."""
    deadline = time.monotonic() + 15
    while bool(_describe(conn, principal=principal)[2]) != present:
        assert time.monotonic() < deadline, f"{principal} ACLs never {present}"
        time.sleep(0.05)


VALID: list[Row] = [
    (T, "orders", LITERAL, "User:alice", "*", 3, 3),
    (T, "orders", LITERAL, "User:alice", "*", 3, 3),  # a duplicate
    (T, "orders", LITERAL, "User:bob", "10.0.0.1", 4, 2),
    (T, "ord", PREFIXED, "User:carl", "*", 2, 3),
    (T, "*", LITERAL, "User:*", "*", 8, 3),
    (T, "*", PREFIXED, "User:alice", "*", 3, 3),
    (G, "app-", PREFIXED, "User:*", "*", 2, 2),
    (TX, "tx", LITERAL, "User:alice", "*", 15, 3),
    (USER, "u", LITERAL, "User:x", "*", 13, 3),
    (TOKEN, "tok", LITERAL, "User:x", "*", 14, 3),
    (T, " ", LITERAL, "User:", "not a host", 3, 3),
    (T, "p", LITERAL, ":bob", "*", 5, 3),
]
INVALID: list[Row] = [
    (C, "other", LITERAL, "User:a", "*", 7, 3),
    (C, "", LITERAL, "User:a", "*", 7, 3),
    (T, "", LITERAL, "User:a", "", 3, 3),
    (99, "x", LITERAL, "User:a", "*", 3, 3),
    (99, "", LITERAL, "User:a", "*", 3, 3),
    (99, "x", LITERAL, "alice", "", 3, 3),
    (T, "x", 99, "User:a", "*", 99, 3),
    (T, "x", LITERAL, "User:a", "*", 99, 99),
    (T, "x", LITERAL, "User:a", "*", 3, 99),
    (T, "x", LITERAL, "alice", "", 3, 3),
    (T, "x", LITERAL, "User:a", "", 3, 3),
]
OK_ROW: Row = (T, "whole", LITERAL, "User:whole", "*", 3, 3)
WHOLE: dict[str, Row] = {
    "resource_type_any": (ANY, "x", LITERAL, "User:a", "*", 3, 3),
    "pattern_match": (T, "x", MATCH, "User:a", "*", 3, 3),
    "pattern_any": (T, "x", ANY, "User:a", "*", 3, 3),
    "operation_any": (T, "x", LITERAL, "User:a", "*", 1, 3),
    "permission_any": (T, "x", LITERAL, "User:a", "*", 3, 1),
}
DESCRIBE: dict[str, dict[str, Any]] = {
    "all": {},
    "topics": {"t": T},
    "match_orders": {"t": T, "name": "orders", "pt": MATCH},
    "match_ordinary": {"t": T, "name": "ordinary", "pt": MATCH},
    "match_group": {"t": G, "name": "app-1", "pt": MATCH},
    "match_no_name": {"t": T, "pt": MATCH},
    "any_named": {"t": T, "name": "*", "pt": ANY},
    "literal_named": {"t": T, "name": "orders", "pt": LITERAL},
    "prefixed_named": {"t": T, "name": "ord", "pt": PREFIXED},
    "prefixed_not_exact": {"t": T, "name": "or", "pt": PREFIXED},
    "principal": {"principal": "User:alice"},
    "principal_wildcard": {"principal": "User:*"},
    "principal_bad": {"principal": "alice"},
    "host": {"host": "10.0.0.1"},
    "operation": {"op": 3},
    "permission": {"perm": 2},
    "unknown_resource_type": {"t": 99},
    "unknown_pattern_type": {"pt": 99},
    "unknown_operation": {"op": 99},
    "unknown_permission": {"perm": 99},
}


def _creates(conn: Connection, obs: dict[str, Obs]) -> None:
    obs["create_valid"] = _create(conn, *VALID)
    obs["create_invalid"] = _create(conn, *INVALID)
    for step, row in WHOLE.items():
        obs[f"create_whole_{step}"] = _create(conn, OK_ROW, row)
    obs["create_empty"] = _create(conn)
    obs["create_v1"] = _create(conn, (T, "v1", LITERAL, "User:v1", "*", 3, 3),
                               (T, "", LITERAL, "User:v1", "*", 3, 3), m=ca1)
    _until(conn, "User:v1", present=True)


def _deletes(conn: Connection, obs: dict[str, Obs]) -> None:
    obs["delete_overlapping"] = _delete(conn, {"t": T, "name": "orders", "pt": MATCH},
                                        {"principal": "User:alice"})
    obs["delete_unknown"] = _delete(conn, {"t": 99}, {"pt": 99}, {"op": 99}, {"perm": 99},
                                    {"principal": "User:nobody"})
    obs["delete_empty"] = _delete(conn)
    _until(conn, "User:alice", present=False)
    obs["describe_after_delete"] = _describe(conn)


def _configs(conn: Connection, names: tuple[str, ...] | None) -> Obs:
    """The authorizer's keys as DescribeConfigs lists them for broker 1 (all
    keys, or those ``names``)."""
    r = conn.call(dc.DescribeConfigsRequest(resources=(dc.DescribeConfigsResource(
        resource_type=i8(4), resource_name="1", configuration_keys=names),),
        include_synonyms=True, include_documentation=False))
    return sorted((c.name, c.value, c.config_source, c.is_sensitive, c.read_only,
                   c.config_type, [(x.name, x.value, x.source) for x in c.synonyms])
                  for res in r.results for c in res.configs if c.name in SETTINGS)


def _lockout(conn: Connection, obs: dict[str, Obs]) -> None:
    """A DENY of ALTER on the cluster for the client (no super user)."""
    obs["create_deny_alter"] = _create(conn, (C, "kafka-cluster", LITERAL, "User:ANONYMOUS",
                                              "*", 7, 2))
    deadline = time.monotonic() + 15  # in force once describing is refused too
    while _describe(conn)[0] == "none":
        assert time.monotonic() < deadline, "the DENY never took effect"
        time.sleep(0.05)
    obs["locked_create"] = _create(conn, (T, "late", LITERAL, "User:late", "*", 3, 3))
    obs["locked_delete"] = _delete(conn, {}, {"pt": 99})
    code, message, rows = _describe(conn)
    # Kafka's message names its request's connection: keep its shape
    obs["locked_describe"] = (code, re.sub(r"^Request .* needs", "Request ... needs",
                                           message or ""), rows)


def run_script(bootstrap: str) -> dict[str, Obs]:
    host, port = bootstrap.rsplit(":", 1)
    conn = Connection(host, int(port), 15)
    obs: dict[str, Obs] = {}
    _creates(conn, obs)
    for step, f in DESCRIBE.items():
        obs[f"describe_{step}"] = _describe(conn, **f)
    obs["describe_v2"] = _describe(conn, m=da2)
    _deletes(conn, obs)
    obs["describe_configs_all"] = _configs(conn, None)
    obs["describe_configs_named"] = _configs(conn, tuple(SETTINGS))
    _lockout(conn, obs)
    conn.close()
    return obs


STEPS = ["create_valid", "create_invalid", *[f"create_whole_{s}" for s in WHOLE],
         "create_empty", "create_v1", *[f"describe_{s}" for s in DESCRIBE], "describe_v2",
         "delete_overlapping", "delete_unknown", "delete_empty", "describe_after_delete",
         "describe_configs_all", "describe_configs_named",
         "create_deny_alter", "locked_create", "locked_delete", "locked_describe"]


@pytest.fixture(scope="module")
def kafka_answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Obs]:
    return reference_answers(tmp_path_factory.mktemp("acls-reference"), SETTINGS, run_script)


@pytest.fixture(scope="module")
def kcompat_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from kcompat_with(tmp_path_factory.mktemp("acls-kcompat"), SETTINGS)


@pytest.fixture(scope="module")
def kcompat_answers(kcompat_broker: Broker) -> dict[str, Obs]:
    return run_script(kcompat_broker.bootstrap)


@pytest.mark.parametrize("step", STEPS)
def test_step_matches_kafka(kafka_answers: dict[str, Obs], kcompat_answers: dict[str, Obs],
                            step: str) -> None:
    assert kcompat_answers.get(step) == kafka_answers.get(step), step


def test_every_step_ran(kafka_answers: dict[str, Obs]) -> None:
    assert sorted(kafka_answers) == sorted(STEPS)
