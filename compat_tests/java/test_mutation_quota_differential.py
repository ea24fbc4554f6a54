"""Differential: the controller mutation quota (KIP-599,
``controller_mutation_rate``), Apache Kafka 4.4 against kcompat.

A client id gets a quota of 1 mutation a second (a partition created or
deleted is one): its token bucket holds 11 (``controller.quota.window.num`` ×
1 s) and starts full. The same script runs against both brokers, each
request on a new connection (a throttled connection is muted for the
throttle, KIP-219, and the bucket would refill meanwhile):

* 8 partitions go through (3 tokens left); a request for 10 more and 1 more:
  the first takes the bucket to -7 (a request that finds tokens goes through
  whole), the second is THROTTLING_QUOTA_EXCEEDED, the answer throttled;
* while the bucket is below zero: a topic that already exists is refused for
  that (validation comes first), a validate-only creation, a deletion
  (DeleteTopics v6) and a partition increase (CreatePartitions v3) are
  THROTTLING_QUOTA_EXCEEDED; the versions before strict enforcement
  (CreateTopics v5, DeleteTopics v4, CreatePartitions v2) go through,
  throttled;
* another client id has no quota and is never refused.

Each answer is kept as error codes and messages with the throttle as
"throttled or not" (its value depends on the milliseconds each broker took).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)

from compat_tests._broker import Broker
from compat_tests.java._differential import kcompat_with
from compat_tests.java.kafka_reference import KafkaReference
from tests.integration._raw import RawConnection
from tests.integration.test_quota_enforcement import set_quota

MUTATION = "controller_mutation_rate"


def _call(bootstrap: str, client_id: str, request: Any, response: Any) -> Any:
    conn = RawConnection(bootstrap, timeout=30, client_id=client_id)
    try:
        return conn.request(request, response)
    finally:
        conn.close()


def _create(bootstrap: str, client_id: str, version: int, topics: dict[str, int],
            validate_only: bool = False) -> Any:
    R = CreateTopicsRequest
    req = R(version=version, timeout_ms=20000, validate_only=validate_only, topics=[
        R.CreatableTopic(name=name, num_partitions=count, replication_factor=1, assignments=[],
                         configs=[]) for name, count in topics.items()])
    r = _call(bootstrap, client_id, req, CreateTopicsResponse[version])
    return (sorted((t.name, t.error_code, t.error_message) for t in r.topics),
            r.throttle_time_ms > 0)


def _delete(bootstrap: str, client_id: str, version: int, name: str) -> Any:
    R = DeleteTopicsRequest
    if version >= 6:
        req = R(version=version, timeout_ms=20000,
                topics=[R.DeleteTopicState(name=name, topic_id=uuid.UUID(int=0))])
    else:
        req = R(version=version, timeout_ms=20000, topic_names=[name])
    r = _call(bootstrap, client_id, req, DeleteTopicsResponse[version])
    return (sorted((t.name, t.error_code, getattr(t, "error_message", None))
                   for t in r.responses), r.throttle_time_ms > 0)


def _grow(bootstrap: str, client_id: str, version: int, name: str, count: int) -> Any:
    R = CreatePartitionsRequest
    req = R(version=version, timeout_ms=20000, validate_only=False,
            topics=[R.CreatePartitionsTopic(name=name, count=count, assignments=None)])
    r = _call(bootstrap, client_id, req, CreatePartitionsResponse[version])
    return (sorted((t.name, t.error_code, t.error_message) for t in r.results),
            r.throttle_time_ms > 0)


def run_script(bootstrap: str) -> dict[str, Any]:
    client, free = f"mutq-{uuid.uuid4().hex[:8]}", f"free-{uuid.uuid4().hex[:8]}"
    t = {k: f"{client}-{k}" for k in ("a", "b", "c", "d", "e", "f", "g", "h")}
    set_quota(bootstrap, client, MUTATION, 1.0)
    try:
        obs = {
            "create_8": _create(bootstrap, client, 7, {t["a"]: 8}),
            "create_10_and_1": _create(bootstrap, client, 7, {t["b"]: 10, t["c"]: 1}),
            "create_existing": _create(bootstrap, client, 7, {t["a"]: 1}),
            "create_validate_only": _create(bootstrap, client, 7, {t["d"]: 1}, True),
            "delete_v6": _delete(bootstrap, client, 6, t["b"]),
            "grow_v3": _grow(bootstrap, client, 3, t["a"], 9),
            "create_v5": _create(bootstrap, client, 5, {t["e"]: 1}),
            "grow_v2": _grow(bootstrap, client, 2, t["a"], 10),
            "delete_v4": _delete(bootstrap, client, 4, t["b"]),
            "other_client": _create(bootstrap, free, 7, {t["f"]: 20}),
        }
    finally:
        set_quota(bootstrap, client, MUTATION, None)
    for name in (t["a"], t["e"], t["f"]):
        _delete(bootstrap, free, 6, name)
    # names vary by run: keep them as the script's letters
    letters = {v: k for k, v in t.items()}

    def plain(value: Any) -> Any:
        if isinstance(value, str):
            for full, letter in letters.items():
                value = value.replace(full, letter)
            return value
        if isinstance(value, (list, tuple)):
            return type(value)(plain(v) for v in value)
        return value
    return {step: plain(seen) for step, seen in obs.items()}


STEPS = ["create_8", "create_10_and_1", "create_existing", "create_validate_only",
         "delete_v6", "grow_v3", "create_v5", "grow_v2", "delete_v4", "other_client"]


@pytest.fixture(scope="module")
def kcompat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from kcompat_with(tmp_path_factory.mktemp("mutation-quota"), {})


@pytest.fixture(scope="module")
def answers(kafka_reference: KafkaReference, kcompat: Broker) -> dict[str, dict[str, Any]]:
    return {"kafka": run_script(kafka_reference.bootstrap),
            "kcompat": run_script(kcompat.bootstrap)}


def test_the_script_saw_the_quota(answers: dict[str, dict[str, Any]]) -> None:
    """Against Kafka: the second topic of the second request refused, the
    old versions throttled (the script exercises what it means to)."""
    kafka = answers["kafka"]
    (rows, throttled) = kafka["create_10_and_1"]
    assert [r[1] for r in rows] == [0, 89] and throttled, rows
    assert kafka["create_v5"][1] and kafka["create_v5"][0][0][1] == 0


@pytest.mark.parametrize("step", STEPS)
def test_step_matches_kafka(answers: dict[str, dict[str, Any]], step: str) -> None:
    assert answers["kcompat"][step] == answers["kafka"][step], step
