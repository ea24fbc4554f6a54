"""Byte-rate quotas enforced on a real broker against real clients (issue 17,
item 6): a producer with ``client.id=slow`` under a 1 MiB/s
``producer_byte_rate`` (set by AlterClientQuotas) and an unlimited one, each
a confluent-kafka process sending as fast as it may for the same 30 s; the
rates are measured on the broker, from the log end offsets of their topics
(every record is 10 000 bytes). A consumer under ``consumer_byte_rate`` is
measured by the offsets it commits.

The broker runs with ``quota.window.num=2`` (Kafka's key; the default is 11).
Kafka's rate windows let a new client send quota × (num − 1) windows at once
and refill in bursts as whole samples expire, so a 30 s span of a greedy
client's traffic ranges over 0.74-1.21 MiB/s with 11 windows of 1 s — by where
the span falls, not by any error (``tests/unit/broker/test_quotas.py`` shows
the 300 s average is the quota) — and over 0.95-1.02 MiB/s with 2.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.admin import AlterClientQuotasRequest, AlterClientQuotasResponse
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

from compat_tests._broker import Broker, running
from tests.integration._raw import RawConnection
from tests.integration.test_produce_paths import make_batch

MiB = 1 << 20
RECORD_BYTES = 10_000  # _quota_client's records
RUN_S = 30.0
CLIENT = Path(__file__).with_name("_quota_client.py")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from running(Broker(tmp_path_factory.mktemp("quota-broker"),
                              extra_args=("--set", "quota.window.num=2")))


def set_quota(bootstrap: str, client_id: str, key: str, value: float | None) -> None:
    """AlterClientQuotas v0 for /clients/<client_id> (kafka-python's codec);
    None removes the key."""
    entry = AlterClientQuotasRequest.EntryData
    req = AlterClientQuotasRequest(version=0, validate_only=False, entries=[entry(
        entity=[entry.EntityData(entity_type="client-id", entity_name=client_id)],
        ops=[entry.OpData(key=key, value=value or 0.0, remove=value is None)])])
    conn = RawConnection(bootstrap)
    try:
        response = conn.request(req, AlterClientQuotasResponse[0])
    finally:
        conn.close()
    assert [e.error_code for e in response.entries] == [0]


def create_topics(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        future.result(timeout=20)


def start_client(mode: str, bootstrap: str, topic: str, client_id: str,
                 seconds: float) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, str(CLIENT), mode, bootstrap, topic, client_id,
                             str(seconds)], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"started"
    return proc


def end_offsets(consumer: Consumer, *topics: str) -> list[int]:
    return [consumer.get_watermark_offsets(TopicPartition(t, 0), timeout=10, cached=False)[1]
            for t in topics]


def stop(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_producer_quota_holds_while_an_unlimited_producer_keeps_its_throughput(
        broker: Broker) -> None:
    bootstrap = broker.bootstrap
    create_topics(bootstrap, "quota-slow", "quota-fast")
    set_quota(bootstrap, "slow", "producer_byte_rate", float(MiB))
    watcher = Consumer({"bootstrap.servers": bootstrap, "group.id": "quota-watch",
                        "log_level": 0})
    slow = start_client("produce", bootstrap, "quota-slow", "slow", RUN_S + 5)
    fast = start_client("produce", bootstrap, "quota-fast", "fast", RUN_S + 5)
    try:
        while end_offsets(watcher, "quota-slow")[0] == 0:  # the run starts with its bytes
            time.sleep(0.02)
        t0 = time.monotonic()
        slow0, fast0 = end_offsets(watcher, "quota-slow", "quota-fast")
        time.sleep(RUN_S)
        slow1, fast1 = end_offsets(watcher, "quota-slow", "quota-fast")
        elapsed_s = time.monotonic() - t0
    finally:
        stop(slow, fast)
        watcher.close()
    slow_rate = (slow1 - slow0) * RECORD_BYTES / elapsed_s
    fast_rate = (fast1 - fast0) * RECORD_BYTES / elapsed_s
    print(f"slow {slow_rate / MiB:.3f} MiB/s, fast {fast_rate / MiB:.3f} MiB/s "
          f"over {elapsed_s:.1f} s")
    assert slow_rate == pytest.approx(MiB, rel=0.10)
    assert fast_rate > 3 * MiB


def committed(watcher: Consumer, topic: str) -> int:
    return int(watcher.committed([TopicPartition(topic, 0)], timeout=10)[0].offset)


def test_a_consumer_quota_holds_while_an_unlimited_consumer_reads_everything(
        broker: Broker) -> None:
    """Shorter (10 s): a reader under 1 MiB/s ``consumer_byte_rate`` and a free
    one read a 30 MiB topic from the start; their positions are the offsets they
    commit to the broker. The reader fetches at most the quota's window (1 MiB);
    Kafka answers a Fetch that would go over empty, takes its bytes back and
    throttles; with 2 windows the retry after the throttle is over again (the
    window stays one window long until a full one has passed), so the reader
    gets about one 1 MiB fetch per 2 s — less than the quota, never more."""
    bootstrap = broker.bootstrap
    create_topics(bootstrap, "quota-read")
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0})
    for _ in range(30 * MiB // RECORD_BYTES):
        producer.produce("quota-read", b"r" * RECORD_BYTES)
        producer.poll(0)
    assert producer.flush(60) == 0
    set_quota(bootstrap, "reader", "consumer_byte_rate", float(MiB))
    slow_group = Consumer({"bootstrap.servers": bootstrap, "group.id": "quota-reader",
                           "log_level": 0})
    free_group = Consumer({"bootstrap.servers": bootstrap, "group.id": "quota-free-reader",
                           "log_level": 0})
    reader = start_client("consume", bootstrap, "quota-read", "reader", 15)
    free = start_client("consume", bootstrap, "quota-read", "free-reader", 15)
    try:
        while committed(slow_group, "quota-read") < 0:  # its first commit starts the run
            time.sleep(0.02)
        t0 = time.monotonic()
        slow0 = committed(slow_group, "quota-read")
        time.sleep(10)
        slow1 = committed(slow_group, "quota-read")
        elapsed_s = time.monotonic() - t0
        free1 = committed(free_group, "quota-read")
    finally:
        stop(reader, free)
        slow_group.close()
        free_group.close()
    slow_rate = (slow1 - slow0) * RECORD_BYTES / elapsed_s
    print(f"reader {slow_rate / MiB:.3f} MiB/s over {elapsed_s:.1f} s; free reader at "
          f"{free1 * RECORD_BYTES / MiB:.1f} MiB")
    assert 0.25 * MiB < slow_rate < 1.1 * MiB
    assert slow1 < free1 // 2 and free1 == 30 * MiB // RECORD_BYTES


def test_an_answer_over_quota_carries_kafkas_throttle_and_a_fetch_answers_empty(
        broker: Broker) -> None:
    """Raw requests (kafka-python's codec, client id ``raw-test``) under 1000 B/s
    quotas. A ~20 kB Produce: over W = 1 s (one window padded, 2 windows) the
    rate is ~20 000 B/s, so X = (O − T)/T × W ≈ 19 000 ms, in the answer.
    A Fetch then reads at most 1000 B (the quota's window) but the first batch
    whole, goes over, and is answered as Kafka answers it: no topics, error
    NONE, the throttle."""
    bootstrap = broker.bootstrap
    create_topics(bootstrap, "quota-raw")
    set_quota(bootstrap, "raw-test", "producer_byte_rate", 1000.0)
    set_quota(bootstrap, "raw-test", "consumer_byte_rate", 1000.0)
    records = make_batch(n=2, value_size=10_000)
    pd = ProduceRequest.TopicProduceData
    produce = ProduceRequest[9](transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        pd(name="quota-raw", partition_data=[pd.PartitionProduceData(index=0, records=records)])])
    conn = RawConnection(bootstrap)
    try:  # muted for the throttle afterwards: one request per connection
        produced = conn.request(produce, ProduceResponse[9])
    finally:
        conn.close()
    assert produced.responses[0].partition_responses[0].error_code == 0
    assert produced.throttle_time_ms == pytest.approx((len(records) / 1000 - 1) * 1000, abs=300)
    ft = FetchRequest.FetchTopic
    fetch = FetchRequest[11](
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[],
        topics=[ft(topic="quota-raw", partitions=[ft.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
            partition_max_bytes=1 << 20)])])
    conn = RawConnection(bootstrap)
    try:
        fetched = conn.request(fetch, FetchResponse[11])
    finally:
        conn.close()
    assert (fetched.error_code, list(fetched.responses)) == (0, [])
    assert fetched.throttle_time_ms == pytest.approx((len(records) / 1000 - 1) * 1000, abs=300)
