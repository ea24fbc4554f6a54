"""Differential: dynamic broker configs on Apache Kafka 4.4 and on kcompat.

Both brokers are asked the same things through kafka-python's protocol classes
(an independent codec): DescribeConfigs of the broker ("1") and of the
cluster-wide default (""), every entry's value, source, read-only flag,
sensitivity, ConfigType and synonyms; AlterConfigs and IncrementalAlterConfigs
of BROKER resources, good and bad (dynamic, read-only, unknown and
listener-only keys, bad values and bounds, per-broker keys at the cluster
level, listener-prefixed keys at both levels, another broker's id, request errors, the reconfiguration checks, Kafka's
broker quota keys such as ``leader.replication.throttled.rate``), each
answering the same error code and message; then real changes at both levels
after which both describe the broker, the cluster default, a topic and a
group alike; the quota keys set at both levels describe alike (also through
``kafka-configs --describe`` of broker 1 and of the default).
Kafka's own ``kafka-configs`` (ConfigCommand, kafka-tools 4.4.0) alters and
describes the cluster default of both and prints the same. BROKER_LOGGER
(type 8) answers alike wherever the logger names do not differ (``root`` and
an unknown logger): describe and alter errors, a level set and read back.

The session's reference broker is shared: this module changes only harmless
keys and puts both levels back as they were when it ends.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.admin import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
)

from compat_tests._broker import Broker, running, unique_topic
from compat_tests.java._differential import (
    BROKER,
    TOPIC,
    alter,
    call,
    incremental_alter,
    on_both,
)
from compat_tests.java._toolbatch import CONFIGS, run_tools
from compat_tests.java.conftest import run_java
from compat_tests.java.kafka_reference import SHARE_TEST_OVERRIDES, KafkaReference

BROKER_LOGGER, UNKNOWN_TYPE, GROUP = 8, 3, 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
# keys the reference's server.properties sets that kcompat has too
REFERENCE_STATIC = {"num.partitions": "1", "offsets.topic.replication.factor": "1",
                    "transaction.state.log.replication.factor": "1",
                    "share.coordinator.state.topic.replication.factor": "1",
                    "group.initial.rebalance.delay.ms": "0",
                    "offsets.retention.check.interval.ms": "86400000", **SHARE_TEST_OVERRIDES}
KCOMPAT_OWN = {"admin.host", "admin.port", "admin.tls", "admin.token", "advertised.host", "host",
               "port"}
Ops = list[tuple[str, int, str | None]]
# Kafka's broker quota keys (QuotaConfig, not KafkaConfig): kafka-reassign-partitions
# --throttle sets the first two on brokers, --verify deletes all three
THROTTLE = "leader.replication.throttled.rate"
FOLLOWER = "follower.replication.throttled.rate"
ALTER_DIRS = "replica.alter.log.dirs.io.max.bytes.per.second"
PREFIXED = "listener.name.plaintext."

INCREMENTAL: list[tuple[str, Ops]] = [
    ("", [("log.retention.ms", SET, "1000")]),
    ("1", [("log.retention.ms", SET, "1000")]),
    ("", [("num.partitions", SET, "3")]),
    ("1", [("num.partitions", SET, "3")]),
    ("", [("no.such.key", SET, "3")]),
    ("", [("log.retention.ms", SET, "abc")]),
    ("", [("message.max.bytes", SET, "-5")]),
    ("", [("message.max.bytes", SET, "2147483648")]),
    ("", [("sasl.kerberos.min.time.before.relogin", SET, "1000")]),
    ("1", [("sasl.kerberos.min.time.before.relogin", SET, "1000")]),
    ("", [("listeners", SET, "PLAINTEXT://:1")]),
    ("1", [("advertised.listeners", SET, "PLAINTEXT://:1")]),
    ("2", [("log.retention.ms", SET, "1000")]),
    ("x", [("log.retention.ms", SET, "1000")]),
    ("", [("log.cleanup.policy", SET, "bogus")]),
    ("", [("log.cleanup.policy", APPEND, "compact")]),
    ("", [("log.retention.ms", APPEND, "5")]),
    ("", [("num.partitions", SUBTRACT, "1")]),
    ("", [("log.retention.ms", DELETE, None)]),
    ("", [("log.retention.ms", SET, None)]),
    ("", [("log.segment.bytes", SET, "1000")]),
    ("", [("num.io.threads", SET, "0")]),
    ("", [("num.io.threads", SET, "100")]),
    ("", [("num.io.threads", SET, "1")]),
    ("", [("background.threads", SET, "4")]),
    ("", [("log.cleaner.threads", SET, "2")]),
    ("", [("log.cleaner.threads", SET, "0")]),
    ("", [("log.cleaner.dedupe.buffer.size", SET, "1")]),
    ("", [("max.connections", SET, "10")]),
    ("", [("compression.type", SET, "GZIP")]),
    ("", [("compression.gzip.level", SET, "10")]),
    ("", [("log.cleaner.min.cleanable.ratio", SET, "1e20")]),
    ("", [("unclean.leader.election.enable", SET, "maybe")]),
    ("", [("log.preallocate", SET, "True")]),
    ("", [("log.retention.hours", SET, "1")]),
    ("", [("listener.name.plaintext.ssl.keystore.password", SET, "x")]),
    ("1", [("listener.name.plaintext.ssl.keystore.password", SET, "x")]),
    ("", [("ssl.keystore.password", SET, "x")]),
    ("", [("group.consumer.assignor.offload.enable", SET, "false")]),
    ("", [("min.insync.replicas", DELETE, None)]),
    ("", [("num.partitions", SET, "3"), ("log.dirs", SET, "/x"), ("broker.id", SET, "3"),
          ("auto.create.topics.enable", SET, "false")]),
    ("", [("log.retention.ms", SET, "abc"), ("message.max.bytes", SET, "x")]),
    ("", [("log.retention.ms", SET, "abc"), ("sasl.kerberos.min.time.before.relogin", SET, "3")]),
    ("", [("ssl.keystore.password", SET, "x"), ("num.partitions", SET, "3")]),
    ("", [("log.retention.ms", SET, "5"), ("log.retention.ms", SET, "3")]),
    ("x", [("log.retention.ms", SET, None)]),
    ("", [("log.retention.ms", SET, None), ("x", 9, "3")]),
    ("", [("log.retention.ms", 9, "3")]),
    ("2", []),
    ("", [(THROTTLE, SET, "abc")]),
    ("1", [(THROTTLE, SET, "-1")]),
    ("", [(FOLLOWER, SET, "-1")]),
    ("1", [(ALTER_DIRS, SET, "1.5")]),
    ("", [(THROTTLE, SET, "9223372036854775808")]),
    ("", [(THROTTLE, SET, " abc ")]),
    ("", [(THROTTLE, SET, "1_000")]),
    ("", [("log.retention.ms", SET, "1_000")]),
    ("", [(THROTTLE, SET, "0"), (FOLLOWER, SET, " 5 "), (ALTER_DIRS, SET, "+7")]),
    ("", [("log.retention.ms", SET, "abc"), (ALTER_DIRS, SET, "-1")]),  # quota keys first
    ("", [(FOLLOWER, SET, "x"), (THROTTLE, SET, "y")]),
    ("", [(THROTTLE, SET, "-1"), ("listeners", SET, "PLAINTEXT://:1")]),
    ("", [(PREFIXED + THROTTLE, SET, "abc")]),  # checked as its base key
    ("1", [(PREFIXED + "log.retention.ms", SET, "abc")]),
    ("1", [(THROTTLE, SET, "abc"), (PREFIXED + THROTTLE, SET, "5")]),  # only one is checked
    ("", [(THROTTLE, APPEND, "5")]),
    ("1", [(PREFIXED + "sasl.enabled.mechanisms", APPEND, "PLAIN")]),
    # listener-prefixed keys (issue 32): per broker any, at the cluster level only
    # Kafka's three cluster-level listener keys, whatever the listener's name
    ("1", [(PREFIXED + "broker.id", SET, "5")]),
    ("", [(PREFIXED + "broker.id", SET, "5")]),
    ("1", [(PREFIXED + "foo.bar", SET, "1")]),
    ("", [(PREFIXED + "log.retention.ms", SET, "1000")]),
    ("", [(PREFIXED + "connections.max.idle.ms", SET, "50000")]),
    ("", [(PREFIXED + "max.connections", SET, "100")]),
    ("", [(PREFIXED + "max.connection.creation.rate", SET, "7")]),
    ("", [(PREFIXED + "num.network.threads", SET, "3")]),
    ("", [(PREFIXED + "max.connections", SET, "abc")]),
    ("", [("listener.name.nosuch.max.connections", SET, "10")]),
    ("", [("listener.name.PLAINTEXT.max.connections", SET, "10")]),
    ("", [("listener.name..max.connections", SET, "10")]),
    ("", [("listener.name.plaintext", SET, "3")]),
]
LEGACY: list[tuple[str, list[tuple[str, str | None]]]] = [
    ("", [("log.retention.ms", "1000")]),  # drops the cluster-level min.insync.replicas
    ("", [("min.insync.replicas", "1"), ("log.retention.ms", "1000")]),
    ("1", [("log.retention.ms", "1000")]),
    ("", [("num.partitions", "3")]),
    ("", [("log.retention.ms", "abc")]),
    ("", [("sasl.kerberos.min.time.before.relogin", "1000")]),
    ("2", [("log.retention.ms", "1000")]),
    ("x", [("log.retention.ms", "1000")]),
    ("", [("log.retention.ms", None)]),
    ("", []),
    ("1", []),
    ("", [("num.io.threads", "100")]),
    ("", [(THROTTLE, "abc")]),  # refused before the controller's min.insync.replicas check
    ("1", [(FOLLOWER, "-1")]),
    ("1", [(THROTTLE, "10"), (ALTER_DIRS, "0")]),
    ("", [("min.insync.replicas", "1"), (PREFIXED + "max.connections", "10")]),
    ("", [("min.insync.replicas", "1"), (PREFIXED + "broker.id", "5")]),
    ("1", [(PREFIXED + "broker.id", "5")]),
]


@pytest.fixture(scope="module")
def kcompat_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    args = tuple(a for k, v in REFERENCE_STATIC.items() for a in ("--set", f"{k}={v}"))
    yield from running(Broker(tmp_path_factory.mktemp("broker-configs"), extra_args=args))


@pytest.fixture(scope="module")
def both(kafka_reference: KafkaReference, kcompat_broker: Broker) -> Iterator[dict[str, str]]:
    """Both bootstraps; at the end both levels are put back as they were."""
    brokers = {"kafka": kafka_reference.bootstrap, "kcompat": kcompat_broker.bootstrap}
    try:
        yield brokers
    finally:
        for bootstrap in brokers.values():
            _alter(bootstrap, "", [("min.insync.replicas", "1")])
            _alter(bootstrap, "1", [])


def _describe_result(bootstrap: str, name: str, kind: int, keys: list[str] | None,
                     synonyms: bool) -> Any:
    R = DescribeConfigsRequest
    req = R(version=4, include_synonyms=synonyms, include_documentation=False, resources=[
        R.DescribeConfigsResource(resource_type=kind, resource_name=name,
                                  configuration_keys=keys)])
    return call(bootstrap, req, DescribeConfigsResponse[4]).results[0]


def _describe_error(bootstrap: str, name: str, kind: int) -> tuple[int, str | None]:
    result = _describe_result(bootstrap, name, kind, None, False)
    return result.error_code, result.error_message


def _describe(bootstrap: str, name: str, kind: int = BROKER, keys: list[str] | None = None,
              synonyms: bool = True) -> dict[str, tuple[Any, ...]]:
    result = _describe_result(bootstrap, name, kind, keys, synonyms)
    assert result.error_code == 0, (bootstrap, result.error_message)
    return {c.name: (c.value, c.config_source, c.read_only, c.is_sensitive, c.config_type,
                     [(s.name, s.value, s.source) for s in c.synonyms])
            for c in result.configs}


def _incremental(bootstrap: str, name: str, ops: Ops, validate_only: bool = False,
                 kind: int = BROKER) -> tuple[int, str | None]:
    return incremental_alter(bootstrap, name, ops, validate_only, kind)


def _alter(bootstrap: str, name: str, configs: list[tuple[str, str | None]],
           validate_only: bool = False, kind: int = BROKER) -> tuple[int, str | None]:
    return alter(bootstrap, name, configs, validate_only, kind)


def _create_topic(bootstrap: str, topic: str) -> None:
    R = CreateTopicsRequest
    req = R(version=4, timeout_ms=10000, validate_only=False, topics=[R.CreatableTopic(
        name=topic, num_partitions=1, replication_factor=1, assignments=[], configs=[])])
    assert call(bootstrap, req, CreateTopicsResponse[4]).topics[0].error_code == 0


def _until_topic_known(bootstrap: str, topic: str) -> None:
    """Kafka answers CreateTopics before its broker's metadata has the topic (a
    DescribeConfigs right after may answer UNKNOWN_TOPIC_OR_PARTITION): until
    it describes ``topic``."""
    deadline = time.monotonic() + 15
    while _describe_result(bootstrap, topic, TOPIC, [], False).error_code != 0:
        assert time.monotonic() < deadline, f"{topic} still unknown at {bootstrap}"
        time.sleep(0.1)


def _until_applied(both: dict[str, str], name: str, expected: dict[str, int]) -> None:
    """Kafka applies a committed change asynchronously: until both describe
    every key of ``expected`` with that source."""
    deadline = time.monotonic() + 15
    while True:
        seen = on_both(both, _describe, name, BROKER, list(expected), False)
        if all({k: v[1] for k, v in s.items()} == expected for s in seen.values()):
            return
        assert time.monotonic() < deadline, seen
        time.sleep(0.2)


def test_broker_describe_lists_kafkas_keys_alike(both: dict[str, str]) -> None:
    seen = on_both(both, _describe, "1")
    kafka, kc = seen["kafka"], seen["kcompat"]
    assert set(kafka) - set(kc) == set(), "Kafka lists keys kcompat does not"
    extra = {k for k in set(kc) - set(kafka) if not k.startswith(("kcompat.", "kc."))}
    assert extra <= KCOMPAT_OWN, extra
    assert len(kafka) >= 340
    shape = {k: (kafka[k][2:5], kc[k][2:5]) for k in kafka if kafka[k][2:5] != kc[k][2:5]}
    assert not shape, f"(read_only, sensitive, type) differ: {shape}"
    # values, sources and synonyms wherever neither broker's own setup decides them
    compared = [k for k in kafka if kafka[k][1] != 4 and kc[k][1] != 4]
    assert len(compared) >= 300, len(compared)
    differ = {k: (kafka[k], kc[k]) for k in compared if kafka[k] != kc[k]}
    assert not differ, differ


@pytest.mark.parametrize("name,ops", INCREMENTAL, ids=[f"{n or 'default'}:{o}" for n, o in
                                                        INCREMENTAL])
def test_incremental_alter_answers_alike(both: dict[str, str], name: str, ops: Ops) -> None:
    answers = on_both(both, _incremental, name, ops, True)
    assert answers["kcompat"] == answers["kafka"]


def test_legacy_alter_answers_alike(both: dict[str, str]) -> None:
    differ = {}
    for name, configs in LEGACY:
        answers = on_both(both, _alter, name, configs, True)
        if answers["kcompat"] != answers["kafka"]:
            differ[(name, tuple(configs))] = answers
    assert not differ, differ


def test_dynamic_changes_describe_alike(both: dict[str, str]) -> None:
    cluster_ops: Ops = [("log.retention.bytes", SET, "1099511627776"),
                        ("log.cleanup.policy", APPEND, "compact"),
                        ("kcompat.test.unknown.key", SET, "x"),
                        ("log.cleaner.io.buffer.size", SET, "1048576")]
    broker_ops: Ops = [("log.retention.bytes", SET, "2199023255552"),
                       ("sasl.kerberos.min.time.before.relogin", SET, "1000"),
                       ("listener.name.plaintext.ssl.keystore.password", SET, "secret"),
                       ("another.unknown.key", SET, "y")]
    assert set(on_both(both, _incremental, "", cluster_ops).values()) == {(0, None)}
    assert set(on_both(both, _incremental, "1", broker_ops).values()) == {(0, None)}
    touched = [k for k, _, _ in cluster_ops + broker_ops]
    _until_applied(both, "1", {"log.retention.bytes": 2, "log.cleanup.policy": 3,
                               "sasl.kerberos.min.time.before.relogin": 2,
                               "log.cleaner.io.buffer.size": 3})
    seen = on_both(both, _describe, "1", BROKER, touched)
    assert seen["kcompat"] == seen["kafka"]
    assert seen["kafka"]["log.cleanup.policy"][0] == "delete,compact"
    defaults = on_both(both, _describe, "")
    assert defaults["kcompat"] == defaults["kafka"]
    assert len(defaults["kafka"]) == 5  # min.insync.replicas and the four set here

    topic = unique_topic("dyn-defaults")
    on_both(both, _create_topic, topic)
    _until_topic_known(both["kafka"], topic)  # kcompat knows it at once
    topics = on_both(both, _describe, topic, TOPIC,
                      ["retention.bytes", "cleanup.policy", "min.insync.replicas",
                       "max.message.bytes"])
    assert topics["kcompat"] == topics["kafka"]
    assert topics["kafka"]["retention.bytes"][:2] == ("2199023255552", 2)

    # the per-broker value removed: the cluster default shows through
    back = [("log.retention.bytes", DELETE, None)]
    assert set(on_both(both, _incremental, "1", back).values()) == {(0, None)}
    _until_applied(both, "1", {"log.retention.bytes": 3})
    topics = on_both(both, _describe, topic, TOPIC, ["retention.bytes"])
    assert topics["kcompat"] == topics["kafka"]
    # a group config follows its dynamic broker default
    group_key = [("group.consumer.assignment.interval.ms", SET, "2000")]
    assert set(on_both(both, _incremental, "", group_key).values()) == {(0, None)}
    _until_applied(both, "1", {"group.consumer.assignment.interval.ms": 3})
    groups = on_both(both, _describe, "some-group", GROUP, ["consumer.assignment.interval.ms"])
    assert groups["kcompat"] == groups["kafka"]
    assert groups["kafka"]["consumer.assignment.interval.ms"][:2] == ("2000", 3)
    # a real (not validate-only) AlterConfigs that would drop min.insync.replicas
    dropped = on_both(both, _alter, "", [("log.retention.bytes", "1")])
    assert dropped["kcompat"] == dropped["kafka"] == (
        40, "Cluster-level min.insync.replicas cannot be removed while ELR is enabled.")


def test_throttle_keys_describe_alike(both: dict[str, str]) -> None:
    """Kafka's broker quota keys: listed only while a level sets them (no
    default shown), LONG, not sensitive, raw values; a listener-prefixed one
    is a key Kafka's describe cannot type (sensitive), with its base key as a
    synonym (as a KafkaConfig key prefixed shows its base's default)."""
    mechanisms = PREFIXED + "sasl.enabled.mechanisms"
    keys = [THROTTLE, FOLLOWER, ALTER_DIRS, PREFIXED + THROTTLE, mechanisms]

    def quota(bootstrap: str, name: str, asked: list[str] | None, synonyms: bool
              ) -> dict[str, tuple[Any, ...]]:
        return {k: v for k, v in _describe(bootstrap, name, BROKER, asked, synonyms).items()
                if k in keys}

    def alike(asked: list[str] | None, synonyms: bool) -> list[dict[str, tuple[Any, ...]]]:
        seen = [on_both(both, quota, name, asked, synonyms) for name in ("1", "")]
        assert [s["kcompat"] for s in seen] == [s["kafka"] for s in seen]
        return [s["kafka"] for s in seen]

    assert alike(None, True) == alike(keys, True) == [{}, {}]
    cluster: Ops = [(THROTTLE, SET, " 7 "), (FOLLOWER, SET, "+8")]
    broker: Ops = [(THROTTLE, SET, "100"), (ALTER_DIRS, SET, "00"),
                   (PREFIXED + THROTTLE, SET, "3"), (mechanisms, SET, "PLAIN")]
    try:
        assert set(on_both(both, _incremental, "", cluster).values()) == {(0, None)}
        assert set(on_both(both, _incremental, "1", broker).values()) == {(0, None)}
        _until_applied(both, "1", {THROTTLE: 2, FOLLOWER: 3, ALTER_DIRS: 2})
        own, default = alike(None, True)
        assert alike(keys, True) == [own, default]
        assert own[THROTTLE] == ("100", 2, False, False, 5, [(THROTTLE, "100", 2),
                                                             (THROTTLE, " 7 ", 3)])
        assert default[FOLLOWER] == ("+8", 3, False, False, 5, [(FOLLOWER, "+8", 3)])
        assert own[PREFIXED + THROTTLE] == (None, 2, True, True, 0, [
            (PREFIXED + THROTTLE, None, 2), (THROTTLE, None, 2), (THROTTLE, None, 3)])
        assert own[mechanisms][5] == [(mechanisms, "PLAIN", 2),
                                      ("sasl.enabled.mechanisms", "GSSAPI", 5)]
        assert alike([THROTTLE], False)[0][THROTTLE] == ("100", 2, False, False, 5, [])
        described = on_both(both, lambda b: [r.stdout for r in run_tools([
            [CONFIGS, "--bootstrap-server", b, "--entity-type", "brokers", *entity,
             "--describe"] for entity in (["--entity-name", "1"], ["--entity-default"])])])
        assert described["kcompat"] == described["kafka"]
        assert f"{THROTTLE}=100 sensitive=false" in described["kafka"][0]
    finally:
        for bootstrap in both.values():
            _incremental(bootstrap, "", [(k, DELETE, None) for k, _, _ in cluster])
            _incremental(bootstrap, "1", [(k, DELETE, None) for k, _, _ in broker])


def test_kafka_configs_tool_alters_and_describes_the_cluster_default(
        both: dict[str, str], reference_cp: str) -> None:
    def tool(bootstrap: str, *args: str) -> str:
        run = run_java(reference_cp, "org.apache.kafka.tools.ConfigCommand",
                       "--bootstrap-server", bootstrap, "--entity-type", "brokers", *args)
        assert run.returncode == 0, run.explain()
        return run.stdout

    altered = on_both(both, tool, "--entity-default", "--alter", "--add-config",
                       "log.retention.ms=7200000,log.segment.delete.delay.ms=30000")
    assert altered["kcompat"] == altered["kafka"]
    assert "Completed updating default config for brokers in the cluster." in altered["kafka"]
    _until_applied(both, "1", {"log.retention.ms": 3, "log.segment.delete.delay.ms": 3})
    described = on_both(both, tool, "--entity-default", "--describe")
    assert described["kcompat"] == described["kafka"]
    assert "log.retention.ms=7200000 sensitive=false" in described["kcompat"]


LOGGER_CASES: list[tuple[str, Ops]] = [
    ("1", [("root", SET, "INFO")]),
    ("1", [("root", SET, "TRACE")]),
    ("1", [("root", SET, "debug")]),
    ("1", [("no.such.logger", SET, "DEBUG")]),
    ("1", [("no.such.logger", SET, "BOGUS")]),
    ("1", [("no.such.logger", DELETE, None)]),
    ("1", [("root", DELETE, None)]),
    ("1", [("root", APPEND, "DEBUG")]),
    ("1", [("root", 9, "DEBUG")]),
    ("1", [("root", SET, None)]),
    ("1", [("root", SET, "INFO"), ("root", SET, "WARN")]),
    ("", [("root", SET, "INFO")]),
    ("2", [("root", 9, "INFO")]),
    ("x", [("root", SET, "INFO")]),
]


def test_broker_logger_answers_alike(both: dict[str, str]) -> None:
    differ = {}
    for name, ops in LOGGER_CASES:
        answers = on_both(both, _incremental, name, ops, True, BROKER_LOGGER)
        if answers["kcompat"] != answers["kafka"]:
            differ[("incremental", name, tuple(ops))] = answers
    for kind in (BROKER_LOGGER, UNKNOWN_TYPE):
        answers = on_both(both, _alter, "1", [("root", "INFO")], True, kind)
        if answers["kcompat"] != answers["kafka"]:
            differ[("legacy", kind)] = answers
    answers = on_both(both, _incremental, "1", [("a", SET, "1")], True, UNKNOWN_TYPE)
    if answers["kcompat"] != answers["kafka"]:
        differ[("incremental", UNKNOWN_TYPE)] = answers
    for name, kind in (("", BROKER_LOGGER), ("2", BROKER_LOGGER), ("x", BROKER_LOGGER),
                       ("1", UNKNOWN_TYPE)):
        answers = on_both(both, _describe_error, name, kind)
        if answers["kcompat"] != answers["kafka"]:
            differ[("describe", name, kind)] = answers
    assert not differ, differ


def test_broker_logger_level_set_and_read_back(both: dict[str, str]) -> None:
    def root(bootstrap: str) -> tuple[Any, ...]:
        return _describe(bootstrap, "1", BROKER_LOGGER, ["root", "no.such.logger"])["root"]

    before = on_both(both, root)
    try:
        assert set(on_both(both, _incremental, "1", [("root", SET, "ERROR")], False,
                            BROKER_LOGGER).values()) == {(0, None)}
        after = on_both(both, root)
        assert after["kcompat"] == after["kafka"] == ("ERROR", 6, False, False, 0, [])
        full = on_both(both, _describe, "1", BROKER_LOGGER)
        assert all(v[1:] == ("ERROR", 6, False, False, 0, [])[1:] for v in full["kcompat"].values())
        assert full["kcompat"]["root"][0] == "ERROR" and len(full["kcompat"]) > 3
    finally:
        for broker, bootstrap in both.items():
            _incremental(bootstrap, "1", [("root", SET, before[broker][0])], False, BROKER_LOGGER)
