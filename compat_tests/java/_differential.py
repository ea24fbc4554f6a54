"""Requests the differential tests send to Apache Kafka and to kcompat alike.

Every request is built and every answer decoded with kafka-python's protocol
classes (an independent codec) over a ``RawConnection``, so both brokers get
the same bytes:

- ``call``: one request on a fresh connection; ``on_both``: the same call to
  each broker at once, answers by broker name.
- ``incremental_alter`` / ``alter``: IncrementalAlterConfigs v1 and
  AlterConfigs v2 of one resource: (error code, message).
- ``record_batch`` / ``produce_batch``: one RecordBatch v2 and a Produce v9 of
  it, retried while a topic just created is not led yet.
- ``admin_create_topic`` and ``until_led``: a topic created by kafka-python's
  admin client, and a request retried while the answer is NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder

from compat_tests._broker import Broker, running
from compat_tests.java.kafka_reference import KafkaReference
from tests.integration._raw import RawConnection

TOPIC, BROKER = 2, 4  # ConfigResource types
NOT_LEADER_OR_FOLLOWER = 6
RETRIABLE = (3, NOT_LEADER_OR_FOLLOWER)  # 3: UNKNOWN_TOPIC_OR_PARTITION
PD = ProduceRequest.TopicProduceData


def call(bootstrap: str, request: Any, response: Any) -> Any:
    """``request`` on a connection of its own; the decoded ``response``."""
    conn = RawConnection(bootstrap, timeout=20)
    try:
        return conn.request(request, response)
    finally:
        conn.close()


def on_both(bootstraps: Mapping[str, str], fn: Callable[..., Any], *args: Any) -> dict[str, Any]:
    """``fn(bootstrap, *args)`` for every broker at once; the results by name."""
    with ThreadPoolExecutor(len(bootstraps)) as pool:
        futures = {name: pool.submit(fn, bootstrap, *args) for name, bootstrap in bootstraps.items()}
        return {name: f.result() for name, f in futures.items()}


def incremental_alter(bootstrap: str, name: str, ops: Iterable[tuple[str, int, str | None]],
                      validate_only: bool, kind: int) -> tuple[int, str | None]:
    """IncrementalAlterConfigs v1 of one resource: ``(key, operation, value)`` each."""
    R = IncrementalAlterConfigsRequest
    req = R(version=1, validate_only=validate_only, resources=[R.AlterConfigsResource(
        resource_type=kind, resource_name=name, configs=[
            R.AlterConfigsResource.AlterableConfig(name=k, config_operation=op, value=v)
            for k, op, v in ops])])
    r = call(bootstrap, req, IncrementalAlterConfigsResponse[1]).responses[0]
    return r.error_code, r.error_message


def alter(bootstrap: str, name: str, configs: Iterable[tuple[str, str | None]],
          validate_only: bool, kind: int) -> tuple[int, str | None]:
    """AlterConfigs v2 (every override of the resource replaced by ``configs``)."""
    R = AlterConfigsRequest
    req = R(version=2, validate_only=validate_only, resources=[R.AlterConfigsResource(
        resource_type=kind, resource_name=name, configs=[
            R.AlterConfigsResource.AlterableConfig(name=k, value=v) for k, v in configs])])
    r = call(bootstrap, req, AlterConfigsResponse[2]).responses[0]
    return r.error_code, r.error_message


def record_batch(records: Sequence[tuple[bytes | None, bytes | None]], timestamp: int) -> bytes:
    """One uncompressed, non-idempotent RecordBatch v2 of ``(key, value)`` records."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, (key, value) in enumerate(records):
        builder.append(i, timestamp=timestamp, key=key, value=value, headers=[])
    return bytes(builder.build())


def produce_batch(conn: RawConnection, topic: str, records: bytes) -> Any:
    """Produce v9 (acks=all) of ``records`` to partition 0, retried for 10 s while
    the topic is too new to be in the broker's metadata; the partition's answer."""
    req = ProduceRequest[9](transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[
        PD(name=topic, partition_data=[PD.PartitionProduceData(index=0, records=records)])])
    deadline = time.monotonic() + 10
    while True:
        part = conn.request(req, ProduceResponse[9]).responses[0].partition_responses[0]
        if part.error_code not in RETRIABLE or time.monotonic() > deadline:
            return part
        time.sleep(0.1)


def admin_create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """CreateTopics through kafka-python's admin client (replication factor 1)."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def until_led(send: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``send()`` (a Produce, as a dict) again for up to ~5 s while its first
    partition answers NOT_LEADER_OR_FOLLOWER: Kafka may, for a moment after its
    metadata shows the leader, as every client knows to retry."""
    for _ in range(50):
        answer = send()
        if answer["responses"][0]["partition_responses"][0]["error_code"] \
                != NOT_LEADER_OR_FOLLOWER:
            break
        time.sleep(0.1)
    return answer


T = TypeVar("T")


def reference_answers(workdir: Path, settings: Mapping[str, str],
                      script: Callable[[str], T]) -> T:
    """What ``script`` observes (given the bootstrap) on an Apache Kafka of its own,
    started with ``settings`` and closed after."""
    ref = KafkaReference(workdir, overrides=dict(settings))
    ref.start()
    try:
        return script(ref.bootstrap)
    finally:
        ref.close()


def kcompat_with(workdir: Path, settings: Mapping[str, str]) -> Iterator[Broker]:
    """A kcompat broker given the same ``settings`` (``--set`` each), for a module
    fixture to ``yield from``."""
    args = ["--admin-port", "-1"]
    for key, value in settings.items():
        args += ["--set", f"{key}={value}"]
    yield from running(Broker(workdir, extra_args=tuple(args)))
