"""Differential: group configs (ConfigResource GROUP = 32) on Apache Kafka 4.4
and on kcompat, through kafka-python's protocol classes (an independent codec).

The same DescribeConfigs of a group nobody configured (every key, value,
source, type and synonym) and the same IncrementalAlterConfigs, good and bad
(error code and message), must come back alike from both brokers, started with
the same ``group.share.min.record.lock.duration.ms``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin import (
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

from compat_tests._broker import Broker
from compat_tests.java.kafka_reference import SHARE_TEST_OVERRIDES, KafkaReference
from tests.integration._raw import RawConnection

GROUP = 32
CHANGES: list[tuple[str, int, str | None]] = [
    ("share.auto.offset.reset", 0, "earliest"),
    ("share.auto.offset.reset", 0, "by_duration:PT1H"),
    ("share.auto.offset.reset", 0, "by_duration:-PT1H"),
    ("share.auto.offset.reset", 0, "EARLIEST"),
    ("share.record.lock.duration.ms", 0, "1000"),
    ("share.record.lock.duration.ms", 0, "500"),
    ("share.record.lock.duration.ms", 0, "99999"),
    ("share.record.lock.duration.ms", 0, "abc"),
    ("share.delivery.count.limit", 0, "11"),
    ("share.delivery.count.limit", 0, "1"),
    ("share.session.timeout.ms", 0, "1000"),
    ("share.isolation.level", 0, "READ_COMMITTED"),
    ("errors.deadletterqueue.topic.name", 0, "__dlq"),
    ("errors.deadletterqueue.copy.record.enable", 0, "maybe"),
    ("streams.assignor.name", 0, "zzz"),
    ("no.such.key", 0, "1"),
    ("share.auto.offset.reset", 2, "x"),
    ("share.auto.offset.reset", 0, None),
    ("share.auto.offset.reset", 1, None),
]


@pytest.fixture(scope="module")
def kcompat_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    b = Broker(Path(tmp_path_factory.mktemp("group-configs")),
               extra_args=tuple(a for k, v in SHARE_TEST_OVERRIDES.items()
                                for a in ("--set", f"{k}={v}")))
    b.start()
    try:
        yield b
    finally:
        b.close()


def _describe(bootstrap: str, group: str) -> dict[str, Any]:
    R = DescribeConfigsRequest
    conn = RawConnection(bootstrap, timeout=20)
    try:
        req = R(version=4, include_synonyms=True, include_documentation=False, resources=[
            R.DescribeConfigsResource(resource_type=GROUP, resource_name=group,
                                      configuration_keys=None)])
        result = conn.request(req, DescribeConfigsResponse[4]).results[0]
    finally:
        conn.close()
    assert result.error_code == 0, result.error_message
    return {c.name: (c.value, c.config_source, c.config_type, c.read_only,
                     [(s.name, s.value, s.source) for s in c.synonyms])
            for c in result.configs}


def _alter(bootstrap: str, group: str, *ops: tuple[str, int, str | None]) -> Any:
    R = IncrementalAlterConfigsRequest
    conn = RawConnection(bootstrap, timeout=20)
    try:
        req = R(version=1, validate_only=True, resources=[R.AlterConfigsResource(
            resource_type=GROUP, resource_name=group, configs=[
                R.AlterConfigsResource.AlterableConfig(name=key, config_operation=op,
                                                       value=value)
                for key, op, value in ops])])
        resp = conn.request(req, IncrementalAlterConfigsResponse[1]).responses[0]
    finally:
        conn.close()
    return resp.error_code, resp.error_message


def test_describe_of_an_unconfigured_group_matches_kafka(
        kafka_reference: KafkaReference, kcompat_broker: Broker) -> None:
    assert _describe(kcompat_broker.bootstrap, "fresh") == _describe(
        kafka_reference.bootstrap, "fresh")


@pytest.mark.parametrize("key,op,value", CHANGES)
def test_alter_answers_match_kafka(kafka_reference: KafkaReference, kcompat_broker: Broker,
                                   key: str, op: int, value: str | None) -> None:
    assert _alter(kcompat_broker.bootstrap, "g", (key, op, value)) == _alter(
        kafka_reference.bootstrap, "g", (key, op, value))


def test_request_errors_match_kafka(kafka_reference: KafkaReference,
                                    kcompat_broker: Broker) -> None:
    for group, ops in (("g", [("share.auto.offset.reset", 0, "earliest"),
                              ("share.auto.offset.reset", 1, None)]),
                       ("", [("share.auto.offset.reset", 0, "earliest")])):
        assert _alter(kcompat_broker.bootstrap, group, *ops) == _alter(
            kafka_reference.bootstrap, group, *ops)
