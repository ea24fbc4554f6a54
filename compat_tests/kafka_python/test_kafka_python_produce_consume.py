"""kafka-python 3.x against a real kcompat broker: produce, consume, codecs,
idempotent defaults, offsets by timestamp, durability across SIGTERM and kill -9."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka import codec as kcodec

from .._broker import Broker
from .._records import (
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
                 configs: dict[str, str] | None = None) -> None:
    admin = admin_client(bootstrap)
    try:
        res = admin.create_topics({name: {
            "num_partitions": partitions, "replication_factor": 1, "configs": configs or {},
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
            got = {tp.partition: off for tp, off in ends.items()}
            assert got == expect_end, f"{CLIENT}: end_offsets {got}, expected {expect_end}"
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


def test_round_trip_keys_headers_timestamps(module_broker: Broker, topic: str) -> None:
    bs = module_broker.bootstrap
    create_topic(bs, topic, partitions=3)
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
def test_compression_codec(module_broker: Broker, topic: str, codec: str) -> None:
    has_lib, package = CODEC_LIBS[codec]
    if not has_lib():
        pytest.fail(
            f"{CLIENT} cannot produce {codec}: its codec library is not installed in this venv; "
            f"add the PyPI package {package!r} to pyproject's test extras (see FINDINGS.md)"
        )
    bs = module_broker.bootstrap
    create_topic(bs, topic, partitions=1)
    recs = compressible_records(300)
    p = producer(bs, compression_type=codec, linger_ms=20)
    try:
        produce(p, topic, recs)
    finally:
        p.close(timeout=TIMEOUT_S)
    seen = consume_all(bs, topic, [0], expect_end={0: len(recs)})
    assert_round_trip(recs, seen, f"{CLIENT} {codec}")


def test_default_producer_is_idempotent(module_broker: Broker, topic: str) -> None:
    """kafka-python 3 defaults to enable_idempotence=True, acks=all (KIP-679). It
    turns idempotence off by itself if it thinks the broker is older than 0.11."""
    bs = module_broker.bootstrap
    create_topic(bs, topic, partitions=1)
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


def test_offsets_for_times(module_broker: Broker, topic: str) -> None:
    bs = module_broker.bootstrap
    create_topic(bs, topic, partitions=3)
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
