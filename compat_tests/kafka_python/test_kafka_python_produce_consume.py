"""kafka-python 3.x against a real kcompat broker: produce, consume, codecs,
idempotent defaults, offsets by timestamp, durability across SIGTERM and kill -9.
Tests on ``pbroker`` also run in a 3-broker cluster at replication factor 1 or (those
marked) 3 (conftest.py); those that stop or kill the broker stay on a single node."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka import codec as kcodec
from kafka import errors as kerr

from .._broker import Broker
from .._deployment import SINGLE_AND_RF3, Deployment
from .._records import (
    CODEC_IDS,
    TIMEOUT_MS,
    TIMEOUT_S,
    Rec,
    Seen,
    assert_exactly_once,
    assert_round_trip,
    base_timestamp,
    by_partition,
    compressible_records,
    durability_values,
    golden_records,
    norm_headers,
    now_ms,
    wait_for_ends,
)

pytestmark = pytest.mark.timeout(120)

CLIENT = "kafka-python"

# kafka-python 3.0.12 looks these modules up at import time (kafka/codec.py);
# gzip is in the standard library.
CODEC_LIBS = {
    "gzip": (kcodec.has_gzip, "(stdlib)"),
    "snappy": (kcodec.has_snappy, "python-snappy (>=0.7 is backed by cramjam)"),
    "lz4": (kcodec.has_lz4, "lz4"),
    "zstd": (kcodec.has_zstd, "zstandard"),
}


# -- helpers --------------------------------------------------------------------


def admin_client(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=TIMEOUT_MS)


def create_topic(bootstrap: str, name: str, partitions: int = 3,
                 configs: dict[str, str] | None = None, replication: int = 1) -> None:
    admin = admin_client(bootstrap)
    try:
        res = admin.create_topics({name: {
            "num_partitions": partitions, "replication_factor": replication,
            "configs": configs or {},
        }})
        (t,) = res["topics"]
        assert t["name"] == name and t["error_code"] == 0, f"{CLIENT}: CreateTopics answered {t}"
        admin.wait_for_topics([name], timeout_ms=TIMEOUT_MS)
    finally:
        admin.close()


def producer(bootstrap: str, **overrides: object) -> KafkaProducer:
    cfg: dict[str, object] = {
        "bootstrap_servers": bootstrap,
        "request_timeout_ms": 20_000,
        "delivery_timeout_ms": TIMEOUT_MS,
        "max_block_ms": TIMEOUT_MS,
    }
    cfg.update(overrides)
    return KafkaProducer(**cfg)


def produce(p: KafkaProducer, topic: str, recs: list[Rec]) -> list[object]:
    """Send every record to its partition, confirm every delivery, check the
    offsets the broker assigned are dense per partition."""
    futures = [
        p.send(topic, value=r.value, key=r.key, headers=list(r.headers),
               partition=r.partition, timestamp_ms=r.timestamp)
        for r in recs
    ]
    p.flush(timeout=TIMEOUT_S)
    metas = [f.get(timeout=TIMEOUT_S) for f in futures]
    next_offset: dict[int, int] = {}
    for r, md in zip(recs, metas, strict=True):
        assert md.topic == topic and md.partition == r.partition, f"{CLIENT}: metadata {md}"
        want = next_offset.get(r.partition, 0)
        assert md.offset == want, (
            f"{CLIENT}: produce to partition {r.partition} acknowledged offset {md.offset}, "
            f"expected {want}"
        )
        next_offset[r.partition] = want + 1
        assert md.timestamp == r.timestamp, (
            f"{CLIENT}: RecordMetadata.timestamp {md.timestamp} != sent CreateTime {r.timestamp}"
        )
    return metas


def consumer(bootstrap: str) -> KafkaConsumer:
    return KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        request_timeout_ms=TIMEOUT_MS,
        fetch_max_wait_ms=100,
    )


def consume_all(bootstrap: str, topic: str, partitions: list[int],
                expect_end: dict[int, int] | None = None) -> list[Seen]:
    """assign + seek_to_beginning, read every partition up to its end offset."""
    c = consumer(bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        ends = c.end_offsets(tps, timeout_ms=TIMEOUT_MS)
        if expect_end is not None:
            got = wait_for_ends(lambda: {tp.partition: off for tp, off in c.end_offsets(
                tps, timeout_ms=TIMEOUT_MS).items()}, expect_end)
            assert got == expect_end, f"{CLIENT}: end_offsets {got}, expected {expect_end}"
            ends = {TopicPartition(topic, p): off for p, off in got.items()}
        seen: list[Seen] = []
        pos = {tp: 0 for tp in tps}
        deadline = time.monotonic() + TIMEOUT_S
        while any(pos[tp] < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, (
                f"{CLIENT}: timed out reading {topic}: positions {pos}, end offsets {ends}"
            )
            for tp, records in c.poll(timeout_ms=500).items():
                for m in records:
                    seen.append(Seen(m.partition, m.offset, m.key, m.value,
                                     norm_headers(m.headers), m.timestamp, m.timestamp_type))
                    pos[tp] = m.offset + 1
        return seen
    finally:
        c.close()


# -- tests ----------------------------------------------------------------------


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)
def test_round_trip_keys_headers_timestamps(pbroker: Deployment, topic: str) -> None:
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=3, replication=pbroker.replication)
    recs = golden_records(3)
    p = producer(bs)
    try:
        produce(p, topic, recs)
    finally:
        p.close(timeout=TIMEOUT_S)
    counts = {part: len(rs) for part, rs in by_partition(recs).items()}
    seen = consume_all(bs, topic, [0, 1, 2], expect_end=counts)
    assert_round_trip(recs, seen, CLIENT)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression_codec(pbroker: Deployment, topic: str, codec: str) -> None:
    has_lib, package = CODEC_LIBS[codec]
    if not has_lib():
        pytest.fail(
            f"{CLIENT} cannot produce {codec}: its codec library is not installed in this venv; "
            f"add the PyPI package {package!r} to pyproject's test extras (see FINDINGS.md)"
        )
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=1, replication=pbroker.replication)
    recs = compressible_records(300)
    p = producer(bs, compression_type=codec, linger_ms=20)
    try:
        produce(p, topic, recs)
    finally:
        p.close(timeout=TIMEOUT_S)
    seen = consume_all(bs, topic, [0], expect_end={0: len(recs)})
    assert_round_trip(recs, seen, f"{CLIENT} {codec}")
    stored = pbroker.stored_codecs(topic, 0)
    assert stored and set(stored) == {CODEC_IDS[codec]}, (
        f"{CLIENT}: batches on disk have codecs {sorted(set(stored))}, expected only {codec}"
    )


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)
def test_default_producer_is_idempotent(pbroker: Deployment, topic: str) -> None:
    """kafka-python 3 defaults to enable_idempotence=True, acks=all (KIP-679). It
    turns idempotence off by itself if it thinks the broker is older than 0.11."""
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=1, replication=pbroker.replication)
    p = KafkaProducer(bootstrap_servers=bs)  # library defaults only
    try:
        assert p.config["enable_idempotence"] is True, (
            f"{CLIENT} disabled idempotence against this broker "
            f"(inferred api_version {p.config['api_version']})"
        )
        assert p.config["acks"] == -1
        futures = [p.send(topic, value=f"idem-{i}".encode(), key=b"k") for i in range(50)]
        p.flush(timeout=TIMEOUT_S)
        offsets = [f.get(timeout=TIMEOUT_S).offset for f in futures]
        tm = p._transaction_manager
        assert tm is not None, f"{CLIENT}: no transaction manager, so no InitProducerId"
        pid = tm.producer_id_and_epoch
        assert pid.producer_id >= 0 and pid.epoch >= 0, (
            f"{CLIENT}: producer id/epoch not assigned by InitProducerId: {pid}"
        )
    finally:
        p.close(timeout=TIMEOUT_S)
    assert offsets == list(range(50)), f"{CLIENT}: acknowledged offsets {offsets}"
    seen = consume_all(bs, topic, [0], expect_end={0: 50})
    assert [s.value for s in seen] == [f"idem-{i}".encode() for i in range(50)]


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)
def test_offsets_for_times(pbroker: Deployment, topic: str) -> None:
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=3, replication=pbroker.replication)
    base = base_timestamp()
    recs = [Rec(1, f"k{i}".encode(), f"v{i}".encode(), (), base + i * 1000) for i in range(10)]
    recs.append(Rec(2, b"only", b"one", (), base))
    p = producer(bs)
    try:
        produce(p, topic, recs)
    finally:
        p.close(timeout=TIMEOUT_S)

    tp0, tp1, tp2 = (TopicPartition(topic, i) for i in range(3))
    c = consumer(bs)
    try:
        # timestamp lookups search below the high watermark (acks=1: wait for it)
        wait_for_ends(lambda: {tp.partition: o for tp, o in c.end_offsets(
            [tp0, tp1, tp2], timeout_ms=TIMEOUT_MS).items()}, {0: 0, 1: 10, 2: 1})
        for ts, want in [(base - 5000, 0), (base, 0), (base + 1, 1), (base + 2500, 3),
                         (base + 9000, 9)]:
            got = c.offsets_for_times({tp1: ts}, timeout_ms=TIMEOUT_MS)[tp1]
            assert got is not None, f"{CLIENT}: offsets_for_times({ts}) gave None, expected {want}"
            assert got.offset == want, f"{CLIENT}: ts {ts - base:+d}ms -> offset {got.offset}, expected {want}"
            assert got.timestamp == base + want * 1000, (
                f"{CLIENT}: ts {ts - base:+d}ms -> record timestamp {got.timestamp}, "
                f"expected {base + want * 1000}"
            )
        # Beyond the last record Kafka answers offset -1, which kafka-python maps to None.
        beyond = c.offsets_for_times({tp1: base + 9001}, timeout_ms=TIMEOUT_MS)
        assert beyond[tp1] is None, f"{CLIENT}: timestamp past the last record gave {beyond[tp1]}"
        # Several partitions in one request, one of them empty.
        multi = c.offsets_for_times({tp0: base, tp1: base + 2500, tp2: base}, timeout_ms=TIMEOUT_MS)
        assert multi[tp0] is None, f"{CLIENT}: empty partition gave {multi[tp0]}"
        assert multi[tp1] is not None and multi[tp1].offset == 3, f"{CLIENT}: {multi}"
        assert multi[tp2] is not None and multi[tp2].offset == 0, f"{CLIENT}: {multi}"
        begin = c.beginning_offsets([tp0, tp1, tp2], timeout_ms=TIMEOUT_MS)
        end = c.end_offsets([tp0, tp1, tp2], timeout_ms=TIMEOUT_MS)
        assert begin == {tp0: 0, tp1: 0, tp2: 0}, f"{CLIENT}: beginning_offsets {begin}"
        assert end == {tp0: 0, tp1: 10, tp2: 1}, f"{CLIENT}: end_offsets {end}"
    finally:
        c.close()


# -- Kafka behaviours a client can observe ------------------------------------------


def test_auto_create_on_produce(pbroker: Deployment, topic: str) -> None:
    """auto.create.topics.enable (default true): producing to an unknown topic
    creates it with num.partitions=1."""
    bs = pbroker.bootstrap
    p = producer(bs)
    try:
        md = p.send(topic, key=b"k", value=b"auto").get(timeout=TIMEOUT_S)
        assert (md.partition, md.offset) == (0, 0), f"{CLIENT}: {md}"
        assert p.partitions_for(topic) == {0}, f"{CLIENT}: partitions {p.partitions_for(topic)}"
    finally:
        p.close(timeout=TIMEOUT_S)
    seen = consume_all(bs, topic, [0], expect_end={0: 1})
    assert [(s.key, s.value) for s in seen] == [(b"k", b"auto")]


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)
def test_acks_0_and_1(pbroker: Deployment, topic: str) -> None:
    """acks=0 gets no response at all (a broker that answers desynchronises the
    connection); acks=1 is acknowledged; everything lands in order."""
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=1, replication=pbroker.replication)
    p0 = producer(bs, acks=0, enable_idempotence=False)
    try:
        fs = [p0.send(topic, value=f"a0-{i}".encode(), partition=0) for i in range(50)]
        p0.flush(timeout=TIMEOUT_S)
        for f in fs:
            f.get(timeout=TIMEOUT_S)  # acks=0: resolved locally (offset is not meaningful)
    finally:
        p0.close(timeout=TIMEOUT_S)
    p1 = producer(bs, acks=1, enable_idempotence=False)
    try:
        fs = [p1.send(topic, value=f"a1-{i}".encode(), partition=0) for i in range(50)]
        p1.flush(timeout=TIMEOUT_S)
        offs = [f.get(timeout=TIMEOUT_S).offset for f in fs]
    finally:
        p1.close(timeout=TIMEOUT_S)
    assert offs == list(range(50, 100)), f"{CLIENT}: acks=1 offsets {offs[:3]}..{offs[-3:]}"
    seen = consume_all(bs, topic, [0], expect_end={0: 100})
    assert [s.value for s in seen] == [f"a0-{i}".encode() for i in range(50)] + [
        f"a1-{i}".encode() for i in range(50)]


def test_record_larger_than_max_message_bytes_is_rejected(pbroker: Deployment, topic: str) -> None:
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=1, replication=pbroker.replication,
                 configs={"max.message.bytes": "10000"})
    p = producer(bs, max_request_size=1_000_000)
    try:
        with pytest.raises(kerr.MessageSizeTooLargeError):
            p.send(topic, value=b"x" * 50_000, partition=0).get(timeout=TIMEOUT_S)
    finally:
        p.close(timeout=TIMEOUT_S)
    # A fresh producer: kafka-python 3.0.12 makes an idempotent producer fatal after
    # any non-retriable batch error (see FINDINGS.md).
    p = producer(bs)
    try:
        md = p.send(topic, value=b"small", partition=0).get(timeout=TIMEOUT_S)
    finally:
        p.close(timeout=TIMEOUT_S)
    assert md.offset == 0, f"{CLIENT}: the rejected record took an offset: {md}"


def test_timestamp_too_far_in_future_is_rejected(pbroker: Deployment, topic: str) -> None:
    """Kafka 4 default message.timestamp.after.max.ms = 1 hour (KIP-1030)."""
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=1, replication=pbroker.replication)
    p = producer(bs)
    try:
        md = p.send(topic, value=b"future", partition=0,
                    timestamp_ms=now_ms() + 2 * 3_600_000).get(timeout=TIMEOUT_S)
    except kerr.InvalidTimestampError:
        pass
    else:
        pytest.fail(
            f"{CLIENT}: Produce of a record with CreateTime now+2h was acknowledged at offset "
            f"{md.offset}; Kafka 4 answers INVALID_TIMESTAMP (32) "
            f"(message.timestamp.after.max.ms defaults to 3600000)"
        )
    finally:
        p.close(timeout=TIMEOUT_S)


def test_log_append_time_topic(pbroker: Deployment, topic: str) -> None:
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=1, replication=pbroker.replication,
                 configs={"message.timestamp.type": "LogAppendTime"})
    old = base_timestamp()
    p = producer(bs)
    try:
        t0 = now_ms()
        metas = [p.send(topic, value=f"lat-{i}".encode(), partition=0, timestamp_ms=old)
                 for i in range(5)]
        p.flush(timeout=TIMEOUT_S)
        metas = [f.get(timeout=TIMEOUT_S) for f in metas]
        t1 = now_ms()
    finally:
        p.close(timeout=TIMEOUT_S)
    for md in metas:
        assert t0 - 5000 <= md.timestamp <= t1 + 5000, (
            f"{CLIENT}: LogAppendTime topic acknowledged timestamp {md.timestamp}, "
            f"expected broker time in [{t0}, {t1}] (sent CreateTime {old})"
        )
    seen = consume_all(bs, topic, [0], expect_end={0: 5})
    for s, md in zip(seen, metas, strict=True):
        assert s.timestamp_type == 1, f"{CLIENT}: timestamp type {s.timestamp_type}, expected 1 (LogAppendTime)"
        assert s.timestamp == md.timestamp, f"{CLIENT}: consumed ts {s.timestamp} != acked {md.timestamp}"


def test_tiny_max_partition_fetch_bytes_still_progresses(pbroker: Deployment, topic: str) -> None:
    """KIP-74: the first batch is returned even if it exceeds the fetch size."""
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=1, replication=pbroker.replication)
    recs = [Rec(0, b"big", bytes(i % 251 for i in range(100_000)), (), base_timestamp()),
            Rec(0, b"small", b"v", (), base_timestamp() + 1),
            Rec(0, b"big2", b"y" * 60_000, (), base_timestamp() + 2)]
    p = producer(bs, linger_ms=0)
    try:
        for r in recs:  # one batch each
            p.send(topic, key=r.key, value=r.value, partition=0, timestamp_ms=r.timestamp).get(
                timeout=TIMEOUT_S)
    finally:
        p.close(timeout=TIMEOUT_S)
    c = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, request_timeout_ms=TIMEOUT_MS,
                      fetch_max_wait_ms=100, max_partition_fetch_bytes=1024)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < 3 and time.monotonic() < deadline:
            for msgs in c.poll(timeout_ms=500).values():
                got.extend((m.offset, m.value) for m in msgs)
    finally:
        c.close()
    assert got == [(i, r.value) for i, r in enumerate(recs)], (
        f"{CLIENT}: with max_partition_fetch_bytes=1024 read {[(o, len(v)) for o, v in got]}"
    )


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)
def test_fetch_out_of_range(pbroker: Deployment, topic: str) -> None:
    """Fetching past the log end: OFFSET_OUT_OF_RANGE, then the reset policy."""
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=1, replication=pbroker.replication)
    p = producer(bs)
    try:
        for i in range(5):
            p.send(topic, value=f"r{i}".encode(), partition=0)
        p.flush(timeout=TIMEOUT_S)
    finally:
        p.close(timeout=TIMEOUT_S)
    tp = TopicPartition(topic, 0)
    strict = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, request_timeout_ms=TIMEOUT_MS,
                           fetch_max_wait_ms=100, auto_offset_reset="none")
    try:
        strict.assign([tp])
        strict.seek(tp, 100)
        deadline = time.monotonic() + TIMEOUT_S
        with pytest.raises(kerr.OffsetOutOfRangeError):
            while time.monotonic() < deadline:
                strict.poll(timeout_ms=500)
    finally:
        strict.close()
    reset = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, request_timeout_ms=TIMEOUT_MS,
                          fetch_max_wait_ms=100, auto_offset_reset="earliest")
    try:
        reset.assign([tp])
        reset.seek(tp, 100)
        got: list[int] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < 5 and time.monotonic() < deadline:
            for msgs in reset.poll(timeout_ms=500).values():
                got.extend(m.offset for m in msgs)
    finally:
        reset.close()
    assert got == [0, 1, 2, 3, 4], f"{CLIENT}: after reset to earliest read offsets {got}"


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)
def test_live_tail_and_read_committed(pbroker: Deployment, topic: str) -> None:
    """A consumer waiting at the log end (Fetch long poll) sees a new record promptly;
    read_committed sees non-transactional records (LSO = high watermark)."""
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=1, replication=pbroker.replication)
    tp = TopicPartition(topic, 0)
    c = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, request_timeout_ms=TIMEOUT_MS,
                      fetch_max_wait_ms=500, isolation_level="read_committed")
    p = producer(bs)
    try:
        c.assign([tp])
        c.seek_to_end(tp)
        assert c.position(tp, timeout_ms=TIMEOUT_MS) == 0
        assert c.poll(timeout_ms=700) == {}
        sent_at = time.monotonic()
        p.send(topic, value=b"tail", partition=0).get(timeout=TIMEOUT_S)
        got: list[bytes] = []
        while not got and time.monotonic() - sent_at < 10:
            for msgs in c.poll(timeout_ms=200).values():
                got.extend(m.value for m in msgs)
        assert got == [b"tail"], f"{CLIENT}: tailing consumer got {got} within 10s"
        assert c.end_offsets([tp], timeout_ms=TIMEOUT_MS) == {tp: 1}
    finally:
        p.close(timeout=TIMEOUT_S)
        c.close()


def test_many_partitions(pbroker: Deployment, topic: str) -> None:
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=48, replication=pbroker.replication)
    recs = [Rec(p, f"k{p}".encode(), f"v{p}".encode(), (), base_timestamp() + p) for p in range(48)]
    p = producer(bs)
    try:
        produce(p, topic, recs)
    finally:
        p.close(timeout=TIMEOUT_S)
    seen = consume_all(bs, topic, list(range(48)), expect_end={p: 1 for p in range(48)})
    assert_round_trip(recs, seen, f"{CLIENT} 48 partitions")


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)
def test_seek_and_time_lookup_inside_a_compressed_batch(pbroker: Deployment, topic: str) -> None:
    """One gzip batch holds offsets 0..9: a fetch from offset 5 must return that batch
    (the client drops 0..4), and a timestamp that falls on record 5 must give offset 5,
    not the batch's base offset."""
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=1, replication=pbroker.replication)
    base = base_timestamp()
    # Compressible values: kafka-python sends a batch uncompressed if gzip does not shrink it.
    recs = [Rec(0, f"k{i}".encode(), f"v{i}".encode() + b"x" * 200, (), base + i * 1000)
            for i in range(10)]
    p = producer(bs, compression_type="gzip", linger_ms=500)
    try:
        produce(p, topic, recs)
    finally:
        p.close(timeout=TIMEOUT_S)
    assert pbroker.stored_codecs(topic, 0) == [1], "test set-up: expected one gzip batch"
    tp = TopicPartition(topic, 0)
    c = consumer(bs)
    try:
        got = c.offsets_for_times({tp: base + 4500}, timeout_ms=TIMEOUT_MS)[tp]
        assert got is not None and (got.offset, got.timestamp) == (5, base + 5000), (
            f"{CLIENT}: timestamp inside a compressed batch -> {got}, expected offset 5"
        )
        c.assign([tp])
        c.seek(tp, 5)
        seen: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(seen) < 5 and time.monotonic() < deadline:
            for msgs in c.poll(timeout_ms=300).values():
                seen.extend((m.offset, m.value) for m in msgs)
    finally:
        c.close()
    assert seen == [(i, recs[i].value) for i in range(5, 10)], f"{CLIENT}: from offset 5 read {seen}"


def test_many_segments(pbroker: Deployment, topic: str) -> None:
    """segment.bytes=1 MiB (Kafka 4's minimum) and ~3 MiB of records: reads,
    time lookups and end offsets work across segment boundaries."""
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=1, replication=pbroker.replication,
                 configs={"segment.bytes": "1048576"})
    base = base_timestamp()
    n = 3000
    p = producer(bs, linger_ms=5)
    try:
        fs = [p.send(topic, value=f"{i:06d}".encode() + b"." * 1000, partition=0,
                     timestamp_ms=base + i) for i in range(n)]
        p.flush(timeout=TIMEOUT_S)
        assert [f.get(timeout=TIMEOUT_S).offset for f in fs] == list(range(n))
    finally:
        p.close(timeout=TIMEOUT_S)
    segments = sorted(pbroker.leader_of(topic, 0).data_dir.glob(f"{topic}-0/*.log"))
    assert len(segments) >= 3, f"{CLIENT}: segment.bytes=1048576 but only {len(segments)} segment files"
    tp = TopicPartition(topic, 0)
    c = consumer(bs)
    try:
        for i in (0, 1234, 2500, n - 1):
            got = c.offsets_for_times({tp: base + i}, timeout_ms=TIMEOUT_MS)[tp]
            assert got is not None and got.offset == i, f"{CLIENT}: ts base+{i} -> {got}"
    finally:
        c.close()
    seen = consume_all(bs, topic, [0], expect_end={0: n})
    assert [s.offset for s in seen] == list(range(n))
    assert all(s.value[:6] == f"{s.offset:06d}".encode() for s in seen)


# -- durability (own broker per test) ---------------------------------------------

N_DURABLE = 300


def _produce_acked(bs: str, topic: str, values: list[bytes]) -> list[tuple[int, int, bytes]]:
    p = producer(bs, acks="all")
    try:
        futures = [(p.send(topic, value=v, key=v[-3:], partition=i % 3), v)
                   for i, v in enumerate(values)]
        p.flush(timeout=TIMEOUT_S)
        acked = []
        for f, v in futures:
            md = f.get(timeout=TIMEOUT_S)  # raises if not acknowledged
            acked.append((md.partition, md.offset, v))
    finally:
        p.close(timeout=TIMEOUT_S)
    return acked


def _check_restart_appends(bs: str, topic: str, next_offsets: dict[int, int]) -> None:
    """After a restart, new records go after the recovered log end."""
    p = producer(bs)
    try:
        for part, want in next_offsets.items():
            md = p.send(topic, value=b"after-restart", partition=part).get(timeout=TIMEOUT_S)
            assert md.offset == want, (
                f"{CLIENT}: first produce after restart to partition {part} got offset "
                f"{md.offset}, expected {want} (log end not recovered?)"
            )
    finally:
        p.close(timeout=TIMEOUT_S)


def test_sigterm_restart_keeps_acked_records(broker: Broker, topic: str) -> None:
    bs = broker.bootstrap
    create_topic(bs, topic, partitions=3)
    values = durability_values(N_DURABLE, "term")
    acked = _produce_acked(bs, topic, values)
    assert len(acked) == N_DURABLE

    rc = broker.stop()
    assert rc == 0, f"broker exited with {rc} after SIGTERM, expected a clean exit (0)"
    broker.start()

    ends = {p: sum(1 for a in acked if a[0] == p) for p in range(3)}
    seen = consume_all(bs, topic, [0, 1, 2], expect_end=ends)
    assert sorted((s.partition, s.offset, s.value) for s in seen) == sorted(acked), (
        f"{CLIENT}: records after SIGTERM+restart differ from the acknowledged ones"
    )
    _check_restart_appends(bs, topic, ends)


def test_kill9_restart_keeps_acked_records(broker: Broker, topic: str) -> None:
    bs = broker.bootstrap
    create_topic(bs, topic, partitions=3)
    values = durability_values(N_DURABLE, "kill")
    acked = _produce_acked(bs, topic, values)

    broker.kill()
    broker.start()

    seen = consume_all(bs, topic, [0, 1, 2])
    assert_exactly_once([a[2] for a in acked], [s.value for s in seen], CLIENT, sent=values)
    for p in range(3):
        offs = [s.offset for s in seen if s.partition == p]
        assert offs == list(range(len(offs))), f"{CLIENT}: partition {p} offsets {offs}"
    # Acked with acks=all means on disk: the acknowledged offsets are exactly what came back.
    assert sorted((s.partition, s.offset, s.value) for s in seen) == sorted(acked)
    _check_restart_appends(bs, topic, {p: sum(1 for a in acked if a[0] == p) for p in range(3)})


def test_consumer_and_producer_survive_broker_restart(broker: Broker, topic: str) -> None:
    """The same consumer and producer instances carry on across a SIGTERM restart:
    reconnect, metadata refresh, position validation; nothing lost or repeated."""
    bs = broker.bootstrap
    create_topic(bs, topic, partitions=1)
    tp = TopicPartition(topic, 0)
    p = producer(bs)
    c = consumer(bs)
    try:
        c.assign([tp])
        c.seek_to_beginning(tp)

        def read(n: int) -> list[tuple[int, bytes]]:
            got: list[tuple[int, bytes]] = []
            deadline = time.monotonic() + TIMEOUT_S
            while len(got) < n and time.monotonic() < deadline:
                for msgs in c.poll(timeout_ms=300).values():
                    got.extend((m.offset, m.value) for m in msgs)
            return got

        for i in range(20):
            p.send(topic, value=f"before-{i}".encode(), partition=0)
        p.flush(timeout=TIMEOUT_S)
        assert read(20) == [(i, f"before-{i}".encode()) for i in range(20)]

        assert broker.stop() == 0
        broker.start()

        fs = [p.send(topic, value=f"after-{i}".encode(), partition=0) for i in range(20)]
        p.flush(timeout=TIMEOUT_S)
        assert [f.get(timeout=TIMEOUT_S).offset for f in fs] == list(range(20, 40))
        got = read(20)
        assert got == [(20 + i, f"after-{i}".encode()) for i in range(20)], (
            f"{CLIENT}: consumer after broker restart read {got[:3]}..({len(got)} records)"
        )
    finally:
        p.close(timeout=TIMEOUT_S)
        c.close()


def test_restart_after_torn_tail_write(broker: Broker, topic: str) -> None:
    """A crash mid-write leaves part of a batch at the end of the active segment.
    Simulated: kill -9, append a truncated copy of a batch header plus junk to the
    segment file, restart. Recovery must drop the torn tail, keep every acknowledged
    record, and append new records right after them."""
    bs = broker.bootstrap
    create_topic(bs, topic, partitions=1)
    values = durability_values(100, "torn")
    p = producer(bs, acks="all")
    try:
        fs = [p.send(topic, value=v, partition=0) for v in values]
        p.flush(timeout=TIMEOUT_S)
        assert [f.get(timeout=TIMEOUT_S).offset for f in fs] == list(range(100))
    finally:
        p.close(timeout=TIMEOUT_S)
    broker.kill()
    (segment, *_) = sorted(broker.data_dir.glob(f"{topic}-0/*.log"), reverse=True)
    data = segment.read_bytes()
    assert len(data) > 61, f"segment {segment} is too small to hold the acknowledged records"
    with open(segment, "ab") as f:
        f.write(data[:40])  # a batch header cut short: a plausible torn write
        f.write(b"\x00\x07garbage")
    broker.start()
    seen = consume_all(bs, topic, [0], expect_end={0: 100})
    assert [s.value for s in seen] == values
    _check_restart_appends(bs, topic, {0: 100})
