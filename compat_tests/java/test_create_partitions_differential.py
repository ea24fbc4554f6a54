"""Differential: CreatePartitions retried (issue 32) through kafka-python's
admin ``create_partitions``, Apache Kafka 4.4 against kcompat (one broker each).

A client whose increase timed out on its side (the broker carried it out) asks
again: Kafka answers INVALID_PARTITIONS "Topic already has N partition(s).",
``validate_only`` too, and "The topic T currently has N partition(s); M would
not be an increase." below the count; an unknown topic is
UNKNOWN_TOPIC_OR_PARTITION without a message. Last, two clients send the same
increase at once: one is carried out, the other refused, and the topic has
the count once. Each step is a test: kcompat's observation must equal Kafka's.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewPartitions, NewTopic

from compat_tests._broker import Broker
from compat_tests.java.kafka_reference import KafkaReference

pytestmark = pytest.mark.timeout(120)

STEPS = ["validate_only", "increase", "retry", "retry_validate_only", "lower",
         "lower_validate_only", "unknown", "partitions_after", "racing", "racing_after"]


def _increase(admin: KafkaAdminClient, topic: str, count: int,
              validate_only: bool = False) -> list[tuple[str, str | None]]:
    r = admin.create_partitions({topic: NewPartitions(count)}, validate_only=validate_only,
                                raise_errors=False)
    return [(x.error_code, x.error_message) for x in r.results]


def _count(admin: KafkaAdminClient, topic: str) -> int:
    [t] = admin.describe_topics([topic])
    return len(t["partitions"])


def run_script(bootstrap: str) -> dict[str, Any]:
    topic = f"cp-retry-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="cp-retry")
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
        time.sleep(0.5)
        obs: dict[str, Any] = {
            "validate_only": _increase(admin, topic, 3, validate_only=True),
            "increase": _increase(admin, topic, 3),
            "retry": _increase(admin, topic, 3),
            "retry_validate_only": _increase(admin, topic, 3, validate_only=True),
            "lower": _increase(admin, topic, 2),
            "lower_validate_only": _increase(admin, topic, 2, validate_only=True),
            "unknown": _increase(admin, f"{topic}-none", 3),
        }
        time.sleep(0.5)
        obs["partitions_after"] = _count(admin, topic)
        obs["racing"] = _racing(bootstrap, topic, 5)
        time.sleep(0.5)
        obs["racing_after"] = _count(admin, topic)
        return {k: repr(v).replace(topic, "TOPIC") for k, v in obs.items()}
    finally:
        admin.close()


def _racing(bootstrap: str, topic: str, count: int) -> list[Any]:
    clients = [KafkaAdminClient(bootstrap_servers=bootstrap, client_id=f"cp-race-{i}")
               for i in range(2)]
    answers: list[Any] = []
    start = threading.Barrier(2)

    def send(admin: KafkaAdminClient) -> None:
        start.wait()
        answers.extend(_increase(admin, topic, count))

    try:
        for admin in clients:
            admin.describe_topics([topic])  # connected and ready before the race
        threads = [threading.Thread(target=send, args=(a,)) for a in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        return sorted(answers, key=repr)
    finally:
        for admin in clients:
            admin.close()


@pytest.fixture(scope="module")
def kafka_answers(kafka_reference: KafkaReference) -> dict[str, Any]:
    return run_script(kafka_reference.bootstrap)


@pytest.fixture(scope="module")
def kcompat_answers(module_broker: Broker) -> dict[str, Any]:
    return run_script(module_broker.bootstrap)


@pytest.mark.parametrize("step", STEPS)
def test_step_matches_kafka(kafka_answers: dict[str, Any], kcompat_answers: dict[str, Any],
                            step: str) -> None:
    assert kcompat_answers[step] == kafka_answers[step], step


def test_every_step_ran(kafka_answers: dict[str, Any]) -> None:
    assert sorted(kafka_answers) == sorted(STEPS)
