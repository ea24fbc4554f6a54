"""SCRAM credentials in the metadata image: Kafka's answers to alterations and
describes (orders measured on Apache Kafka 4.4), the record applied, the
checkpoint."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kcompat.broker.controller import scram_credentials as sc
from kcompat.broker.storage.metadata import MetadataImage
from kcompat.security.sasl import SCRAM_SHA_256, SCRAM_SHA_512
from kcompat.security.scram import ScramCredential

OK = (ErrorCode.none, None)
DUP = (ErrorCode.duplicate_resource, sc.DUPLICATE_ALTERATION)


def _up(user: str, mechanism: int = 2, iterations: int = 4096,
        salted: bytes = b"k" * 64) -> sc.Upsertion:
    return sc.Upsertion(user, mechanism, iterations, b"salt", salted)


def test_java_hash_order_matches_kafka() -> None:
    """Kafka 4.4 listed twenty users upserted in one request in this order."""
    order = sc.JavaHashOrder()
    for i in range(20):
        order.put(f"user-{i}")
    assert order.keys() == [f"user-{i}" for i in (1, 0, 19, 17, 18, 5, 11, 4, 12, 3, 2, 10,
                                                   9, 15, 8, 16, 7, 13, 6, 14)]


def test_plan_answers_in_kafkas_order() -> None:
    """Measured on Kafka 4.4: successes (deletions, then upsertions), then errors."""
    results, ops = sc.plan([], [
        _up("u1"), _up("u2", 1, 8192), _up("", 2), _up("u3", 0), _up("u4", 3),
        _up("u5", 2, 4095), _up("u6", 2, 16385), _up("u7", 2, 16384), _up("u8", salted=b""),
        _up("u9")], lambda u, m: False)
    assert results == [
        ("u7", OK), ("u9", OK), ("u1", OK), ("u2", OK),
        ("", (ErrorCode.unacceptable_credential, "Username must not be empty")),
        ("u5", (ErrorCode.unacceptable_credential, "Too few iterations")),
        ("u6", (ErrorCode.unacceptable_credential, "Too many iterations")),
        ("u8", (ErrorCode.unknown_server_error, None)),
        ("u3", (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")),
        ("u4", (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"))]
    assert [(u, m, c.iterations if c else None) for u, m, c in ops] == [
        ("u7", SCRAM_SHA_512, 16384), ("u9", SCRAM_SHA_512, 4096), ("u1", SCRAM_SHA_512, 4096),
        ("u2", SCRAM_SHA_256, 8192)]


def test_a_user_altered_twice_is_neither() -> None:
    exists = {("u7", SCRAM_SHA_512), ("u9", SCRAM_SHA_512)}
    results, ops = sc.plan([("u7", 2), ("u7", 2), ("u9", 2)],
                           [_up("u9"), _up("u10"), _up("u10", 1), _up("u10", 2)],
                           lambda u, m: (u, m) in exists)
    # u9 deleted then upserted, u10 upserted twice (its third is not looked at)
    assert results == [("u7", DUP), ("u9", DUP), ("u10", DUP)]
    assert ops == []
    missing = (ErrorCode.resource_not_found, sc.DELETE_MISSING)
    # the first error of a user stands: later alterations of it are not looked at
    assert sc.plan([("x", 2), ("x", 2), ("x", 2)], [_up("x")], lambda u, m: False) == (
        [("x", missing)], [])
    assert sc.plan([("x", 1)], [], lambda u, m: m == SCRAM_SHA_512)[0] == [("x", missing)]


def test_records_apply_in_order_and_survive_a_checkpoint() -> None:
    image = MetadataImage()
    cred = ScramCredential(b"salt", b"stored", b"server", 4096)
    image.apply(sc.record([("alice", SCRAM_SHA_512, cred), ("bob", SCRAM_SHA_256, cred)]))
    image.apply(sc.record([("bob", SCRAM_SHA_256, None)]))
    assert image.scram_credentials == {SCRAM_SHA_512: {"alice": cred}}
    assert sc.from_checkpoint(sc.checkpoint(image.scram_credentials)) == \
        image.scram_credentials
    assert sc.missing_deletions(image.scram_credentials,
                                [("alice", SCRAM_SHA_512, None), ("bob", SCRAM_SHA_512, None),
                                 ("carol", SCRAM_SHA_512, cred)]) == ["bob"]
    text = repr(sc.record([("alice", SCRAM_SHA_512, cred)]))
    assert "salted" not in text and "iterations" in text


def test_describe() -> None:
    cred = ScramCredential(b"s", b"k", b"v", 8192)
    credentials = {SCRAM_SHA_512: {"both": cred, "u1": cred}, SCRAM_SHA_256: {"both": cred}}
    assert sc.describe(credentials, ["u1", "nobody", "u1", "both"]) == [
        ("u1", (ErrorCode.duplicate_resource, sc.DESCRIBE_DUPLICATE + "u1"), []),
        ("nobody", (ErrorCode.resource_not_found, sc.DESCRIBE_MISSING + "nobody"), []),
        ("both", (ErrorCode.none, ""), [(1, 8192), (2, 8192)])]
    assert sc.describe(credentials, None) == sc.describe(credentials, [])
    assert {u for u, _, _ in sc.describe(credentials, None)} == {"u1", "both"}
    assert sc.describe({}, None) == []
