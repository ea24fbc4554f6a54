"""Zero-copy Fetch (``kcompat.broker.net.zero_copy``): the answers sent with
``sendfile`` from the segment files are byte for byte the copied ones.

One broker process of the module (admin port on, so ``/metrics`` is read)
starts with ``kcompat.fetch.sendfile=false`` (the copy path). Data goes in
through confluent-kafka: 8 partitions of large batches, a committed and an
aborted transaction in partition 0, and a 16-partition topic of ~8 MiB whose
segments roll at 1 MiB. Raw Fetch requests (kafka-python's codec: v4, v11,
v12, and v13/v16/v18 by topic id; whole partitions, a trailing batch cut by
partition_max_bytes, one whole batch beyond partition_max_bytes=1, a
max_bytes budget spent across partitions, an offset inside a batch, a
segment end, read_committed with its aborted transactions, an errored
partition beside data) record the copy path's response frames, and
kafka-python and confluent-kafka consume everything. The broker then
restarts on the same data with sendfile on, and the same requests must give
the same bytes, with ``kcompat_fetch_sendfile_bytes_total`` showing they
went out as file ranges, and both clients must read the same records again.

The large-fetch test reads one ~8 MiB answer over 16 partitions through a
small receive buffer: the broker sends into a full socket (EAGAIN, then
``wait_writable``), still answers another connection meanwhile, and the topic
is deleted (its segment files closed and unlinked) while most of the answer
is still unsent: the answer that arrives is still the copy path's, byte for
byte (each range holds its own descriptor of the file).
"""

from __future__ import annotations

import os
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse

from compat_tests._broker import running, unique_topic
from compat_tests._dedup import AdminBroker
from tests.integration._raw import RawConnection

TIMEOUT_S = 20.0
PARTITIONS = 8
RECORDS = 2400  # ~2.4 MiB over PARTITIONS partitions, batches of up to 256 KiB
CUT_BYTES = 280_000  # past the first batch (<= 256 KiB), inside the second
MID_OFFSET = 150  # inside the first batch of every partition
BIG_PARTITIONS = 16
BIG_RECORDS_PER_PARTITION = 128  # of 4 KiB: 512 KiB per partition, ~8 MiB
SENDFILE_METRIC = "kcompat_fetch_sendfile_bytes_total"
FT = FetchRequest.FetchTopic
FP = FT.FetchPartition


def _value(i: int, size: int = 1000) -> bytes:
    return (i.to_bytes(4, "big") * (size // 4 + 1))[:size]


@dataclass
class Data:
    broker: AdminBroker
    topic: str
    big: str
    ids: dict[str, uuid.UUID]
    produced: dict[tuple[int, int], tuple[bytes, bytes]]  # (partition, offset) -> key, value
    aborted_keys: set[bytes]
    requests: list[tuple[str, Any]] = field(default_factory=list)
    copied: list[bytes] = field(default_factory=list)  # response frames of the copy path
    big_request: Any = None
    big_copied: bytes = b""
    clients_copied: dict[str, list[tuple[int, int, bytes, bytes]]] = field(default_factory=dict)


def _produce(bs: str, topic: str, big: str) -> tuple[dict[tuple[int, int], tuple[bytes, bytes]],
                                                     set[bytes]]:
    producer = Producer({"bootstrap.servers": bs, "linger.ms": 50, "batch.size": 262144,
                         "compression.type": "none", "enable.idempotence": True})
    produced: dict[tuple[int, int], tuple[bytes, bytes]] = {}

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        produced[(msg.partition(), msg.offset())] = (msg.key(), msg.value())

    for i in range(RECORDS):
        producer.produce(topic, _value(i), key=b"k%d" % i, partition=i % PARTITIONS,
                         on_delivery=delivered)
    for p in range(BIG_PARTITIONS):
        for i in range(BIG_RECORDS_PER_PARTITION):
            producer.produce(big, _value(i, 4096), partition=p)
    assert producer.flush(TIMEOUT_S) == 0
    txn = Producer({"bootstrap.servers": bs, "transactional.id": unique_topic("zc-txn"),
                    "linger.ms": 5})
    txn.init_transactions(TIMEOUT_S)
    aborted = set()
    for commit in (False, True):
        txn.begin_transaction()
        for i in range(30):
            key = b"%s-%d" % (b"c" if commit else b"a", i)
            txn.produce(topic, _value(i), key=key, partition=0,
                        on_delivery=None if not commit else delivered)
            if not commit:
                aborted.add(key)
        if commit:
            txn.commit_transaction(TIMEOUT_S)
        else:
            txn.flush(TIMEOUT_S)
            txn.abort_transaction(TIMEOUT_S)
    return produced, aborted


def _topic_ids(bs: str, topics: list[str]) -> dict[str, uuid.UUID]:
    conn = RawConnection(bs, timeout=TIMEOUT_S)
    try:
        answer = conn.request(MetadataRequest[12](
            topics=[MetadataRequest[12].MetadataRequestTopic(topic_id=None, name=t)
                    for t in topics],
            allow_auto_topic_creation=False, include_topic_authorized_operations=False),
            MetadataResponse[12]).to_dict()
    finally:
        conn.close()
    return {t["name"]: uuid.UUID(str(t["topic_id"])) for t in answer["topics"]}


def _fetch(version: int, topics: list[tuple[str | uuid.UUID, list[tuple[int, int, int]]]],
           max_bytes: int = 50 << 20, isolation: int = 0) -> Any:
    """A Fetch of (topic or id, [(partition, offset, partition_max_bytes)])."""
    def topic(t: str | uuid.UUID, parts: list[tuple[int, int, int]]) -> Any:
        named = {"topic_id": t} if isinstance(t, uuid.UUID) else {"topic": t}
        return FT(**named, partitions=[
            FP(partition=p, current_leader_epoch=-1, fetch_offset=o, log_start_offset=-1,
               partition_max_bytes=m) for p, o, m in parts])
    return FetchRequest[version](
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=max_bytes,
        isolation_level=isolation, session_id=0, session_epoch=-1,
        topics=[topic(t, parts) for t, parts in topics], forgotten_topics_data=[], rack_id="")


def _requests(d: Data) -> list[tuple[str, Any]]:
    t, tid = d.topic, d.ids[d.topic]
    whole = [(p, 0, 1 << 20) for p in range(PARTITIONS)]
    mid = MID_OFFSET
    return [
        ("v4 whole partitions", _fetch(4, [(t, whole)])),
        ("v11 trailing batch cut", _fetch(11, [(t, [(p, 0, CUT_BYTES)
                                                   for p in range(PARTITIONS)])])),
        ("v12 one batch beyond partition_max_bytes=1", _fetch(12, [(t, [(1, 0, 1), (2, 0, 1)])])),
        ("v12 max_bytes 300 KiB across partitions", _fetch(12, [(t, whole)], max_bytes=300_000)),
        ("v12 from inside a batch", _fetch(12, [(t, [(p, mid, 1 << 20)
                                                     for p in range(PARTITIONS)])])),
        ("v13 by id", _fetch(13, [(tid, whole)])),
        ("v16 read_committed", _fetch(16, [(tid, [(0, 0, 1 << 20)])], isolation=1)),
        ("v16 read_uncommitted with the aborted batch", _fetch(16, [(tid, [(0, 0, 1 << 20)])])),
        ("v18 an errored partition beside data",
         _fetch(18, [(tid, [(3, 0, 1 << 20), (4, 10**9, 1 << 20), (5, 0, 1 << 20)])])),
        ("v12 segment ends", _fetch(12, [(d.big, [(p, 0, 4 << 20)
                                                  for p in range(BIG_PARTITIONS)])])),
    ]


def _frames(bs: str, requests: list[Any]) -> list[bytes]:
    conn = RawConnection(bs, timeout=TIMEOUT_S)
    try:
        out = []
        for request in requests:
            conn.send(request)
            out.append(conn.recv_frame())
        return out
    finally:
        conn.close()


def _consume_kafka_python(bs: str, topic: str) -> list[tuple[int, int, bytes, bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False,
                             max_partition_fetch_bytes=1 << 20, fetch_max_bytes=50 << 20)
    try:
        consumer.assign([KTopicPartition(topic, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        got: list[tuple[int, int, bytes, bytes]] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < RECORDS + 60 and time.monotonic() < deadline:
            for tp, msgs in consumer.poll(500).items():
                got += [(tp.partition, m.offset, m.key, m.value) for m in msgs]
        return sorted(got)
    finally:
        consumer.close()


def _consume_confluent(bs: str, topic: str, expected: int,
                       isolation: str) -> list[tuple[int, int, bytes, bytes]]:
    consumer = Consumer({"bootstrap.servers": bs, "group.id": unique_topic("zc-g"),
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 1 << 20})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        got: list[tuple[int, int, bytes, bytes]] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < expected and time.monotonic() < deadline:
            for m in consumer.consume(10000, 0.5):
                assert m.error() is None, m.error()
                got.append((m.partition(), m.offset(), m.key(), m.value()))
        return sorted(got)
    finally:
        consumer.close()


def _clients(d: Data) -> dict[str, list[tuple[int, int, bytes, bytes]]]:
    bs = d.broker.bootstrap
    committed = len(d.produced)
    return {
        "kafka-python": _consume_kafka_python(bs, d.topic),
        "confluent read_uncommitted": _consume_confluent(bs, d.topic, committed + 30,
                                                         "read_uncommitted"),
        "confluent read_committed": _consume_confluent(bs, d.topic, committed,
                                                       "read_committed"),
    }


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Data]:
    broker = AdminBroker(Path(tmp_path_factory.mktemp("zero-copy")), extra_args=(
        "--set", "kcompat.fetch.sendfile=false", "--set", "kcompat.flush.mode=never",
        "--set", "transaction.state.log.num.partitions=1"))
    for b in running(broker):
        bs = b.bootstrap
        topic, big = unique_topic("zc"), unique_topic("zc-big")
        admin = AdminClient({"bootstrap.servers": bs})
        futures = admin.create_topics([
            NewTopic(topic, PARTITIONS, 1),
            NewTopic(big, BIG_PARTITIONS, 1, config={"segment.bytes": str(1 << 20)})])
        for f in futures.values():
            f.result(TIMEOUT_S)
        produced, aborted = _produce(bs, topic, big)
        d = Data(b, topic, big, _topic_ids(bs, [topic, big]), produced, aborted)
        d.requests = _requests(d)
        d.copied = _frames(bs, [r for _name, r in d.requests])
        d.big_request = _fetch(12, [(big, [(p, 0, 1 << 20) for p in range(BIG_PARTITIONS)])])
        (d.big_copied,) = _frames(bs, [d.big_request])
        d.clients_copied = _clients(d)
        assert b.metric(SENDFILE_METRIC) == 0, "the copy path sent file ranges"
        b.extra_args = tuple("kcompat.fetch.sendfile=true" if a == "kcompat.fetch.sendfile=false"
                             else a for a in b.extra_args)
        b.restart()
        yield d


def test_sendfile_answers_are_the_copied_bytes(data: Data) -> None:
    sent = _frames(data.broker.bootstrap, [r for _name, r in data.requests])
    assert data.broker.metric(SENDFILE_METRIC) > 2 << 20, "no answer went out with sendfile"
    for (name, request), copied, zero_copy in zip(data.requests, data.copied, sent, strict=True):
        assert zero_copy == copied, f"{name}: the sendfile answer differs from the copied one"
        body = FetchResponse[request.version].decode(zero_copy, header=True)
        records = [p.records for t in body.responses for p in t.partitions]
        if name != "v18 an errored partition beside data":
            assert any(records), f"{name}: no records answered"
    cut = FetchResponse[11].decode(sent[1], header=True)
    sizes = [len(p.records) for t in cut.responses for p in t.partitions]
    assert sizes == [CUT_BYTES] * PARTITIONS  # a whole batch, then the next one cut
    beyond = FetchResponse[12].decode(sent[2], header=True)
    assert all(len(p.records) > 1 for t in beyond.responses for p in t.partitions)
    committed = FetchResponse[16].decode(sent[6], header=True).responses[0].partitions[0]
    assert committed.aborted_transactions, "read_committed answer without its aborted txn"


def test_clients_read_the_same_records(data: Data) -> None:
    now = _clients(data)
    produced = sorted((p, o, k, v) for (p, o), (k, v) in data.produced.items())
    assert now["confluent read_committed"] == produced
    for name, records in now.items():
        assert records == data.clients_copied[name], f"{name} read other records with sendfile"
    uncommitted = {k for _p, _o, k, _v in now["kafka-python"]}
    assert data.aborted_keys <= uncommitted  # read_uncommitted sees the aborted records


def _small_buffer_socket(bs: str) -> socket.socket:
    host, port = bs.rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)  # before connect: small window
    sock.settimeout(TIMEOUT_S)
    sock.connect((host, int(port)))
    return sock


def _recv_exact(sock: socket.socket, n: int, pause_every: int = 0) -> bytes:
    """``n`` bytes; with ``pause_every``, a 1 ms pause after every that many reads."""
    buf = bytearray()
    reads = 0
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 256 * 1024))
        if not chunk:
            raise ConnectionError(f"closed by the broker after {len(buf)} of {n} bytes")
        buf += chunk
        reads += 1
        if pause_every and reads % pause_every == 0:
            time.sleep(0.001)
    return bytes(buf)


def test_large_fetch_to_a_slow_reader_while_the_topic_is_deleted(data: Data) -> None:
    bs = data.broker.bootstrap
    assert len(data.big_copied) > 6 << 20
    before = data.broker.metric(SENDFILE_METRIC)
    sock = _small_buffer_socket(bs)
    try:
        data.big_request.with_header(correlation_id=1, client_id="zc-slow")
        payload = bytes(data.big_request.encode(header=True))
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        time.sleep(0.3)  # the broker fills the socket and waits for it to drain
        other = RawConnection(bs, timeout=5.0)
        try:  # the event loop is not stuck in the blocked send
            started = time.monotonic()
            other.request(ApiVersionsRequest[3](client_software_name="zc",
                                                client_software_version="1"),
                          ApiVersionsResponse[3])
            assert time.monotonic() - started < 2.0
        finally:
            other.close()
        admin = AdminClient({"bootstrap.servers": bs})
        admin.delete_topics([data.big], operation_timeout=10)[data.big].result(TIMEOUT_S)
        deadline = time.monotonic() + TIMEOUT_S
        while os.path.exists(data.broker.data_dir / f"{data.big}-0"):
            assert time.monotonic() < deadline, "the deleted topic's files stay"
            time.sleep(0.05)
        size = struct.unpack(">i", _recv_exact(sock, 4))[0]
        frame = _recv_exact(sock, size, pause_every=8)
    finally:
        sock.close()
    assert frame == data.big_copied, "the slow sendfile answer differs from the copied one"
    assert data.broker.metric(SENDFILE_METRIC) - before >= 6 << 20
    assert "bytes early" not in data.broker.tail(200)
