"""The produce/fetch data path seen through raw requests encoded by kafka-python:
CRC and size checks, idempotence, acks=0, ordering, LogAppendTime, long poll."""

from __future__ import annotations

import time

from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from compat_tests._broker import Broker, unique_topic
from tests.integration._raw import RawConnection

PD = ProduceRequest.TopicProduceData


def make_batch(n: int = 3, pid: int = -1, epoch: int = -1, seq: int = -1,
               value_size: int = 10, ts: int | None = None) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                  batch_size=1 << 22)
    now = ts if ts is not None else int(time.time() * 1000)
    for i in range(n):
        b.append(i, timestamp=now, key=b"k%d" % i, value=bytes([65 + i % 26]) * value_size,
                 headers=[])
    return bytes(b.build())


def produce(conn: RawConnection, topic: str, records: bytes, acks: int = -1):  # type: ignore[no-untyped-def]
    req = ProduceRequest[9](transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[
        PD(name=topic, partition_data=[PD.PartitionProduceData(index=0, records=records)])])
    if acks == 0:
        conn.send(req)
        return None
    resp = conn.request(req, ProduceResponse[9])
    return resp.responses[0].partition_responses[0]


def latest(conn: RawConnection, topic: str) -> int:
    LT = ListOffsetsRequest.ListOffsetsTopic
    req = ListOffsetsRequest[5](replica_id=-1, isolation_level=0, topics=[
        LT(name=topic, partitions=[LT.ListOffsetsPartition(partition_index=0, timestamp=-1)])])
    return int(conn.request(req, ListOffsetsResponse[5]).topics[0].partitions[0].offset)


def fetch(conn: RawConnection, topic: str, offset: int, max_wait_ms: int = 0):  # type: ignore[no-untyped-def]
    FT = FetchRequest.FetchTopic
    req = FetchRequest[11](replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1,
                           max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                           topics=[FT(topic=topic, partitions=[FT.FetchPartition(
                               partition=0, current_leader_epoch=-1, fetch_offset=offset,
                               log_start_offset=-1, partition_max_bytes=1 << 20)])],
                           forgotten_topics_data=[], rack_id="")
    return conn.request(req, FetchResponse[11]).responses[0].partitions[0]


def new_topic(conn: RawConnection, broker: Broker) -> str:
    topic = unique_topic("raw")
    produce(conn, topic, make_batch(1))  # first produce: topic unknown until metadata
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()
    return topic


def test_unknown_topic_produce_is_refused(broker: Broker) -> None:
    conn = RawConnection(broker.bootstrap)
    assert produce(conn, unique_topic("nope"), make_batch(1)).error_code == 3


def test_corrupt_batch_is_refused_and_nothing_stored(broker: Broker) -> None:
    conn = RawConnection(broker.bootstrap)
    topic = new_topic(conn, broker)
    good = bytearray(make_batch(3))
    good[-3] ^= 0xFF  # flip a byte inside the records: CRC no longer matches
    assert produce(conn, topic, bytes(good)).error_code == 2  # CORRUPT_MESSAGE
    truncated = make_batch(3)[:-5]
    assert produce(conn, topic, truncated).error_code == 2
    assert latest(conn, topic) == 0
    assert produce(conn, topic, make_batch(3)).base_offset == 0


def test_message_too_large(broker: Broker) -> None:
    conn = RawConnection(broker.bootstrap)
    topic = new_topic(conn, broker)
    big = make_batch(1, value_size=1_100_000)  # > default max.message.bytes 1048588
    assert produce(conn, topic, big).error_code == 10
    assert latest(conn, topic) == 0


def test_idempotent_duplicate_and_gap(broker: Broker) -> None:
    conn = RawConnection(broker.bootstrap)
    topic = new_topic(conn, broker)
    first = make_batch(3, pid=4242, epoch=0, seq=0)
    assert produce(conn, topic, first).base_offset == 0
    assert produce(conn, topic, make_batch(2, pid=4242, epoch=0, seq=3)).base_offset == 3
    dup = produce(conn, topic, first)  # resend of an acknowledged batch
    assert (dup.error_code, dup.base_offset) == (0, 0)
    assert latest(conn, topic) == 5
    gap = produce(conn, topic, make_batch(1, pid=4242, epoch=0, seq=9))
    assert gap.error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
    old_epoch = produce(conn, topic, make_batch(1, pid=4242, epoch=0, seq=5))
    assert old_epoch.error_code == 0
    produce(conn, topic, make_batch(1, pid=4242, epoch=1, seq=0))
    fenced = produce(conn, topic, make_batch(1, pid=4242, epoch=0, seq=6))
    assert fenced.error_code == 47  # INVALID_PRODUCER_EPOCH
    assert latest(conn, topic) == 7


def test_acks0_gets_no_response_and_order_is_kept(broker: Broker) -> None:
    conn = RawConnection(broker.bootstrap)
    topic = new_topic(conn, broker)
    produce(conn, topic, make_batch(2), acks=0)
    cids = [conn.send(ApiVersionsRequest[0]()) for _ in range(5)]
    got = [conn.recv(ApiVersionsResponse[0])[0] for _ in range(5)]
    assert got == cids  # pipelined responses come back in request order
    assert latest(conn, topic) == 2


def test_fetch_returns_stored_bytes_and_long_poll_wakes_on_append(broker: Broker) -> None:
    conn = RawConnection(broker.bootstrap)
    topic = new_topic(conn, broker)
    sent = make_batch(4, ts=1_700_000_000_000)
    produce(conn, topic, sent)
    part = fetch(conn, topic, 0)
    assert part.high_watermark == 4
    batch = DefaultRecordBatch(bytes(part.records))
    assert batch.validate_crc()
    assert [r.value for r in batch] == [bytes([65 + i]) * 10 for i in range(4)]
    assert bytes(part.records)[12:] != b"" and bytes(part.records)[16:] == sent[16:]

    import threading

    def later() -> None:
        time.sleep(0.5)
        other = RawConnection(broker.bootstrap)
        produce(other, topic, make_batch(1))
        other.close()

    threading.Thread(target=later).start()
    t0 = time.monotonic()
    part = fetch(conn, topic, 4, max_wait_ms=10_000)
    elapsed = time.monotonic() - t0
    assert len(part.records) > 0 and part.high_watermark == 5
    assert elapsed < 5, f"long poll was not woken by the append ({elapsed:.1f}s)"
    empty = fetch(conn, topic, 5, max_wait_ms=200)
    assert empty.records is not None and len(empty.records) == 0
    assert fetch(conn, topic, 99).error_code == 1  # OFFSET_OUT_OF_RANGE
    # no partition asked (a consumer closing its fetch session): answered at once
    t0 = time.monotonic()
    closing = FetchRequest[11](replica_id=-1, max_wait_ms=10_000, min_bytes=1,
                               max_bytes=1 << 20, isolation_level=0, session_id=0,
                               session_epoch=-1, topics=[], forgotten_topics_data=[],
                               rack_id="")
    assert conn.request(closing, FetchResponse[11]).responses == []
    assert time.monotonic() - t0 < 5


def test_log_append_time_topic(broker: Broker) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    topic = unique_topic("lat")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1,
                                  topic_configs={"message.timestamp.type": "LogAppendTime"})])
    admin.close()
    conn = RawConnection(broker.bootstrap)
    before = int(time.time() * 1000)
    resp = produce(conn, topic, make_batch(2, ts=1000))
    assert resp.error_code == 0 and resp.log_append_time_ms >= before
    batch = DefaultRecordBatch(bytes(fetch(conn, topic, 0).records))
    assert batch.validate_crc() and batch.timestamp_type == 1
    assert all(r.timestamp >= before for r in batch)
