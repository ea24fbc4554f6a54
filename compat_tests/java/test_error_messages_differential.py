"""Differential: the error messages of FindCoordinator, DescribeConfigs and
CreateTopics, Apache Kafka 4.4 against kcompat, field for field (a client shows
them: Java's exceptions carry them, librdkafka's error strings too).

* FindCoordinator v1-3 say ``NONE`` for a coordinator found, v4-6 an empty
  message (never null).
* DescribeConfigs v1-4: a resource described carries an empty message, an
  unknown topic UNKNOWN_TOPIC_OR_PARTITION with an empty one, an invalid name
  INVALID_TOPIC_EXCEPTION with Kafka's ``Topic.validate`` text ("", ".", "..",
  250 characters, a slash).
* CreateTopics v7 (validate-only) refuses the same names with the same texts.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest

from compat_tests._broker import Broker, unique_topic
from compat_tests.java.kafka_reference import KafkaReference
from kcompat.cli._kio import Connection
from kcompat.wire import codec
from kcompat.wire import versions as v

BAD_NAMES = ["", ".", "..", "x" * 250, "bad/name"]


def _req(api: int, version: int, **fields: Any) -> Any:
    return codec.build(codec.request_class(api, version), **fields)


def _coordinator_found(conn: Connection, group: str) -> None:
    """Kafka answers COORDINATOR_NOT_AVAILABLE while it creates __consumer_offsets."""
    deadline = time.monotonic() + 30
    while conn.call(_req(v.FIND_COORDINATOR, 4, key_type=0, coordinator_keys=(group,))
                    ).coordinators[0].error_code != 0:
        assert time.monotonic() < deadline, "no group coordinator"
        time.sleep(0.2)


def run_script(bootstrap: str, existing: str) -> dict[str, Any]:
    host, port = bootstrap.rsplit(":", 1)
    conn = Connection(host, int(port), 15)
    obs: dict[str, Any] = {}
    try:
        _coordinator_found(conn, "messages-g")
        for version in (1, 2, 3):
            r = conn.call(_req(v.FIND_COORDINATOR, version, key_type=0, key="messages-g"))
            obs[f"find_coordinator_v{version}"] = (int(r.error_code), r.error_message)
        for version in (4, 5, 6):
            r = conn.call(_req(v.FIND_COORDINATOR, version, key_type=0,
                               coordinator_keys=("messages-g",)))
            obs[f"find_coordinator_v{version}"] = [(int(c.error_code), c.error_message)
                                                   for c in r.coordinators]
        names = [existing, "unknown-" + existing, *BAD_NAMES]
        for version in (1, 2, 3, 4):
            m = codec.request_module(v.DESCRIBE_CONFIGS, version)
            extra = {"include_documentation": False} if version >= 3 else {}
            r = conn.call(_req(v.DESCRIBE_CONFIGS, version, include_synonyms=False, **extra,
                               resources=tuple(m.DescribeConfigsResource(
                                   resource_type=2, resource_name=n,
                                   configuration_keys=("retention.ms",)) for n in names)))
            obs[f"describe_configs_v{version}"] = [
                (int(x.error_code), x.error_message) for x in r.results]
        m = codec.request_module(v.CREATE_TOPICS, 7)
        r = conn.call(_req(v.CREATE_TOPICS, 7, timeout=datetime.timedelta(seconds=10),
                           validate_only=True, topics=tuple(m.CreatableTopic(
                               name=n, num_partitions=1, replication_factor=1, assignments=(),
                               configs=()) for n in BAD_NAMES)))
        obs["create_topics_bad_names"] = [(int(t.error_code), t.error_message) for t in r.topics]
    finally:
        conn.close()
    return {step: _named(seen, existing) for step, seen in obs.items()}


def _named(seen: Any, existing: str) -> Any:
    """The per-run topic name as ``T`` in messages."""
    if isinstance(seen, str):
        return seen.replace(existing, "T")
    if isinstance(seen, (list, tuple)):
        return type(seen)(_named(s, existing) for s in seen)
    return seen


STEPS = [*(f"find_coordinator_v{n}" for n in range(1, 7)),
         *(f"describe_configs_v{n}" for n in range(1, 5)), "create_topics_bad_names"]


def _with_topic(bootstrap: str) -> str:
    topic = unique_topic("messages")
    host, port = bootstrap.rsplit(":", 1)
    conn = Connection(host, int(port), 15)
    try:
        m = codec.request_module(v.CREATE_TOPICS, 7)
        r = conn.call(_req(v.CREATE_TOPICS, 7, timeout=datetime.timedelta(seconds=10),
                           validate_only=False, topics=(m.CreatableTopic(
                               name=topic, num_partitions=1, replication_factor=1,
                               assignments=(), configs=()),)))
        assert r.topics[0].error_code == 0, r
        deadline = time.monotonic() + 15  # until this broker describes it (Kafka: a moment)
        d = codec.request_module(v.DESCRIBE_CONFIGS, 4)
        while conn.call(_req(v.DESCRIBE_CONFIGS, 4, include_synonyms=False,
                             include_documentation=False, resources=(d.DescribeConfigsResource(
                                 resource_type=2, resource_name=topic,
                                 configuration_keys=()),))).results[0].error_code != 0:
            assert time.monotonic() < deadline, f"{topic} never described"
            time.sleep(0.1)
    finally:
        conn.close()
    return topic


@pytest.fixture(scope="module")
def answers(kafka_reference: KafkaReference, module_broker: Broker) -> dict[str, dict[str, Any]]:
    return {name: run_script(bootstrap, _with_topic(bootstrap)) for name, bootstrap in (
        ("kafka", kafka_reference.bootstrap), ("kcompat", module_broker.bootstrap))}


def test_the_reference_says_what_this_module_expects(answers: dict[str, dict[str, Any]]) -> None:
    kafka = answers["kafka"]
    assert kafka["find_coordinator_v3"] == (0, "NONE")
    assert kafka["find_coordinator_v4"] == [(0, "")]
    assert kafka["describe_configs_v4"][:2] == [(0, ""), (3, "")]


@pytest.mark.parametrize("step", STEPS)
def test_step_matches_kafka(answers: dict[str, dict[str, Any]], step: str) -> None:
    assert answers["kcompat"][step] == answers["kafka"][step], step
