"""Group configs: parsing and validation with Kafka 4.4's messages (captured
from Apache Kafka 4.4.0's answers to IncrementalAlterConfigs on a GROUP)."""

from __future__ import annotations

from typing import Any

import pytest

from kcompat.broker.config import broker_config
from kcompat.broker.config.group_config import (
    GROUP_CONFIGS,
    GroupConfigError,
    auto_offset_reset,
    clamp,
    duration_ms,
    effective,
    listed_keys,
    synonyms,
    validate_overrides,
)
from kcompat.broker.storage.metadata import MetadataImage


def cfg(**flags: Any) -> broker_config.BrokerConfig:
    return broker_config.load(None, {k.replace("_", "."): x for k, x in flags.items()}, {})


def error(raw: dict[str, Any], config: broker_config.BrokerConfig | None = None) -> str:
    with pytest.raises(GroupConfigError) as e:
        validate_overrides(raw, config or cfg())
    return e.value.message


@pytest.mark.parametrize("text,ms", [
    ("PT1H", 3_600_000), ("P1D", 86_400_000), ("PT0.5S", 500), ("pt15m", 900_000),
    ("P1DT2H3M4.005S", 93_784_005), ("PT-1H61M", 60_000), ("-PT1H", None), ("P", None),
    ("PT", None), ("P1DT", None), ("1H", None), ("PT1.2.3S", None), ("", None),
])
def test_duration_ms(text: str, ms: int | None) -> None:
    assert duration_ms(text) == ms


def test_auto_offset_reset() -> None:
    assert validate_overrides({"share.auto.offset.reset": " earliest "}, cfg()) == {
        "share.auto.offset.reset": "earliest"}
    assert validate_overrides({"share.auto.offset.reset": "by_duration:PT1H"}, cfg())
    assert auto_offset_reset("by_duration:PT1H") == ("by_duration", 3_600_000)
    assert auto_offset_reset("latest") == ("latest", None)
    for bad in ("bogus", "EARLIEST", "by_duration:-PT1H", "by_duration:xx"):
        assert error({"share.auto.offset.reset": bad}) == (
            f"Invalid value {bad} for configuration share.auto.offset.reset: Invalid value "
            f"`{bad}` for configuration share.auto.offset.reset. The value must be either "
            "'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.")


@pytest.mark.parametrize("raw,message", [
    ({"nope.key": "1"}, "Unknown group config name: nope.key"),
    ({"share.record.lock.duration.ms": "abc"},
     "Invalid value abc for configuration share.record.lock.duration.ms: "
     "Not a number of type INT"),
    ({"share.record.lock.duration.ms": "500"},
     "Invalid value 500 for configuration share.record.lock.duration.ms: "
     "Value must be at least 1000"),
    ({"share.record.lock.duration.ms": "1000"},
     "share.record.lock.duration.ms must be in the range 15000 to 60000 inclusive."),
    ({"share.delivery.count.limit": "1"},
     "Invalid value 1 for configuration share.delivery.count.limit: Value must be at least 2"),
    ({"share.delivery.count.limit": "11"},
     "share.delivery.count.limit must be in the range 2 to 10 inclusive."),
    ({"share.session.timeout.ms": "1000"},
     "share.session.timeout.ms must be in the range 45000 to 60000 inclusive."),
    ({"share.isolation.level": "READ_COMMITTED"},
     "Invalid value READ_COMMITTED for configuration share.isolation.level: "
     "String must be one of: read_committed, read_uncommitted"),
    ({"errors.deadletterqueue.copy.record.enable": "maybe"},
     "Invalid value maybe for configuration errors.deadletterqueue.copy.record.enable: "
     "Expected value to be either true or false"),
    ({"errors.deadletterqueue.topic.name": "__x"},
     "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'"),
    ({"streams.assignor.name": "zzz"},
     "streams.assignor.name 'zzz' is not a registered task assignor. "
     "Registered assignors are: [sticky]."),
    ({"streams.num.standby.replicas": "3"},
     "streams.num.standby.replicas must be less than or equal to 2"),
    ({"kc.share.ordering": "fifo"},
     "Invalid value fifo for configuration kc.share.ordering: "
     "String must be one of: none, message-group"),
    ({"kc.share.redelivery.backoff.multiplier": "0.5"},
     "Invalid value 0.5 for configuration kc.share.redelivery.backoff.multiplier: "
     "Value must be at least 1.0"),
    ({"kc.share.redelivery.backoff.ms": "-1"},
     "Invalid value -1 for configuration kc.share.redelivery.backoff.ms: "
     "Value must be at least 0"),
])
def test_bad_values(raw: dict[str, Any], message: str) -> None:
    assert error(raw) == message


def test_bounds_come_from_the_broker() -> None:
    loose = cfg(group_share_min_record_lock_duration_ms="1000",
                group_share_max_delivery_count_limit="20")
    parsed = validate_overrides({"share.record.lock.duration.ms": "1000",
                                 "share.delivery.count.limit": "15"}, loose)
    assert parsed == {"share.record.lock.duration.ms": 1000, "share.delivery.count.limit": 15}
    assert error({"share.record.lock.duration.ms": "70000"}, loose) == (
        "share.record.lock.duration.ms must be in the range 1000 to 60000 inclusive.")


def test_session_must_exceed_heartbeat() -> None:
    loose = cfg(group_share_max_heartbeat_interval_ms="50000")
    assert error({"share.heartbeat.interval.ms": "45000"}, loose) == (
        "share.session.timeout.ms must be greater than share.heartbeat.interval.ms")
    assert validate_overrides({"share.heartbeat.interval.ms": "44999"}, loose)


def test_extension_values_and_retyped_overrides() -> None:
    parsed = validate_overrides({"kc.share.ordering": "message-group",
                                 "kc.share.redelivery.backoff.multiplier": "1.5",
                                 "errors.deadletterqueue.copy.record.enable": "TRUE",
                                 "streams.rack.aware.assignment.tags": "a, b"}, cfg())
    assert parsed == {"kc.share.ordering": "message-group",
                      "kc.share.redelivery.backoff.multiplier": 1.5,
                      "errors.deadletterqueue.copy.record.enable": True,
                      "streams.rack.aware.assignment.tags": ["a", "b"]}
    assert validate_overrides(parsed, cfg()) == parsed  # stored values validate again


def test_effective_values_sources_and_clamping() -> None:
    config = cfg(group_share_delivery_count_limit="7")
    overrides = {"share.record.lock.duration.ms": 50000}
    assert effective("share.record.lock.duration.ms", overrides, config) == (50000, "group")
    assert effective("share.delivery.count.limit", overrides, config) == (7, "broker")
    assert effective("share.session.timeout.ms", overrides, config) == (45000, "default")
    assert effective("streams.assignor.name", {}, config) == ("sticky", "default")
    assert effective("kc.share.ordering", {}, config) == ("none", "default")
    tight = cfg(group_share_max_record_lock_duration_ms="40000")
    assert clamp("share.record.lock.duration.ms", 50000, tight) == 40000
    assert clamp("kc.share.redelivery.backoff.ms", 5, tight) == 5
    assert synonyms("share.delivery.count.limit", {"share.delivery.count.limit": 6}, config) == [
        ("share.delivery.count.limit", "6", "group"),
        ("group.share.delivery.count.limit", "7", "broker"),
        ("group.share.delivery.count.limit", "5", "default")]
    assert synonyms("share.auto.offset.reset", {}, config) == [
        ("share.auto.offset.reset", "latest", "default")]


def test_listed_keys() -> None:
    kafka = listed_keys({}, None)
    assert len(kafka) == 21 and "consumer.assignor.offload.enable" not in kafka
    assert not any(k.startswith("kc.") for k in kafka)
    assert "kc.share.ordering" in listed_keys({"kc.share.ordering": "none"}, None)
    assert listed_keys({}, ["kc.share.ordering", "share.isolation.level", "nope"]) == [
        "share.isolation.level", "kc.share.ordering"]
    assert len(GROUP_CONFIGS) == 31


def test_image_keeps_and_forgets_group_configs() -> None:
    image = MetadataImage()
    image.apply({"type": "group_configs", "name": "g", "configs": {"kc.share.ordering": "none"}})
    assert image.group_configs == {"g": {"kc.share.ordering": "none"}}
    image.apply({"type": "group_configs", "name": "g", "configs": {}})
    assert image.group_configs == {}
