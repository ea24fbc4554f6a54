"""Differential: AlterReplicaLogDirs (issue 32) through kafka-python's admin
``alter_replica_log_dirs``, Apache Kafka 4.4 against kcompat (one broker each).

Before, kcompat had no handler and closed the connection ("socket
disconnected"). Both brokers have one log dir, the one DescribeLogDirs names;
each step moves replicas to it, to other paths or names unknown partitions,
and keeps the error class per replica: NoError for the dir a replica is in,
LogDirNotFoundError for any path that is not exactly a log dir of the broker
(a trailing slash too), UnknownTopicOrPartitionError for an unknown topic or
partition, InvalidTopicError when the future log's directory name would pass
255 characters. Each step is a test: kcompat's observation must equal Kafka's.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from compat_tests._broker import Broker
from compat_tests.java.kafka_reference import KafkaReference

pytestmark = pytest.mark.timeout(120)

TOPIC = "log-dirs-diff"
LONG = "t" * 214  # "<214 t>-0" + ".<32 hex>-future" is 256 characters


def _steps(here: str) -> dict[str, list[tuple[str, int, str]]]:
    return {
        "to_its_dir": [(TOPIC, 0, here), (TOPIC, 1, here)],
        "unknown": [(TOPIC, 9, here), ("no-such-topic", 0, here)],
        "not_a_log_dir": [(TOPIC, 0, "/no/such/dir"), ("no-such-topic", 0, "/no/such/dir")],
        "trailing_slash": [(TOPIC, 0, here + "/")],
        "relative": [(TOPIC, 1, "relative/dir")],
        "mixed": [(TOPIC, 0, here), (TOPIC, 1, "/elsewhere"), (TOPIC, 5, here)],
        "name_too_long": [(LONG, 0, here), (TOPIC[:3], 0, here)],
    }


def run_script(bootstrap: str) -> dict[str, Any]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="log-dirs-diff")
    try:
        admin.create_topics([NewTopic(TOPIC, 2, 1)])
        time.sleep(0.5)
        [broker] = admin.describe_log_dirs()
        node, [log_dir] = broker["broker"], broker["log_dirs"]
        obs: dict[str, Any] = {}
        for step, moves in _steps(log_dir["log_dir"]).items():
            answer = admin.alter_replica_log_dirs({(t, p, node): d for t, p, d in moves})
            obs[step] = sorted((r.topic, r.partition, e.__name__) for r, e in answer.items())
        return obs
    finally:
        admin.close()


@pytest.fixture(scope="module")
def kafka_answers(kafka_reference: KafkaReference) -> dict[str, Any]:
    return run_script(kafka_reference.bootstrap)


@pytest.fixture(scope="module")
def kcompat_answers(module_broker: Broker) -> dict[str, Any]:
    return run_script(module_broker.bootstrap)


@pytest.mark.parametrize("step", list(_steps("")))
def test_step_matches_kafka(kafka_answers: dict[str, Any], kcompat_answers: dict[str, Any],
                            step: str) -> None:
    assert kcompat_answers[step] == kafka_answers[step], step


def test_the_dir_a_replica_is_in_is_no_error(kcompat_answers: dict[str, Any]) -> None:
    assert kcompat_answers["to_its_dir"] == [(TOPIC, 0, "NoError"), (TOPIC, 1, "NoError")]
