"""The HTTP admin port (/metrics, /health), JSON logs and the SIGTERM drain,
against a real broker process."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder
from prometheus_client.parser import text_string_to_metric_families

from compat_tests._broker import Broker, free_port, unique_topic
from tests.integration._raw import RawConnection

PD = ProduceRequest.TopicProduceData
FT = FetchRequest.FetchTopic


def make_batch(n: int, value_size: int = 10) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 22)
    now = int(time.time() * 1000)
    for i in range(n):
        b.append(i, timestamp=now, key=None, value=b"v" * value_size, headers=[])
    return bytes(b.build())


def produce(conn: RawConnection, topic: str, records: bytes, acks: int = 1) -> int:
    req = ProduceRequest[9](transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[
        PD(name=topic, partition_data=[PD.PartitionProduceData(index=0, records=records)])])
    return int(conn.request(req, ProduceResponse[9]).responses[0].partition_responses[0]
               .error_code)


def fetch_request(topic: str, offset: int, max_wait_ms: int = 0) -> FetchRequest:
    return FetchRequest[11](replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1,
                            max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                            topics=[FT(topic=topic, partitions=[FT.FetchPartition(
                                partition=0, current_leader_epoch=-1, fetch_offset=offset,
                                log_start_offset=-1, partition_max_bytes=1 << 20)])],
                            forgotten_topics_data=[], rack_id="")


def create_topic(broker: Broker, topic: str) -> None:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics({topic: {"num_partitions": 1}})
    finally:
        admin.close()


class Admin:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path: str) -> tuple[int, str, str]:
        try:
            with urllib.request.urlopen(self.base + path, timeout=5) as r:
                return r.status, r.headers["Content-Type"], r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.headers["Content-Type"], e.read().decode()

    def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        status, _ctype, body = self.get("/metrics")
        assert status == 200
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(body) for s in family.samples}


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
          **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def admin_broker(tmp_path: Path) -> Iterator[tuple[Broker, Admin]]:
    port = free_port()
    b = Broker(tmp_path / "broker", extra_args=("--set", f"admin.port={port}", "--set",
                                                 "group.initial.rebalance.delay.ms=0"))
    b.start()
    try:
        yield b, Admin(port)
    finally:
        b.close()


def test_metrics_count_requests_bytes_and_partition_state(
        admin_broker: tuple[Broker, Admin]) -> None:
    broker, admin = admin_broker
    topic = unique_topic("metrics")
    create_topic(broker, topic)
    before = admin.samples()
    batches = [make_batch(n=i + 1) for i in range(7)]
    conn = RawConnection(broker.bootstrap)
    try:
        assert value(admin.samples(), "kcompat_open_connections") >= 1
        for batch in batches:
            assert produce(conn, topic, batch) == 0
        fetched = conn.request(fetch_request(topic, 0), FetchResponse[11])
        records = fetched.responses[0].partitions[0].records
    finally:
        conn.close()
    after = admin.samples()
    produce_v9 = {"api": "Produce", "version": "9"}
    assert (value(after, "kcompat_requests_total", **produce_v9)
            - value(before, "kcompat_requests_total", **produce_v9)) == 7
    assert value(after, "kcompat_request_errors_total", **produce_v9) == 0
    assert value(after, "kcompat_request_latency_seconds_count", api="Produce") >= 7
    assert value(after, "kcompat_requests_total", api="Fetch", version="11") == 1
    total = sum(len(b) for b in batches)
    assert value(after, "kcompat_topic_bytes_in_total", topic=topic) == total
    assert value(after, "kcompat_topic_bytes_out_total", topic=topic) == len(records) == total
    part = {"topic": topic, "partition": "0"}
    assert value(after, "kcompat_partition_log_end_offset", **part) == sum(range(1, 8))
    assert value(after, "kcompat_partition_high_watermark", **part) == 28
    assert value(after, "kcompat_partition_log_start_offset", **part) == 0
    assert value(after, "kcompat_partition_size_bytes", **part) == total


def test_an_acks_all_produce_waits_for_a_counted_fsync_pass(
        admin_broker: tuple[Broker, Admin]) -> None:
    broker, admin = admin_broker
    topic = unique_topic("fsync")
    create_topic(broker, topic)
    before = admin.samples()
    conn = RawConnection(broker.bootstrap)
    try:
        for i in range(3):
            assert produce(conn, topic, make_batch(n=i + 1), acks=-1) == 0
    finally:
        conn.close()
    after = admin.samples()
    assert (value(after, "kcompat_fsync_pass_seconds_count")
            >= value(before, "kcompat_fsync_pass_seconds_count") + 3)
    assert value(after, "kcompat_fsync_pass_longest_seconds") > 0


def test_a_refused_request_counts_as_an_error(admin_broker: tuple[Broker, Admin]) -> None:
    broker, admin = admin_broker
    conn = RawConnection(broker.bootstrap)
    conn.send_bytes(b"\x00\x00\x00\x09\x00\x00\x00\x01\x00\x00")  # Produce v9, truncated header
    assert conn.closed_by_peer()
    conn.close()
    samples = admin.samples()
    assert value(samples, "kcompat_request_errors_total", api="Produce", version="9") == 1


def test_group_lag_gauge(admin_broker: tuple[Broker, Admin]) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    broker, admin = admin_broker
    topic = unique_topic("lag")
    create_topic(broker, topic)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(5):
        producer.send(topic, b"m%d" % i, partition=0)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id="lagging",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             max_poll_records=2)
    got = 0
    deadline = time.monotonic() + 15
    while got < 2 and time.monotonic() < deadline:
        got += sum(len(r) for r in consumer.poll(timeout_ms=500, max_records=2 - got).values())
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata

    consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(2, "", -1)})
    consumer.close(autocommit=False)
    samples = admin.samples()
    labels = {"group": "lagging", "topic": topic, "partition": "0"}
    assert value(samples, "kcompat_consumer_group_committed_offset", **labels) == 2
    assert value(samples, "kcompat_consumer_group_lag", **labels) == 3


def test_extension_metrics_pending_lateness_retries_dead_letters(
        admin_broker: tuple[Broker, Admin]) -> None:
    """docs/extensions.md, rule 6: pending delayed records per partition, the
    delivery lateness histogram, retries and DLQ appends per topic; the
    record-less batches Fetch answers started past."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    broker, admin = admin_broker
    topic = unique_topic("extm")
    create_topic(broker, topic)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    try:
        for i in range(3):
            producer.send(topic, b"later%d" % i, partition=0,
                          headers=[("kc-delay-ms", b"600000")])
        for i in range(2):
            producer.send(topic, b"soon%d" % i, partition=0, headers=[("kc-delay-ms", b"300")])
        producer.flush()
        samples = admin.samples()
        pending = value(samples, "kcompat_delayed_records_pending", topic=topic, partition="0")
        assert pending == 5
        deadline = time.monotonic() + 15
        while value(admin.samples(), "kcompat_delayed_records_pending", topic=topic,
                    partition="0") > 3:
            assert time.monotonic() < deadline, "the short delays were not delivered"
            time.sleep(0.2)
        samples = admin.samples()
        assert value(samples, "kcompat_delayed_records_delivered_total", topic=topic) == 2
        assert value(samples, "kcompat_delayed_delivery_lateness_seconds_count") == 2
        assert value(samples, "kcompat_delayed_delivery_lateness_seconds_bucket", le="5.0") == 2
        assert value(samples, "kcompat_fetch_hole_batches_skipped_total") == 0
        # the produced batch is stored holding none of its records (all delayed):
        # a read from its offset starts past it, at the delivered records
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=3000,
                                 auto_offset_reset="earliest")
        consumer.assign([TopicPartition(topic, 0)])
        assert sorted(m.value for m in consumer) == [b"soon0", b"soon1"]
        consumer.close()
        assert value(admin.samples(), "kcompat_fetch_hole_batches_skipped_total") >= 1
        # a record failing three times is retried three times, then dead-lettered
        attempt = None
        for n in range(4):
            headers = [] if attempt is None else [("kc-attempt", attempt)]
            producer.send(topic + ".retry", b"poison", partition=0, headers=headers).get(20)
            attempt = b"%d" % (n + 1)
    finally:
        producer.close()
    samples = admin.samples()
    assert value(samples, "kcompat_retries_total", topic=topic + ".retry") == 3
    assert value(samples, "kcompat_dlq_appends_total", topic=topic + ".dlq") == 1
    _dedup_and_view_metrics(broker, admin)


def _dedup_and_view_metrics(broker: Broker, admin: Admin) -> None:
    """Duplicates dropped per dedup topic; records a view's consumers got and
    records its filter took out."""
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic

    source, view = unique_topic("dds"), unique_topic("ddv")
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        client.create_topics([NewTopic(source, 1, 1, topic_configs={
            "kc.dedup.window.ms": "600000"})])
        client.create_topics([NewTopic(view, -1, 1, topic_configs={
            "kc.view.of": source, "kc.view.filter": "region = 'eu'"})])
    finally:
        client.close()
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    try:
        for value_, region, order in ((b"a", b"eu", b"1"), (b"b", b"us", b"2"),
                                      (b"c", b"eu", b"3"), (b"a2", b"eu", b"1")):
            producer.send(source, value_, headers=[("region", region),
                                                   ("kc-dedup-id", order)]).get(10)
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=1500,
                             auto_offset_reset="earliest")
    consumer.assign([TopicPartition(view, 0)])
    assert [m.value for m in consumer] == [b"a", b"c"]
    consumer.close()
    samples = admin.samples()
    assert value(samples, "kcompat_dedup_duplicates_total", topic=source) == 1
    assert value(samples, "kcompat_dedup_window_ids", topic=source) == 3
    assert value(samples, "kcompat_view_records_total", view=view, result="matched") == 2
    assert value(samples, "kcompat_view_records_total", view=view, result="filtered") == 1


def test_health_and_unknown_paths(admin_broker: tuple[Broker, Admin]) -> None:
    _broker, admin = admin_broker
    status, ctype, body = admin.get("/health")
    assert status == 200 and ctype == "application/json"
    health = json.loads(body)
    assert health["live"] is True and health["ready"] is True and health["node_id"] == 1
    assert admin.get("/health/ready")[0] == 200 and admin.get("/health/live")[0] == 200
    assert admin.get("/nope")[0] == 404
    status, ctype, body = admin.get("/metrics")
    assert ctype.startswith("text/plain") and "kcompat_requests_total" in body


def test_admin_port_taken_is_a_one_line_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "kcompat", "broker", "--port", "0", "--data-dir",
             str(tmp_path / "d"), "--admin-port", str(port)],
            capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert errors == [f"kcompat: error: cannot start broker: [Errno 98] admin.port "
                      f"127.0.0.1:{port}: Address already in use"], proc.stderr
    assert "Traceback" not in proc.stderr


def test_admin_port_disabled(tmp_path: Path) -> None:
    b = Broker(tmp_path / "b", extra_args=("--set", "admin.port=-1"))
    b.start()
    try:
        assert "admin HTTP on" not in b.tail()
    finally:
        b.close()


def test_json_logs(tmp_path: Path) -> None:
    b = Broker(tmp_path / "b", extra_args=("--set", "admin.port=-1", "--log-format", "json"))
    b.start()
    b.stop()
    lines = [ln for ln in b.log_path.read_text().splitlines()
             if ln and not ln.startswith("=====")]
    entries = [json.loads(ln) for ln in lines]
    assert {"ts", "level", "logger", "msg"} <= set(entries[0])
    assert any(e["msg"].startswith("kcompat broker ready on") for e in entries)
    assert entries[-1]["msg"] == "kcompat broker stopped"


def test_sigterm_answers_in_flight_request_then_stops(tmp_path: Path) -> None:
    """SIGTERM drains: stop accepting, answer the in-flight long poll, close logs."""
    b = Broker(tmp_path / "b", extra_args=("--set", "admin.port=-1"))
    b.start()
    topic = unique_topic("drain")
    try:
        create_topic(b, topic)
        conn = RawConnection(b.bootstrap)
        assert produce(conn, topic, make_batch(3)) == 0
        conn.send(fetch_request(topic, 3, max_wait_ms=600))  # waits: nothing past offset 3
        time.sleep(0.1)
        assert b.proc is not None
        b.proc.send_signal(15)
        _cid, response = conn.recv(FetchResponse[11])  # answered, not dropped
        assert response.responses[0].partitions[0].high_watermark == 3
        with pytest.raises(OSError):  # no longer accepting while draining
            socket.create_connection((b.host, b.port), timeout=1).close()
        assert conn.closed_by_peer()
        conn.close()
        assert b.proc.wait(timeout=10) == 0
        assert "kcompat broker stopped" in b.tail()
        b.start()  # clean shutdown: the data is there
        conn = RawConnection(b.bootstrap)
        fetched = conn.request(fetch_request(topic, 0), FetchResponse[11])
        assert fetched.responses[0].partitions[0].high_watermark == 3
        conn.close()
    finally:
        b.close()


def test_share_group_metrics(admin_broker: tuple[Broker, Admin]) -> None:
    """docs/extensions.md, rule 6 for share groups: the records in flight of each
    share-partition by state, and its start offset (confluent-kafka's
    ShareConsumer acquires 3 records and accepts only the first)."""
    from confluent_kafka import AcknowledgeType, ShareConsumer
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
    )
    from kafka import KafkaProducer

    broker, admin = admin_broker
    topic, group = unique_topic("sharem"), unique_topic("sharem-g")
    create_topic(broker, topic)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(3):
        producer.send(topic, b"v%d" % i, partition=0)
    producer.flush()
    producer.close()
    resource = ConfigResource("GROUP", group, incremental_configs=[ConfigEntry(
        "share.auto.offset.reset", "earliest",
        incremental_operation=AlterConfigOpType.SET)])
    configs = AdminClient({"bootstrap.servers": broker.bootstrap})
    configs.incremental_alter_configs([resource])[resource].result(30)
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit"})
    try:
        consumer.subscribe([topic])
        got: list[object] = []
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            got += [m for m in consumer.poll(0.5) or () if m.error() is None]
        assert len(got) == 3, got
        first = min(got, key=lambda m: m.offset())
        consumer.acknowledge(first, AcknowledgeType.ACCEPT)
        consumer.commit_sync(10)
        samples = admin.samples()
        labels = {"group": group, "topic": topic, "partition": "0"}
        assert value(samples, "kcompat_share_start_offset", **labels) == 1
        assert value(samples, "kcompat_share_records", **labels, state="acquired") == 2
    finally:
        consumer.close()
