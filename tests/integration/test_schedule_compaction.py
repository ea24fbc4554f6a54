"""The schedule log keeps what is pending, not what happened: after many
delayed records were delivered, ``__kc_schedule`` starts past them (its
snapshots, and the long-delayed records copied forward), its disk holds a
few segments, ``kcompat scheduled list`` still lists what is pending — and
a broker killed then (kill -9) still delivers every pending record exactly
once, rebuilt from the snapshot."""

from __future__ import annotations

import time
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from compat_tests._broker import Broker, unique_topic
from compat_tests._cluster import Cluster, diagnostics
from compat_tests._compaction import alter_topic
from tests.integration.test_cli import kc_json

LONG = 40  # pending across the restart
LONG_DELAY_MS = 30_000
SEGMENT_BYTES = 20_000


def _schedule_bytes(data_dir: Path) -> int:
    return sum(f.stat().st_size for f in data_dir.glob("__kc_schedule-0/*.log"))


def _schedule_start(bootstrap: str) -> int:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        tp = TopicPartition("__kc_schedule", 0)
        return int(consumer.beginning_offsets([tp])[tp])
    finally:
        consumer.close()


def _round_of_short(producer: KafkaProducer, topic: str, first: int) -> int:
    """200 records delivered at once (keys ``short<n>`` from ``first``), then a
    pause for a snapshot check to pass; the next key number."""
    for n in range(first, first + 200):
        producer.send(topic, b"y" * 100, key=b"short%d" % n, partition=0,
                      headers=[("kc-delay-ms", b"100")])
    producer.flush()
    time.sleep(0.7)
    return first + 200


def test_the_schedule_log_drops_delivered_history_and_restarts_from_its_snapshot(
        tmp_path: Path) -> None:
    broker = Broker(tmp_path / "broker", extra_args=(
        "--set", "admin.port=-1", "--set", "kc.schedule.topic.num.partitions=1",
        "--set", "kc.schedule.snapshot.min.records=150")).start()
    try:
        topic = unique_topic("compact")
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
        producer.send(topic, b"first", key=b"first", partition=0,
                      headers=[("kc-delay-ms", b"1")]).get(timeout=30)  # creates __kc_schedule
        # small segments (Kafka's key for tests: segment.bytes is at least 1 MiB)
        alter_topic(broker.bootstrap, "__kc_schedule", {"internal.segment.bytes": str(SEGMENT_BYTES)})
        short = 0
        for _ in range(6):  # the history
            short = _round_of_short(producer, topic, short)
        # pending until past the listing and the restart below: under CI load those
        # took over 10 s, and the long records were delivered before they were listed
        due_long = time.time() * 1000 + LONG_DELAY_MS
        for i in range(LONG):
            producer.send(topic, b"x" * 100, key=b"long%d" % i, partition=0,
                          headers=[("kc-deliver-at", b"%d" % due_long)])
        short = _round_of_short(producer, topic, short)  # a snapshot holds the long ones
        short = _round_of_short(producer, topic, short)
        producer.close()
        deadline = time.monotonic() + 60
        while _schedule_start(broker.bootstrap) == 0 and time.monotonic() < deadline:
            time.sleep(0.5)
        start = _schedule_start(broker.bootstrap)
        # past most of the history
        assert start > short // 2, "the log start passed the delivered records"
        written = start * 200  # at least: every record is over 100 bytes, twice (add, out)
        assert _schedule_bytes(broker.data_dir) < written / 2, "segments were deleted"
        # ``kcompat scheduled list`` reads the log from its snapshot too
        rows = kc_json(broker, "scheduled", "list", topic)
        assert time.time() * 1000 < due_long, "test bug: listed after the long ones were due"
        assert sorted(r["key"] for r in rows) == sorted(  # type: ignore[attr-defined]
            f"long{i}" for i in range(LONG))
        broker.kill()
        broker.start()
        consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap,
                                 auto_offset_reset="earliest")
        keys: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(keys) < 1 + short + LONG and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                keys += [r.key for r in records]
        # nothing more comes (a second copy would come at once with the first)
        for records in consumer.poll(timeout_ms=2000).values():
            keys += [r.key for r in records]
        consumer.close()
        expected = sorted([b"first"] + [b"long%d" % i for i in range(LONG)] +
                          [b"short%d" % i for i in range(short)])
        assert sorted(keys) == expected
    finally:
        broker.close()


def _log_start(bootstrap: str) -> tuple[int, int]:
    """The schedule partition's log start and end ((-1, -1) while it has no
    leader the client knows: a leader was just killed)."""
    from confluent_kafka import Consumer, KafkaException
    from confluent_kafka import TopicPartition as Tp

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("wm"),
                         "log_level": 0})
    try:
        low, high = consumer.get_watermark_offsets(Tp("__kc_schedule", 0), timeout=5)
        return int(low), int(high)
    except KafkaException:
        return -1, -1
    finally:
        consumer.close()


def test_a_schedule_replica_back_after_the_cut_rebuilds_from_the_snapshot_and_leads(
        tmp_path: Path) -> None:
    """3 brokers, RF 3: the preferred replica of the schedule partition is
    killed with long-delayed records pending; the new leader delivers more,
    snapshots, copies the long records forward and moves the log start past
    all the killed replica had. Back, the replica can only rebuild from the
    new log start (the snapshot), is made leader again, and delivers the long
    records: every record exactly once."""
    from confluent_kafka import ElectionType
    from confluent_kafka import TopicPartition as Tp
    from confluent_kafka.admin import AdminClient

    cluster = Cluster(tmp_path, 3, extra_args=(
        "--set", "kc.schedule.topic.num.partitions=1",
        "--set", "kc.schedule.snapshot.min.records=150"))
    cluster.start()
    try:
        with diagnostics(cluster):
            topic = unique_topic("ccompact")
            cluster.create_topic(topic, 1, 3)
            bootstrap = cluster.bootstrap
            producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all")
            producer.send(topic, b"first", key=b"first", partition=0,
                          headers=[("kc-delay-ms", b"1")]).get(timeout=30)
            alter_topic(bootstrap, "__kc_schedule", {"internal.segment.bytes": "20000"})
            due_long = time.time() * 1000 + 30_000
            for i in range(LONG):
                producer.send(topic, b"x" * 100, key=b"long%d" % i, partition=0,
                              headers=[("kc-deliver-at", b"%d" % due_long)])
            producer.flush()
            producer.close()
            admin = AdminClient({"bootstrap.servers": bootstrap})
            meta = admin.list_topics("__kc_schedule", timeout=10).topics["__kc_schedule"]
            preferred = meta.partitions[0].replicas[0]
            _start, end = _log_start(bootstrap)
            cluster.brokers[preferred].kill()
            live = cluster.live_bootstrap()
            producer = KafkaProducer(bootstrap_servers=live, linger_ms=5, acks="all")
            short = 0
            deadline = time.monotonic() + 60
            while _log_start(live)[0] <= end:
                assert time.monotonic() < deadline, f"the log start stayed at {_log_start(live)}"
                short = _round_of_short(producer, topic, short)
            producer.close()
            cluster.brokers[preferred].start()
            deadline = time.monotonic() + 60
            while cluster.leaders("__kc_schedule").get(0) != preferred:
                assert time.monotonic() < deadline, "the preferred replica never led again"
                admin = AdminClient({"bootstrap.servers": cluster.live_bootstrap()})
                try:
                    admin.elect_leaders(ElectionType.PREFERRED, [Tp("__kc_schedule", 0)]
                                        ).result(30)
                except Exception:  # noqa: BLE001 - not in sync yet: ask again
                    time.sleep(0.5)
            want = sorted([b"first"] + [b"long%d" % i for i in range(LONG)] +
                          [b"short%d" % i for i in range(short)])
            consumer = KafkaConsumer(topic, bootstrap_servers=cluster.live_bootstrap(),
                                     auto_offset_reset="earliest")
            keys: list[bytes] = []
            deadline = time.monotonic() + 90
            while len(keys) < len(want) and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=500).values():
                    keys += [r.key for r in records]
            for records in consumer.poll(timeout_ms=2000).values():
                keys += [r.key for r in records]
            consumer.close()
            assert sorted(keys) == want
            assert f"delivering {LONG} scheduled records" in cluster.brokers[preferred].tail(
                2000), "the rebuilt replica delivered the long records"
    finally:
        cluster.close()
