"""segment.bytes as Kafka 4.4 has it: at least 1 MiB (KAFKA-16368), smaller
segments only through the internal topic key ``internal.segment.bytes``,
which wins over segment.bytes where set (Kafka's LogConfig.segmentSize) and
is listed only where a topic sets it. The answers Kafka gives are checked
against Apache Kafka 4.4.0 in compat_tests/java/test_segment_bytes_differential.py."""

from __future__ import annotations

import pytest

from kcompat.broker.config import broker_config as config
from kcompat.broker.config.configdef import ConfigError
from kcompat.broker.config.topic_config import listed_keys, log_config, validate_overrides


@pytest.mark.parametrize("raw,message", [
    ({"segment.bytes": "1048575"},
     "Invalid value 1048575 for configuration segment.bytes: Value must be at least 1048576"),
    ({"segment.bytes": "2048", "internal.segment.bytes": "2048"},
     "Invalid value 2048 for configuration segment.bytes: Value must be at least 1048576"),
    ({"internal.segment.bytes": "abc"},
     "Invalid value abc for configuration internal.segment.bytes: Not a number of type INT"),
    ({"internal.segment.bytes": "2147483648"},
     "Invalid value 2147483648 for configuration internal.segment.bytes: Not a number of type "
     "INT"),
])
def test_refused_in_kafkas_words(raw: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        validate_overrides(raw)
    assert str(e.value) == message


def test_internal_segment_bytes_overrides_segment_bytes() -> None:
    assert log_config(validate_overrides({"segment.bytes": "1048576"}), {}).segment_bytes == 1 << 20
    both = validate_overrides({"segment.bytes": "1048576", "internal.segment.bytes": "2048"})
    assert log_config(both, {}).segment_bytes == 2048
    # the broker's log.segment.bytes is the default of segment.bytes only
    assert log_config({}, {"log.segment.bytes": 5 << 20}).segment_bytes == 5 << 20
    assert log_config({"internal.segment.bytes": 300}, {"log.segment.bytes": 5 << 20}) \
        .segment_bytes == 300
    # any int, as in Kafka: zero or less rolls a segment per batch
    for raw in ("0", "-1"):
        assert log_config(validate_overrides({"internal.segment.bytes": raw}), {}) \
            .segment_bytes == 1


def test_internal_key_listed_only_where_set() -> None:
    assert "internal.segment.bytes" not in listed_keys({})
    assert "segment.bytes" in listed_keys({})
    assert "internal.segment.bytes" in listed_keys({"internal.segment.bytes": 2048})


def test_broker_log_segment_bytes_minimum() -> None:
    with pytest.raises(ConfigError, match="Invalid value 1048575 for configuration "
                                          "log.segment.bytes: Value must be at least 1048576"):
        config.load(None, {"log.segment.bytes": "1048575"}, {})
    assert config.load(None, {"log.segment.bytes": "1048576"}, {})["log.segment.bytes"] == 1 << 20
