"""``__share_group_state`` follows what is live, not history (issue 31): a share
group acknowledges records one ShareAcknowledge at a time (a state update
each), the state partition's leader snapshots the key every few updates
(``share.coordinator.snapshot.update.records.per.snapshot``) and drops the
prefix no key needs (``share.coordinator.state.topic.prune.interval.ms``), so
the topic's log start moves; the broker is then killed -9 and restarted, its
state machine replays from that log start, and the group goes on where it
was: the records not acknowledged come, none acknowledged comes again.
"""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import AcknowledgeType, Consumer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests._broker import Broker, unique_topic
from compat_tests._share import produce, require_share_apis, set_group_configs
from kcompat.group.share_state import SHARE_STATE_TOPIC

RECORDS = 300
ACKNOWLEDGED = 150  # one at a time, before the restart
BROKER_ARGS = ("--set", "share.coordinator.state.topic.num.partitions=1",
               "--set", "share.coordinator.snapshot.update.records.per.snapshot=5",
               "--set", "share.coordinator.state.topic.prune.interval.ms=200")


def state_log_start(bootstrap: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("wm")})
    try:
        low, _high = consumer.get_watermark_offsets(TopicPartition(SHARE_STATE_TOPIC, 0),
                                                    timeout=10)
    finally:
        consumer.close()
    return int(low)


def share_consumer(bootstrap: str, group: str, topic: str) -> ShareConsumer:
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    return consumer


def test_state_log_start_moves_and_a_restart_resumes_the_group(tmp_path: Path) -> None:
    broker = Broker(tmp_path, extra_args=BROKER_ARGS)
    broker.start()
    try:
        bootstrap = broker.bootstrap
        require_share_apis(bootstrap)
        topic, group = unique_topic("ssc"), unique_topic("ssc-g")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
        produce(bootstrap, topic, [(0, None, str(i)) for i in range(RECORDS)])

        acknowledged: set[int] = set()
        consumer = share_consumer(bootstrap, group, topic)
        deadline = time.monotonic() + 60
        try:
            while len(acknowledged) < ACKNOWLEDGED:
                assert time.monotonic() < deadline, f"acknowledged {len(acknowledged)}"
                for m in consumer.poll(0.5):
                    assert m.error() is None, m.error()
                    if len(acknowledged) >= ACKNOWLEDGED:
                        break  # left acquired: given back when the member leaves
                    consumer.acknowledge(m, AcknowledgeType.ACCEPT)
                    results = consumer.commit_sync(30)
                    assert all(err is None for err in results.values()), results
                    acknowledged.add(m.offset())
        finally:
            consumer.close()
        assert len(acknowledged) == ACKNOWLEDGED

        deadline = time.monotonic() + 30
        while (start := state_log_start(bootstrap)) <= 0:
            assert time.monotonic() < deadline, "the state log start never moved"
            time.sleep(0.2)

        broker.kill()
        broker.start()
        assert state_log_start(bootstrap) >= start  # the restart replayed from there

        seen: dict[int, int] = {}
        consumer = share_consumer(bootstrap, group, topic)
        deadline = time.monotonic() + 60
        try:
            while len(seen) < RECORDS - ACKNOWLEDGED:
                assert time.monotonic() < deadline, f"got {len(seen)} after the restart"
                for m in consumer.poll(0.5):
                    assert m.error() is None, m.error()
                    assert m.offset() not in acknowledged, f"{m.offset()} delivered again"
                    seen[m.offset()] = m.delivery_count() or 0
                    consumer.acknowledge(m, AcknowledgeType.ACCEPT)
                consumer.commit_sync(30)
        finally:
            consumer.close()
        assert set(seen) == set(range(RECORDS)) - acknowledged
        assert all(count <= 2 for count in seen.values()), seen
    finally:
        broker.close()
