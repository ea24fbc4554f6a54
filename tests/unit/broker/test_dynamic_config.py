"""Dynamic broker configs: Kafka's key table, value checks and level rules.

The messages and orders asserted here are what Apache Kafka 4.4.0 answered to
the same changes (compat_tests/java/test_broker_configs_differential.py asks
both brokers); these tests pin the pure rules without a broker.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kcompat.broker.config import broker_config_entries, broker_keys, broker_loggers, dynamic_config
from kcompat.broker.config.broker_config import load


def _error(fn: Any, *args: Any) -> tuple[ErrorCode, str]:
    with pytest.raises(dynamic_config.DynamicConfigError) as info:
        fn(*args)
    return info.value.code, info.value.message


def test_the_table_has_kafkas_keys_and_modes() -> None:
    keys = broker_keys.KEYS
    assert sum(k.listed for k in keys.values()) == 350
    assert keys["advertised.listeners"].type == "LIST"
    assert keys["log.dirs"].type == "LIST" and not keys["log.dirs"].dynamic
    assert keys["message.max.bytes"].mode == broker_keys.CLUSTER_WIDE
    assert keys["sasl.kerberos.min.time.before.relogin"].mode == broker_keys.PER_BROKER
    assert keys["ssl.keystore.password"].sensitive and keys["ssl.keystore.password"].listener_only
    assert keys["log.retention.ms"].synonyms == (
        "log.retention.ms", "log.retention.minutes", "log.retention.hours")
    assert not keys["group.consumer.assignor.offload.enable"].listed  # internal, yet dynamic


@pytest.mark.parametrize("key,raw,message", [
    ("log.retention.ms", "abc", "Not a number of type LONG"),
    ("message.max.bytes", "-5", "Value must be at least 0"),
    ("message.max.bytes", "2147483648", "Not a number of type INT"),
    ("log.cleaner.min.cleanable.ratio", "1e20", "Value must be no more than 1"),
    ("compression.gzip.level", "10", "Value must be between 1 and 9 or equal to -1"),
    ("log.cleanup.policy", "Compact", "String must be one of: compact, delete"),
    ("unclean.leader.election.enable", "maybe", "Expected value to be either true or false"),
])
def test_a_bad_value_gets_kafkas_message(key: str, raw: str, message: str) -> None:
    with pytest.raises(broker_keys.InvalidValue) as info:
        broker_keys.parse(key, raw)
    shown = {"1e20": "1.0E20"}.get(raw, raw)
    assert info.value.message == f"Invalid value {shown} for configuration {key}: {message}"


def test_values_are_typed_as_kcompat_types_them() -> None:
    assert broker_keys.parse("message.max.bytes", " 2000 ") == 2000
    assert broker_keys.parse("log.cleanup.policy", "compact, delete") == ["compact", "delete"]
    assert broker_keys.parse("log.preallocate", "True") is True
    assert broker_keys.parse("log.cleaner.min.cleanable.ratio", "0.25") == 0.25


def test_java_set_order_and_double_text() -> None:
    assert broker_keys.java_set(["log.dirs", "broker.id", "auto.create.topics.enable",
                                 "num.partitions"]) == (
        "[num.partitions, auto.create.topics.enable, broker.id, log.dirs]")
    assert [broker_keys.java_double(x) for x in (2.0, 1e20, 0.9, -0.5)] == [
        "2.0", "1.0E20", "0.9", "-0.5"]


def _current(key: str) -> Any:
    return dynamic_config.current(load(None, {}, {}), key)


def test_checks_run_in_kafkas_order() -> None:
    validate = dynamic_config.validate
    assert _error(validate, "", {"ssl.keystore.password": "x", "num.partitions": "3"},
                  _current) == (ErrorCode.invalid_request,
                                "Cannot update these configs dynamically: [num.partitions]")
    assert _error(validate, "1", {"ssl.keystore.password": "x", "log.retention.ms": "a"},
                  _current)[1].startswith("These security configs can be dynamically updated "
                                          "only per-listener")
    assert _error(validate, "", {"sasl.kerberos.min.time.before.relogin": "3",
                                 "log.retention.ms": "abc"}, _current)[1].startswith(
        "Invalid value abc for configuration log.retention.ms")
    assert _error(validate, "", {"sasl.kerberos.min.time.before.relogin": "3"}, _current) == (
        ErrorCode.invalid_request, "Cannot update these configs at default cluster level, broker "
        "id must be specified: [sasl.kerberos.min.time.before.relogin]")
    assert "value should not be greater than double the current value 8" in _error(
        validate, "", {"num.io.threads": "17"}, _current)[1]
    validate("", {"num.io.threads": "16", "no.such.key": "x"}, _current)
    validate("1", {"listener.name.plaintext.ssl.keystore.password": "x"}, _current)


def test_incremental_operations_and_their_errors() -> None:
    ops = dynamic_config.apply_ops
    assert ops({}, [("log.cleanup.policy", 2, "compact")]) == {
        "log.cleanup.policy": "delete,compact"}  # APPEND starts from Kafka's default
    assert ops({"log.cleanup.policy": "delete,compact"}, [("log.cleanup.policy", 3, "delete"),
                                                          ("x", 1, None)]) == {
        "log.cleanup.policy": "compact"}
    assert _error(ops, {}, [("log.retention.ms", 2, "5")]) == (
        ErrorCode.invalid_config, "Config value append is not allowed for config key: "
        "log.retention.ms")
    check = dynamic_config.check_ops
    assert _error(check, [("a", 0, "1"), ("a", 1, None)])[1] == "Error due to duplicate config keys"
    assert _error(check, [("a", 0, None), ("b", 9, "1")])[1] == "Null value not supported for : a"
    assert _error(check, [("a", 9, "1")])[1] == "Unknown operations type 9"
    assert _error(dynamic_config.check_alter_name, "x", 1)[1] == (
        "Node id must be an integer, but it is: x")
    assert _error(dynamic_config.check_alter_name, "2", 1)[1] == (
        "Unexpected broker id, expected 1, but received 2")


def test_the_cluster_level_min_isr_stays() -> None:
    stored = {"min.insync.replicas": "1"}
    assert _error(dynamic_config.check_cluster_min_isr, "", stored, {"x": "1"}) == (
        ErrorCode.invalid_config,
        "Cluster-level min.insync.replicas cannot be removed while ELR is enabled.")
    dynamic_config.check_cluster_min_isr("1", stored, {})
    dynamic_config.check_cluster_min_isr("", {}, {})


def test_overlay_a_broker_level_wins_over_the_cluster_default() -> None:
    levels = {"": {"message.max.bytes": "2000", "log.retention.ms": "5", "no.such": "x"},
              "1": {"message.max.bytes": "3000"}, "2": {"log.retention.ms": "9"}}
    values, sources = dynamic_config.overlay(levels, 1)
    assert values == {"message.max.bytes": 3000, "log.retention.ms": 5}
    assert sources == {"message.max.bytes": "dynamic_broker",
                       "log.retention.ms": "dynamic_default"}


def test_broker_entries_levels_and_synonyms() -> None:
    config = load(None, {"log.retention.ms": "1000"}, {})
    levels = {"": {"log.retention.ms": "2000", "zzz": "1"}, "1": {"ssl.keystore.type": "PKCS12"}}
    entries = {e.name: e for e in broker_config_entries.describe_broker(
        config, levels, 1, 9092, None)}
    ret = entries["log.retention.ms"]
    assert (ret.value, ret.source, ret.read_only) == ("2000", 3, False)
    assert ret.synonyms == (("log.retention.ms", "2000", 3), ("log.retention.ms", "1000", 4),
                            ("log.retention.hours", "168", 5))
    assert entries["log.retention.minutes"].synonyms == ()  # nothing of its own: Kafka drops all
    assert (entries["zzz"].value, entries["zzz"].sensitive, entries["zzz"].type_id) == (
        None, True, 0)
    assert entries["ssl.keystore.type"].source == 2
    assert entries["listeners"].value == "PLAINTEXT://127.0.0.1:9092"
    assert entries["kcompat.flush.mode"].read_only
    (default,) = broker_config_entries.describe_cluster_default(levels, ["log.retention.ms"])
    assert (default.value, default.source, default.synonyms) == (
        "2000", 3, (("log.retention.ms", "2000", 3),))


def test_broker_logger_levels_in_log4j_names() -> None:
    name = "kcompat.test.broker_loggers"
    logger = logging.getLogger(name)
    try:
        broker_loggers.alter("1", 1, [(name, 0, "TRACE")], validate_only=False)
        assert dict(broker_loggers.describe([name, "no.such"])) == {name: "TRACE"}
        broker_loggers.alter("1", 1, [(name, 0, "FATAL")], validate_only=True)
        assert logger.level == broker_loggers.TRACE  # validate-only changes nothing
        broker_loggers.alter("1", 1, [(name, 1, None)], validate_only=False)
        assert logger.level == logging.NOTSET
        assert [broker_loggers.level_name(x) for x in (logging.WARNING, logging.CRITICAL)] == [
            "WARN", "FATAL"]
        assert _error(broker_loggers.alter, "1", 1, [(name, 0, "warn")], False) == (
            ErrorCode.invalid_config, f"Cannot set the log level of {name} to warn as it is not "
            "a supported log level. Valid log levels are DEBUG, ERROR, FATAL, INFO, TRACE, WARN")
    finally:
        logger.setLevel(logging.NOTSET)


def test_keys_kcompat_shares_with_kafka_have_kafkas_types() -> None:
    """A dynamic value is parsed by Kafka's type and stands in for the static
    one, and DescribeConfigs reports Kafka's type (FINDINGS D9: log.dirs and
    controller.quorum.voters were STRING)."""
    from kcompat.broker.config.broker_config import BROKER_CONFIGS
    differ = {k: (broker_keys.KEYS[k].type, d.type) for k, d in BROKER_CONFIGS.items()
              if k in broker_keys.KEYS and broker_keys.KEYS[k].type.lower() != d.type}
    assert not differ


def test_listener_prefixed_keys_at_each_level_as_kafka() -> None:
    """Issue 32: Kafka 4.4 takes a listener-prefixed key at the cluster level only
    for max.connections, max.connection.creation.rate and num.network.threads
    (the prefix's listener need not exist; a name without a key after the
    listener is no listener key); per broker it takes any, known key or not
    (``listener.name.plaintext.broker.id`` too: a broker stores and describes it,
    never reads it). Before, kcompat refused all of them at the cluster level."""
    validate = dynamic_config.validate
    for key in ("listener.name.plaintext.max.connections",
                "listener.name.plaintext.max.connection.creation.rate",
                "listener.name.nosuch.num.network.threads",
                "listener.name.PLAINTEXT.max.connections", "listener.name..max.connections",
                "listener.name.plaintext"):
        validate("", {key: "3"}, _current)
    for key in ("listener.name.plaintext.broker.id", "listener.name.plaintext.foo.bar",
                "listener.name.plaintext.connections.max.idle.ms",
                "listener.name.plaintext.max.connections.per.ip"):
        assert _error(validate, "", {key: "5"}, _current) == (
            ErrorCode.invalid_request, "Cannot update these configs at default cluster level, "
            f"broker id must be specified: [{key}]")
        validate("1", {key: "5"}, _current)


def test_a_listeners_dynamic_value_is_what_the_listener_reads() -> None:
    config = load(None, {"max.connections": "50",
                         "listener.name.plaintext.connections.max.idle.ms": "7000"}, {})
    config.dynamic, _ = dynamic_config.overlay({
        "": {"listener.name.plaintext.max.connections": "3", "listener.name.x.max.connections": "a"},
        "1": {"listener.name.plaintext.connections.max.idle.ms": "9000"}}, 1)
    assert config.for_listener("PLAINTEXT", "max.connections") == 3
    assert config.for_listener("PLAINTEXT", "connections.max.idle.ms") == 9000
    assert config.for_listener("OTHER", "max.connections") == 50
    config.dynamic = {}
    assert config.for_listener("PLAINTEXT", "connections.max.idle.ms") == 7000
