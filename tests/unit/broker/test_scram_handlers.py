"""Alter/DescribeUserScramCredentials in-process (every answer encodes with kio
and reads back), the credentials in the metadata log across a restart and a
checkpoint, and a SCRAM login with kafka-python's ScramClient against what
``Broker.scram_credential`` finds. Kafka 4.4's exact answers to bad input are
in compat_tests/java/test_scram_differential.py."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import trio
from kafka.net.sasl.scram import ScramClient
from kio.schema.errors import ErrorCode

from kcompat.broker.config import broker_config
from kcompat.broker.host.broker import Broker
from kcompat.security.sasl import SCRAM_SHA_256, SCRAM_SHA_512
from kcompat.security.scram import ScramServer
from kcompat.testing import running
from kcompat.wire import versions as v
from tests.unit.broker.test_admin_handlers import call

E = ErrorCode
SALT = b"0123456789abcdef"


def _broker(path: Path, **extra: str) -> Broker:
    return Broker(broker_config.load(None, {"log.dirs": str(path), **extra}, {}))


def _up(m: Any, user: str, mechanism: int, password: bytes, iterations: int = 4096) -> Any:
    salted = hashlib.pbkdf2_hmac("sha256" if mechanism == 1 else "sha512", password, SALT,
                                 iterations)
    return m.ScramCredentialUpsertion(name=user, mechanism=mechanism, iterations=iterations,
                                      salt=SALT, salted_password=salted)


def _alter(broker: Broker, deletions: list[tuple[str, int]],
           upsertions: list[tuple[str, int, bytes, int]]) -> list[tuple[str, E, str | None]]:
    r = call(broker, v.ALTER_USER_SCRAM_CREDENTIALS, 0,
             lambda m: m.AlterUserScramCredentialsRequest(
                 deletions=tuple(m.ScramCredentialDeletion(name=u, mechanism=k)
                                 for u, k in deletions),
                 upsertions=tuple(_up(m, *u) for u in upsertions)))
    return [(x.user, x.error_code, x.error_message) for x in r.results]


def _describe(broker: Broker, users: tuple[str, ...] | None) -> dict[str, Any]:
    r = call(broker, v.DESCRIBE_USER_SCRAM_CREDENTIALS, 0,
             lambda m: m.DescribeUserScramCredentialsRequest(
                 users=None if users is None else tuple(m.UserName(name=n) for n in users)))
    assert (r.error_code, r.error_message) == (E.none, "")
    return {x.user: (x.error_code, x.error_message,
                     [(int(i.mechanism), int(i.iterations)) for i in x.credential_infos])
            for x in r.results}


def _login(broker: Broker, mechanism: str, user: str, password: str) -> bool:
    """A whole SCRAM exchange: kafka-python's client, the broker's credentials."""
    server = ScramServer(mechanism, lambda u: broker.scram_credential(mechanism, u), "srvnonce")
    client = ScramClient(user, password, mechanism)
    try:
        client.process_server_first_message(server.step(client.first_message()))
        client.process_server_final_message(server.step(client.final_message()))
    except Exception:
        return False
    return server.complete and server.authorization_id == user


def test_alter_describe_and_log_in(tmp_path: Path) -> None:
    b = _broker(tmp_path)
    try:
        assert _describe(b, None) == {} == _describe(b, ())
        assert _alter(b, [], [("alice", 2, b"alice-pw", 8192), ("bob", 1, b"bob-pw", 4096)]) \
            == [("bob", E.none, None), ("alice", E.none, None)]  # Kafka's (hash) order
        assert _alter(b, [], [("alice", 1, b"alice-256", 4096)]) == [("alice", E.none, None)]
        assert _describe(b, None) == {"alice": (E.none, "", [(1, 4096), (2, 8192)]),
                                      "bob": (E.none, "", [(1, 4096)])}
        assert _describe(b, ("bob", "carol", "bob")) == {
            "bob": (E.duplicate_resource, "Cannot describe SCRAM credentials for the same "
                                          "user twice in a single request: bob", []),
            "carol": (E.resource_not_found, "Attempt to describe a user credential that "
                                            "does not exist: carol", [])}
        assert _login(b, SCRAM_SHA_512, "alice", "alice-pw")
        assert _login(b, SCRAM_SHA_256, "alice", "alice-256")
        assert not _login(b, SCRAM_SHA_512, "alice", "alice-256")
        assert not _login(b, SCRAM_SHA_512, "bob", "bob-pw")  # bob has SHA-256 only
        assert b.scram_credential(SCRAM_SHA_512, "nobody") is None

        assert _alter(b, [("alice", 2), ("carol", 2)], [("", 2, b"x", 4096)]) == [
            ("alice", E.none, None),
            ("", E.unacceptable_credential, "Username must not be empty"),
            ("carol", E.resource_not_found,
             "Attempt to delete a user credential that does not exist")]
        assert b.scram_credential(SCRAM_SHA_512, "alice") is None
        assert not _login(b, SCRAM_SHA_512, "alice", "alice-pw")
        assert _describe(b, ("alice",)) == {"alice": (E.none, "", [(1, 4096)])}
    finally:
        b.close()


def _checkpoints(path: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted((path / "__cluster_metadata-0").glob("*.checkpoint"))]


async def _checkpointed(broker: Broker, path: Path) -> bool:
    """Wait (bounded) until the newest metadata checkpoint holds alice's credential."""
    with trio.move_on_after(10.0):
        while not any(b'"scram_credentials":[["SCRAM-SHA-512","alice"' in c
                      for c in _checkpoints(path)[-1:]):
            await trio.sleep(broker.cluster.tick_s)
        return True
    return False


def test_credentials_survive_restart_and_checkpoint(tmp_path: Path) -> None:
    """Credentials are metadata records: replayed from the log after a restart
    and carried by a metadata checkpoint (a tiny snapshot interval forces one)."""
    for extra, sub in (({}, "log"), ({"metadata.log.max.record.bytes.between.snapshots": "1"},
                                     "checkpoint")):
        path = tmp_path / sub
        b = _broker(path, **extra)
        _alter(b, [], [("alice", 2, b"pw", 4096), ("bob", 2, b"pw2", 4096)])
        _alter(b, [("bob", 2)], [])
        if extra:  # wait for a checkpoint past the records: the log no longer has them
            assert running.run(b, _checkpointed, b, path)
        before = b.state.metadata.image.scram_credentials
        b.close()
        assert bool(_checkpoints(path)) == bool(extra)
        again = _broker(path, **extra)
        try:
            running.run(again, lambda: running.create_topic(again, "after"))  # noqa: B023
            assert again.state.metadata.image.scram_credentials == before
            assert set(before[SCRAM_SHA_512]) == {"alice"}
            assert _login(again, SCRAM_SHA_512, "alice", "pw")
            assert not _login(again, SCRAM_SHA_512, "bob", "pw2")
        finally:
            again.close()


def test_an_authorizer_guards_both_apis(tmp_path: Path) -> None:
    """Kafka asks ALTER / DESCRIBE on the cluster (no ACL here: ANONYMOUS may not)."""
    b = _broker(tmp_path / "denied",
                **{"authorizer.class.name":
                   "org.apache.kafka.metadata.authorizer.StandardAuthorizer"})
    try:
        # measured on Kafka 4.4: its controller refuses, the answer is an unknown error
        assert _alter(b, [("zed", 2)], [("alice", 2, b"pw", 4096), ("alice", 1, b"x", 4096)]) \
            == [("alice", E.unknown_server_error, None), ("zed", E.unknown_server_error, None)]
        assert b.state.metadata.image.scram_credentials == {}
        r = call(b, v.DESCRIBE_USER_SCRAM_CREDENTIALS, 0,
                 lambda m: m.DescribeUserScramCredentialsRequest(
                     users=(m.UserName(name="alice"), m.UserName(name="bob"))))
        assert (r.error_code, r.error_message) == (E.cluster_authorization_failed, None)
        assert [(x.user, x.error_code, x.error_message) for x in r.results] == [
            ("", E.cluster_authorization_failed, None)] * 2
    finally:
        b.close()
    allowed = _broker(tmp_path / "super",
                      **{"authorizer.class.name":
                         "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                         "super.users": "User:ANONYMOUS"})
    try:
        assert _alter(allowed, [], [("alice", 2, b"pw", 4096)]) == [("alice", E.none, None)]
        assert _describe(allowed, None) == {"alice": (E.none, "", [(2, 4096)])}
    finally:
        allowed.close()
