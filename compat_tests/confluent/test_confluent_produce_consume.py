"""confluent-kafka (librdkafka 2.x) against a real kcompat broker: produce, consume,
codecs, default and idempotent producers, offsets by timestamp, durability.
Tests on ``pbroker`` also run in a 3-broker cluster at replication factor 1 or (those
marked) 3 (conftest.py); those that stop or kill the broker stay on a single node."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_LOG_APPEND_TIME,
    KafkaError,
    Producer,
    TopicPartition,
)

from .._broker import Broker
from .._deployment import SINGLE_AND_RF3, Deployment
from .._records import (
    CODEC_IDS,
    TIMEOUT_S,
    Rec,
    assert_exactly_once,
    assert_round_trip,
    base_timestamp,
    by_partition,
    compressible_records,
    durability_values,
    golden_records,
    now_ms,
)
from ._helpers import CLIENT, Deliveries, consume_all, consumer, create_topic, produce_recs

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)
def test_round_trip_keys_headers_timestamps_idempotent(pbroker: Deployment, topic: str) -> None:
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=3, replication=pbroker.replication)
    recs = golden_records(3)
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True})
    produce_recs(p, topic, recs)
    counts = {part: len(rs) for part, rs in by_partition(recs).items()}
    seen = consume_all(bs, topic, [0, 1, 2], expect_end=counts)
    assert_round_trip(recs, seen, CLIENT)


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)
def test_round_trip_default_producer(pbroker: Deployment, topic: str) -> None:
    """librdkafka defaults: acks=all, not idempotent, linger 5 ms."""
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=3, replication=pbroker.replication)
    recs = golden_records(3)
    p = Producer({"bootstrap.servers": bs})
    produce_recs(p, topic, recs)
    seen = consume_all(bs, topic, [0, 1, 2])
    assert_round_trip(recs, seen, f"{CLIENT} (default producer)")


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)
def test_idempotent_producer_gets_producer_id(pbroker: Deployment, topic: str) -> None:
    """enable.idempotence=true: librdkafka must reach idempotence state Assigned
    (InitProducerId answered), and deliver everything in order."""
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=1, replication=pbroker.replication)
    stats: list[dict[str, Any]] = []
    errors: list[str] = []
    p = Producer({
        "bootstrap.servers": bs,
        "enable.idempotence": True,
        "statistics.interval.ms": 100,
        "stats_cb": lambda s: stats.append(json.loads(s)),
        "error_cb": lambda e: errors.append(str(e)),
    })
    recs = [Rec(0, b"k", f"idem-{i}".encode(), (), base_timestamp() + i) for i in range(200)]
    produce_recs(p, topic, recs)
    deadline = time.monotonic() + 5
    while not any(s.get("eos", {}).get("idemp_state") == "Assigned" for s in stats):
        assert time.monotonic() < deadline, (
            f"{CLIENT}: idempotence never Assigned; last eos stats "
            f"{stats[-1].get('eos') if stats else None}; errors {errors}"
        )
        p.poll(0.1)
    eos = next(s["eos"] for s in reversed(stats) if s.get("eos", {}).get("idemp_state") == "Assigned")
    assert eos["producer_id"] >= 0 and eos["producer_epoch"] >= 0, f"{CLIENT}: {eos}"
    assert not [e for e in errors if "FATAL" in e.upper()], f"{CLIENT}: fatal errors {errors}"
    seen = consume_all(bs, topic, [0], expect_end={0: 200})
    assert [s.value for s in seen] == [r.value for r in recs]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression_codec(pbroker: Deployment, topic: str, codec: str) -> None:
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=1, replication=pbroker.replication)
    recs = compressible_records(300)
    p = Producer({"bootstrap.servers": bs, "compression.type": codec, "linger.ms": 20})
    produce_recs(p, topic, recs)
    seen = consume_all(bs, topic, [0], expect_end={0: len(recs)})
    assert_round_trip(recs, seen, f"{CLIENT} {codec}")
    stored = pbroker.stored_codecs(topic, 0)
    assert stored and set(stored) == {CODEC_IDS[codec]}, (
        f"{CLIENT}: batches on disk have codecs {sorted(set(stored))}, expected only {codec}"
    )


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)
def test_offsets_for_times(pbroker: Deployment, topic: str) -> None:
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=3, replication=pbroker.replication)
    base = base_timestamp()
    recs = [Rec(1, f"k{i}".encode(), f"v{i}".encode(), (), base + i * 1000) for i in range(10)]
    recs.append(Rec(2, b"only", b"one", (), base))
    produce_recs(Producer({"bootstrap.servers": bs}), topic, recs)

    c = consumer(bs)
    try:
        for ts, want in [(base - 5000, 0), (base, 0), (base + 1, 1), (base + 2500, 3),
                         (base + 9000, 9), (base + 9001, -1)]:
            (got,) = c.offsets_for_times([TopicPartition(topic, 1, ts)], timeout=TIMEOUT_S)
            assert got.error is None, f"{CLIENT}: offsets_for_times({ts}) error {got.error}"
            assert got.offset == want, (
                f"{CLIENT}: ts {ts - base:+d}ms -> offset {got.offset}, expected {want}"
                + (" (Kafka answers -1 past the last record)" if want == -1 else "")
            )
        multi = c.offsets_for_times(
            [TopicPartition(topic, 0, base), TopicPartition(topic, 1, base + 2500),
             TopicPartition(topic, 2, base)], timeout=TIMEOUT_S)
        got_multi = {tp.partition: tp.offset for tp in multi}
        assert got_multi == {0: -1, 1: 3, 2: 0}, f"{CLIENT}: multi-partition lookup {got_multi}"
        marks = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT_S)
                 for p in range(3)}
        assert marks == {0: (0, 0), 1: (0, 10), 2: (0, 1)}, f"{CLIENT}: watermarks {marks}"
    finally:
        c.close()


# -- durability -------------------------------------------------------------------

N_DURABLE = 300


def _produce_acked(bs: str, topic: str, values: list[bytes]) -> list[tuple[int, int, bytes]]:
    p = Producer({"bootstrap.servers": bs, "acks": "all", "enable.idempotence": True})
    dr = Deliveries()
    for i, v in enumerate(values):
        p.produce(topic, value=v, key=v[-3:], partition=i % 3, on_delivery=dr)
        p.poll(0)
    assert p.flush(TIMEOUT_S) == 0
    assert not dr.failed, f"{CLIENT}: delivery failures {[(str(e)) for e, _ in dr.failed[:5]]}"
    return [(m.partition(), m.offset(), m.value()) for m in dr.ok]


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
    assert sorted((s.partition, s.offset, s.value) for s in seen) == sorted(acked)


def test_kill9_restart_keeps_acked_records(broker: Broker, topic: str) -> None:
    bs = broker.bootstrap
    create_topic(bs, topic, partitions=3)
    values = durability_values(N_DURABLE, "kill")
    acked = _produce_acked(bs, topic, values)

    broker.kill()
    broker.start()

    seen = consume_all(bs, topic, [0, 1, 2])
    assert_exactly_once([a[2] for a in acked], [s.value for s in seen], CLIENT, sent=values)
    assert sorted((s.partition, s.offset, s.value) for s in seen) == sorted(acked)
    # The broker takes new writes after the restart, after the recovered log end.
    dr = Deliveries()
    p = Producer({"bootstrap.servers": bs})
    p.produce(topic, value=b"after", partition=0, on_delivery=dr)
    assert p.flush(TIMEOUT_S) == 0 and not dr.failed
    assert dr.ok[0].offset() == sum(1 for a in acked if a[0] == 0)


@pytest.mark.parametrize("how", ["kill9", "sigterm"])
def test_broker_stops_while_producing(broker: Broker, topic: str, how: str) -> None:
    """kill -9 (or SIGTERM) with acks=all batches in flight: every acknowledged record
    survives exactly once, and (one idempotent producer, one partition) the log is an
    in-order prefix of what was sent, with no gaps. SIGTERM must exit 0."""
    bs = broker.bootstrap
    create_topic(bs, topic, partitions=1)
    values = durability_values(4000, "inflight")
    acked: list[bytes] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(msg.value())

    p = Producer({
        "bootstrap.servers": bs, "acks": "all", "enable.idempotence": True,
        "linger.ms": 2, "batch.num.messages": 50, "message.timeout.ms": 3000,
    })
    stopped_at: int | None = None
    rc: int | None = None

    def stop_broker() -> None:
        nonlocal stopped_at, rc
        stopped_at = len(acked)
        rc = broker.kill() if how == "kill9" else broker.stop()

    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=0, on_delivery=on_delivery)
        if i % 25 == 24:
            p.poll(0.002)
        if stopped_at is None and len(acked) >= 400:
            stop_broker()
    deadline = time.monotonic() + TIMEOUT_S
    while stopped_at is None:
        assert time.monotonic() < deadline, f"{CLIENT}: only {len(acked)} acks before the deadline"
        p.poll(0.01)
        if len(acked) >= 400:
            stop_broker()
    p.flush(10)  # the rest time out (message.timeout.ms) against the stopped broker
    del p
    assert acked, "test bug: nothing acknowledged before the stop"
    if how == "sigterm":
        assert rc == 0, f"broker exited with {rc} on SIGTERM under load, expected 0"

    broker.start()
    seen = consume_all(bs, topic, [0])
    got = [s.value for s in seen]
    print(f"{how} after {stopped_at} acks; {len(acked)} acked in all; {len(got)} in the log")
    assert_exactly_once(acked, got, CLIENT, sent=values)
    assert [s.offset for s in seen] == list(range(len(seen)))
    assert got == values[: len(got)], (
        f"{CLIENT}: after {how} the log is not an in-order prefix of what was sent "
        f"({len(got)} records, {len(acked)} acknowledged)"
    )


# -- Kafka behaviours a client can observe ------------------------------------------


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)
def test_null_and_empty_header_values(pbroker: Deployment, topic: str) -> None:
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=1, replication=pbroker.replication)
    p = Producer({"bootstrap.servers": bs})
    dr = Deliveries()
    p.produce(topic, value=b"v", partition=0, on_delivery=dr,
              headers=[("null", None), ("empty", b""), ("null", None), ("x", b"\x00")])
    assert p.flush(TIMEOUT_S) == 0 and not dr.failed, f"{CLIENT}: {dr.failed}"
    c = consumer(bs)
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        m = _poll_one(c)
    finally:
        c.close()
    assert m.headers() == [("null", None), ("empty", b""), ("null", None), ("x", b"\x00")], (
        f"{CLIENT}: null vs empty header values not preserved: {m.headers()}"
    )


def _poll_one(c: Any) -> Any:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error() is not None and m.error().code() == KafkaError._PARTITION_EOF:
            continue
        return m
    raise AssertionError(f"{CLIENT}: no message within {TIMEOUT_S}s")


def test_auto_create_on_produce(pbroker: Deployment, topic: str) -> None:
    bs = pbroker.bootstrap
    p = Producer({"bootstrap.servers": bs})
    dr = Deliveries()
    p.produce(topic, key=b"k", value=b"auto", on_delivery=dr)
    assert p.flush(TIMEOUT_S) == 0 and not dr.failed, f"{CLIENT}: {[str(e) for e, _ in dr.failed]}"
    assert (dr.ok[0].partition(), dr.ok[0].offset()) == (0, 0)
    md = p.list_topics(topic, timeout=TIMEOUT_S).topics[topic]
    assert md.error is None and sorted(md.partitions) == [0], f"{CLIENT}: auto-created {md}"


def _delivery_error(bs: str, topic: str, **produce_kwargs: Any) -> Any:
    p = Producer({"bootstrap.servers": bs, "message.max.bytes": 1_000_000})
    dr = Deliveries()
    p.produce(topic, partition=0, on_delivery=dr, **produce_kwargs)
    assert p.flush(TIMEOUT_S) == 0
    assert not dr.ok, (
        f"{CLIENT}: the broker acknowledged the record at offset {dr.ok[0].offset()}; "
        f"expected a delivery error"
    )
    (err, _msg), = dr.failed
    return err


def test_record_larger_than_max_message_bytes_is_rejected(pbroker: Deployment, topic: str) -> None:
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=1, replication=pbroker.replication,
                 config={"max.message.bytes": "10000"})
    err = _delivery_error(bs, topic, value=b"x" * 50_000)
    assert err.code() == KafkaError.MSG_SIZE_TOO_LARGE, f"{CLIENT}: got {err}"


def test_timestamp_too_far_in_future_is_rejected(pbroker: Deployment, topic: str) -> None:
    """Kafka 4 default message.timestamp.after.max.ms = 1 hour (KIP-1030)."""
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=1, replication=pbroker.replication)
    err = _delivery_error(bs, topic, value=b"future", timestamp=now_ms() + 2 * 3_600_000)
    assert err.code() == KafkaError.INVALID_TIMESTAMP, f"{CLIENT}: got {err}"


def test_log_append_time_topic(pbroker: Deployment, topic: str) -> None:
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=1, replication=pbroker.replication,
                 config={"message.timestamp.type": "LogAppendTime"})
    p = Producer({"bootstrap.servers": bs})
    dr = Deliveries()
    t0 = now_ms()
    for i in range(3):
        p.produce(topic, value=f"lat-{i}".encode(), partition=0, timestamp=base_timestamp(),
                  on_delivery=dr)
    assert p.flush(TIMEOUT_S) == 0 and not dr.failed
    t1 = now_ms()
    for m in dr.ok:
        ts_type, ts = m.timestamp()
        assert ts_type == TIMESTAMP_LOG_APPEND_TIME and t0 - 5000 <= ts <= t1 + 5000, (
            f"{CLIENT}: LogAppendTime topic delivery report timestamp ({ts_type}, {ts}), "
            f"expected (LogAppendTime, broker time in [{t0}, {t1}])"
        )
    seen = consume_all(bs, topic, [0], expect_end={0: 3})
    assert [(s.timestamp_type, s.timestamp) for s in seen] == [
        (1, m.timestamp()[1]) for m in dr.ok], f"{CLIENT}: consumed {seen}"


def test_tiny_fetch_sizes_still_progress(pbroker: Deployment, topic: str) -> None:
    """KIP-74: the first batch comes back even when it exceeds the fetch sizes."""
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=1, replication=pbroker.replication)
    recs = golden_records(3)
    recs = [Rec(0, r.key, r.value, r.headers, r.timestamp) for r in recs]
    produce_recs(Producer({"bootstrap.servers": bs, "linger.ms": 0}), topic, recs)
    c = consumer(bs, **{"max.partition.fetch.bytes": 1024, "fetch.max.bytes": 1024,
                        "message.max.bytes": 1000})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got = [_poll_one(c) for _ in recs]
    finally:
        c.close()
    assert [(m.offset(), m.key(), m.value()) for m in got] == [
        (i, r.key, r.value) for i, r in enumerate(recs)], f"{CLIENT}: tiny fetch sizes"


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)
def test_fetch_out_of_range(pbroker: Deployment, topic: str) -> None:
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=1, replication=pbroker.replication)
    produce_recs(Producer({"bootstrap.servers": bs}), topic,
                 [Rec(0, None, f"r{i}".encode(), (), base_timestamp() + i) for i in range(5)])
    c = consumer(bs, **{"auto.offset.reset": "error"})
    try:
        c.assign([TopicPartition(topic, 0, 100)])
        m = _poll_one(c)
        assert m.error() is not None and m.error().code() == KafkaError._AUTO_OFFSET_RESET, (
            f"{CLIENT}: fetch at 100 of 5 gave {m.error() or ('offset', m.offset())}, "
            f"expected OFFSET_OUT_OF_RANGE -> _AUTO_OFFSET_RESET"
        )
    finally:
        c.close()
    c = consumer(bs, **{"auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, 0, 100)])
        got = [_poll_one(c) for _ in range(5)]
    finally:
        c.close()
    assert [(m.error(), m.offset()) for m in got] == [(None, i) for i in range(5)]


def test_consumer_and_producer_survive_broker_restart(broker: Broker, topic: str) -> None:
    bs = broker.bootstrap
    create_topic(bs, topic, partitions=1)
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True})
    c = consumer(bs)
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        before = [Rec(0, None, f"before-{i}".encode(), (), base_timestamp() + i) for i in range(20)]
        produce_recs(p, topic, before)
        got = [_poll_one(c) for _ in range(20)]
        assert [(m.offset(), m.value()) for m in got] == [(i, r.value) for i, r in enumerate(before)]

        assert broker.stop() == 0
        broker.start()

        dr = Deliveries()
        for i in range(20):
            p.produce(topic, value=f"after-{i}".encode(), partition=0, on_delivery=dr)
        assert p.flush(TIMEOUT_S) == 0 and not dr.failed, f"{CLIENT}: {[str(e) for e, _ in dr.failed]}"
        assert sorted(m.offset() for m in dr.ok) == list(range(20, 40))
        got = [_poll_one(c) for _ in range(20)]
        assert [(m.offset(), m.value()) for m in got] == [
            (20 + i, f"after-{i}".encode()) for i in range(20)], (
            f"{CLIENT}: consumer after broker restart read "
            f"{[(m.offset(), m.value()) for m in got][:3]}"
        )
    finally:
        c.close()


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)
def test_seek_and_time_lookup_inside_a_compressed_batch(pbroker: Deployment, topic: str) -> None:
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=1, replication=pbroker.replication)
    base = base_timestamp()
    recs = [Rec(0, f"k{i}".encode(), f"v{i}".encode() + b"x" * 200, (), base + i * 1000)
            for i in range(10)]
    # one batch: librdkafka holds the records for linger.ms, and flush() (after all ten
    # are queued) sends them at once; 200 ms ran out mid-loop on a loaded machine. The
    # producer learns the topic's partitions first: records produced before that wait in
    # librdkafka's unassigned queue and move to the partition one at a time when metadata
    # arrives, and a flush() already under way sent each as its own batch (seen once in CI)
    p = Producer({"bootstrap.servers": bs, "compression.type": "zstd", "linger.ms": 30000})
    assert topic in p.list_topics(topic, timeout=TIMEOUT_S).topics
    produce_recs(p, topic, recs)
    assert pbroker.stored_codecs(topic, 0) == [4], "test set-up: expected one zstd batch"
    c = consumer(bs)
    try:
        (got,) = c.offsets_for_times([TopicPartition(topic, 0, base + 4500)], timeout=TIMEOUT_S)
        assert got.offset == 5, f"{CLIENT}: timestamp inside a compressed batch -> offset {got.offset}"
        c.assign([TopicPartition(topic, 0, 5)])
        seen = [_poll_one(c) for _ in range(5)]
    finally:
        c.close()
    assert [(m.offset(), m.value()) for m in seen] == [(i, recs[i].value) for i in range(5, 10)]


def test_kill9_recovers_many_segments(broker: Broker, topic: str) -> None:
    """~3 MiB over 1 MiB segments, kill -9, restart: every segment is recovered."""
    bs = broker.bootstrap
    create_topic(bs, topic, partitions=1, config={"segment.bytes": "1048576"})
    values = [f"{i:06d}".encode() + b"." * 1000 for i in range(3000)]
    base = base_timestamp()
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 5})
    dr = Deliveries()
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=0, timestamp=base + i, on_delivery=dr)
        p.poll(0)
    assert p.flush(TIMEOUT_S) == 0 and not dr.failed and len(dr.ok) == len(values)
    segments = sorted(broker.data_dir.glob(f"{topic}-0/*.log"))
    assert len(segments) >= 3, f"only {len(segments)} segment files for ~3 MiB at segment.bytes=1 MiB"
    broker.kill()
    broker.start()
    seen = consume_all(bs, topic, [0], expect_end={0: len(values)})
    assert [s.value for s in seen] == values
    assert [s.timestamp for s in seen] == [base + i for i in range(len(values))]
    c = consumer(bs)
    try:
        for i in (0, 1100, 2500, 2999):
            (got,) = c.offsets_for_times([TopicPartition(topic, 0, base + i)], timeout=TIMEOUT_S)
            assert got.offset == i, f"{CLIENT}: after recovery ts base+{i} -> offset {got.offset}"
    finally:
        c.close()
