"""Differential: AlterUserScramCredentials and DescribeUserScramCredentials (KIP-554)
at the wire level, Apache Kafka 4.4 against kcompat, one broker each with the same
settings: StandardAuthorizer and ``allow.everyone.if.no.acl.found=true`` (the
unauthenticated client may do anything while no ACL covers the cluster).

One script (``run_script``) sends the same raw requests (kio entities) to a broker
and keeps every answer whole — users in the order the broker lists them (Kafka's
is a Java hash map's, which kcompat reproduces), codes and messages: upsertions
good and bad (empty user, unknown mechanism 0 and 3, iterations 4095 / 4096 /
16384 / 16385, an empty salted password, an empty salt), deletions good and bad
(nothing to delete, the other mechanism's, an empty user, unknown mechanism), a
user altered twice in one request (deleted twice, deleted then upserted,
upserted twice, deleted three times), both mechanisms for one user, twenty users
at once (past the hash map's first resize), then (once the broker describes
the last alteration's users: ``_settle``) describes: named users (found,
missing, twice, non-ASCII and ``,`` in names), all users (null and empty list;
compared as a set, since other users the reference may hold change the order).
A user's mechanisms are compared as a set: Kafka keeps them in a hash map keyed
by an enum, whose order changes from one JVM to the next (kcompat lists them
by type). At the end a DENY of ALTER on the cluster for the client: what an
alteration (nothing done) and describes answer then.
User names carry a suffix chosen once per session, the same for both brokers,
so the hash order is comparable and a long-lived reference never sees a name
twice.

Left out: a describe of every user (a null list) without permission, which
Kafka never answers (building its refusal fails on the null list); kcompat
answers CLUSTER_AUTHORIZATION_FAILED with no results.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.alter_user_scram_credentials.v0 import request as alter
from kio.schema.create_acls.v3 import request as create_acls
from kio.schema.describe_user_scram_credentials.v0 import request as describe
from kio.static.primitive import i8, i32

from compat_tests._broker import Broker
from compat_tests.java._differential import kcompat_with, reference_answers
from kcompat.cli._kio import Connection
from kcompat.security.acl import STANDARD_AUTHORIZER

pytestmark = pytest.mark.timeout(120)

SUFFIX = uuid.uuid4().hex[:8]  # the same for both brokers: names decide Kafka's order
SETTINGS = {"authorizer.class.name": STANDARD_AUTHORIZER,
            "allow.everyone.if.no.acl.found": "true", "super.users": "User:admin"}
#: how long the DENY may take to reach the broker's authorizer after CreateAcls
DENY_WAIT_S = 15.0
#: how long the last alteration may take to reach the credentials a describe reads
SETTLE_WAIT_S = 15.0
Obs = Any


def _name(user: str) -> str:
    return f"{user}-{SUFFIX}" if user else ""


def _up(user: str, mechanism: int = 2, iterations: int = 4096, salt: bytes = b"s4lt",
        salted: bytes | None = None) -> alter.ScramCredentialUpsertion:
    if salted is None:
        salted = hashlib.pbkdf2_hmac("sha512" if mechanism == 2 else "sha256", b"pw", salt,
                                     1)
    return alter.ScramCredentialUpsertion(name=_name(user), mechanism=i8(mechanism),
                                          iterations=i32(iterations), salt=salt,
                                          salted_password=salted)


def _del(user: str, mechanism: int = 2) -> alter.ScramCredentialDeletion:
    return alter.ScramCredentialDeletion(name=_name(user), mechanism=i8(mechanism))


ALTERS: dict[str, tuple[tuple[Any, ...], tuple[Any, ...]]] = {
    "upsert_good_and_bad": ((), (
        _up("u1"), _up("u2", 1, 8192), _up("", 2), _up("u3", 0), _up("u4", 3),
        _up("u5", 2, 4095), _up("u6", 2, 16385), _up("u7", 2, 16384), _up("u8", salted=b""),
        _up("u9", salt=b""))),
    "delete_good_and_bad": ((_del("nobody"), _del("u1", 1), _del("u1", 2), _del("", 1),
                             _del("u3", 0), _del("u2", 1)), ()),
    "twice_in_one_request": ((_del("u7"), _del("u7")),
                             (_up("u9"), _up("u10"), _up("u10", 1), _up("u10", 2))),
    "delete_then_upsert": ((_del("u9"),), (_up("u9"),)),
    "delete_three_times": ((_del("x"), _del("x"), _del("x")), ()),
    "both_mechanisms_256": ((), (_up("both", 1),)),
    "both_mechanisms_512": ((), (_up("both", 2, 5000),)),
    "twenty_users": ((), tuple(_up(f"user-{i}") for i in range(20))),
    "names_with_commas": ((), (_up("a,b=c"), _up("\u00e9l\u00e8ve"))),
}
DESCRIBES: dict[str, list[str] | None] = {
    "describe_named": ["u7", "u9", "nobody", "u9", "both", "u1"],
    "describe_twenty": [f"user-{i}" for i in range(20)] + ["zz", "a,b=c", "\u00e9l\u00e8ve"],
    "describe_removed": ["u1", "u2"],
}
DENIED_ALTER = ((_del("u9"),), (_up("denied"), _up("u1", 1), _up("")))
STEPS = [*ALTERS, *DESCRIBES, "describe_all_null", "describe_all_empty", "deny_alter",
         "alter_denied", "describe_denied_named", "describe_denied_empty"]


def _alter(conn: Connection, deletions: tuple[Any, ...], upsertions: tuple[Any, ...]) -> Obs:
    r = conn.call(alter.AlterUserScramCredentialsRequest(deletions=deletions,
                                                         upsertions=upsertions))
    return [(x.user, x.error_code.name, x.error_message) for x in r.results]


def _describe(conn: Connection, users: list[str] | None) -> Obs:
    named = None if users is None else tuple(describe.UserName(name=u) for u in users)
    r = conn.call(describe.DescribeUserScramCredentialsRequest(users=named))
    return (r.error_code.name, r.error_message,
            [(x.user, x.error_code.name, x.error_message,
              sorted((int(i.mechanism), int(i.iterations)) for i in x.credential_infos))
             for x in r.results])


def _ours(described: Obs) -> Obs:
    """A describe of every user, as a set of this session's users."""
    code, message, results = described
    return code, message, sorted(r for r in results if r[0].endswith(SUFFIX))


def _settle(conn: Connection) -> None:
    """Wait (bounded) until the broker describes the users of the last
    alteration. Kafka answers AlterUserScramCredentials once its controller
    committed the change, and its broker describes from a metadata image that
    catches up a moment later: a describe sent at once missed the last
    upserted users now and then (on a loaded host), where kcompat had them."""
    last = [u.name for u in ALTERS["names_with_commas"][1]]
    deadline = time.monotonic() + SETTLE_WAIT_S
    while time.monotonic() < deadline and any(
            r[1] != "none" for r in _describe(conn, last)[2]):
        time.sleep(0.1)


def _deny_alter(conn: Connection) -> Obs:
    """DENY ALTER on the cluster for the client, then wait (bounded) until the
    broker's authorizer has it: a describe is refused once an ACL covers the
    cluster (nothing allows the client DESCRIBE then)."""
    r = conn.call(create_acls.CreateAclsRequest(creations=(create_acls.AclCreation(
        resource_type=i8(4), resource_name="kafka-cluster", resource_pattern_type=i8(3),
        principal="User:ANONYMOUS", host="*", operation=i8(7), permission_type=i8(2)),)))
    deadline = time.monotonic() + DENY_WAIT_S
    while _describe(conn, [_name("u1")])[0] == "none" and time.monotonic() < deadline:
        time.sleep(0.1)
    return [(x.error_code.name, x.error_message) for x in r.results]


def run_script(bootstrap: str) -> dict[str, Obs]:
    host, port = bootstrap.rsplit(":", 1)
    conn = Connection(host, int(port), 10.0)
    out: dict[str, Obs] = {}
    try:
        for step, (deletions, upsertions) in ALTERS.items():
            out[step] = _alter(conn, deletions, upsertions)
        _settle(conn)
        for step, users in DESCRIBES.items():
            out[step] = _describe(conn, [_name(u) for u in users] if users else users)
        out["describe_all_null"] = _ours(_describe(conn, None))
        out["describe_all_empty"] = _ours(_describe(conn, []))
        out["deny_alter"] = _deny_alter(conn)
        out["alter_denied"] = _alter(conn, *DENIED_ALTER)
        out["describe_denied_named"] = _describe(conn, [_name("u1"), _name("x"), _name("u1")])
        out["describe_denied_empty"] = _describe(conn, [])
    finally:
        conn.close()
    return out


@pytest.fixture(scope="module")
def kafka_answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Obs]:
    return reference_answers(tmp_path_factory.mktemp("scram-reference"), SETTINGS, run_script)


@pytest.fixture(scope="module")
def kcompat_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from kcompat_with(tmp_path_factory.mktemp("scram-kcompat"), SETTINGS)


@pytest.fixture(scope="module")
def kcompat_answers(kcompat_broker: Broker) -> dict[str, Obs]:
    return run_script(kcompat_broker.bootstrap)


@pytest.mark.parametrize("step", STEPS)
def test_step_matches_kafka(kafka_answers: dict[str, Obs], kcompat_answers: dict[str, Obs],
                            step: str) -> None:
    assert kcompat_answers.get(step) == kafka_answers.get(step), step


def test_every_step_ran(kafka_answers: dict[str, Obs]) -> None:
    assert sorted(kafka_answers) == sorted(STEPS)
    assert len(kafka_answers["describe_all_null"][2]) > 20  # the script created users
    # the DENY took effect (else the denial steps would compare two successes)
    assert kafka_answers["describe_denied_empty"][0] == "cluster_authorization_failed"
    assert {code for _, code, _ in kafka_answers["alter_denied"]} == {"unknown_server_error"}
