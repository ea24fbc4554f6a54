"""Time retention of a quiet topic, on one node and on 3 brokers (rf 3).

Apache Kafka deletes a partition's active segment too once every record in
it is older than ``retention.ms`` and the high watermark is the log end
(``LocalLog.deletableSegments``: it rolls an empty segment at the log end
first, which becomes the log start). So a topic nobody writes to keeps nothing
past its retention, whatever ``segment.ms`` says. kcompat did not (it only
deleted closed segments), so records a producer wrote with old timestamps
outlived their retention by up to ``segment.ms`` (a week).

Here: records an hour older than the topic's retention go, all of them, the
partition's log start reaches its log end, a new record lands after them;
records inside the retention on the other partition stay. On 3 brokers every
replica deletes them: after the leader is killed, the new leader still starts
at the old log end (the deleted records do not come back).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests._broker import Broker, running, unique_topic
from compat_tests._cluster import Cluster, diagnostics, read_log

# Kafka's keys: the first check at once (not 30 s after start), then every 200 ms
CHECK_EVERY = ("--set", "log.retention.check.interval.ms=200",
               "--set", "log.initial.task.delay.ms=0")
HOUR_MS = 3_600_000


@pytest.fixture(params=["single", "rf3"])
def deployment(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Broker | Cluster]:
    if request.param == "single":
        yield from running(Broker(tmp_path, extra_args=CHECK_EVERY))
        return
    cluster = Cluster(tmp_path, extra_args=CHECK_EVERY)
    try:
        with diagnostics(cluster):
            yield cluster.start()
    finally:
        cluster.close()


def _watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm", "log_level": 0})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return int(low), int(high)
    finally:
        consumer.close()


def _produce(bootstrap: str, topic: str, rows: list[tuple[int, bytes, int]]) -> None:
    """(partition, value, timestamp) each, acks=all."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0})
    for partition, value, ts in rows:
        producer.produce(topic, value, partition=partition, timestamp=ts)
    assert producer.flush(30) == 0


def test_expired_records_of_a_quiet_topic_all_go(deployment: Broker | Cluster) -> None:
    bootstrap = deployment.bootstrap
    rf = 3 if isinstance(deployment, Cluster) else 1
    topic = unique_topic("quiet-retention")
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(topic, 2, rf, config={"retention.ms": str(HOUR_MS)})],
                        operation_timeout=20)[topic].result(timeout=30)
    if isinstance(deployment, Cluster):
        deployment.wait_for_leaders(topic, 2)
    now = int(time.time() * 1000)
    expired, recent = now - 2 * HOUR_MS, now - 600_000
    _produce(bootstrap, topic, [(0, b"old-%d" % i, expired + i) for i in range(5)]
             + [(1, b"recent-%d" % i, recent + i) for i in range(3)])

    deadline = time.monotonic() + 20  # well short of the default 30 s first check
    while (marks := _watermarks(bootstrap, topic, 0)) != (5, 5):
        assert marks[1] == 5, marks
        assert time.monotonic() < deadline, f"the expired records were never deleted: {marks}"
        time.sleep(0.2)
    time.sleep(1.0)  # five more retention checks everywhere: the recent ones stay
    assert _watermarks(bootstrap, topic, 1) == (0, 3)

    _produce(bootstrap, topic, [(0, b"new", int(time.time() * 1000))])
    log = read_log(bootstrap, topic, 2)
    assert log[0] == [(5, b"new")]
    assert log[1] == [(i, b"recent-%d" % i) for i in range(3)]

    if isinstance(deployment, Cluster):  # every replica deleted them, not the leader alone
        victim = deployment.leaders(topic)[0]
        deployment.brokers[victim].kill()
        deployment.wait_for_leaders(topic, 2, exclude=victim)
        live = deployment.live_bootstrap()
        assert _watermarks(live, topic, 0) == (5, 6)
        assert read_log(live, topic, 2)[0] == [(5, b"new")]
