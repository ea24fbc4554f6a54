"""``__share_group_state`` follows what is live, not history (issue 31): a share
group acknowledges records one ShareAcknowledge at a time (a state update
each), the state partition's leader snapshots the key every few updates
(``share.coordinator.snapshot.update.records.per.snapshot``) and drops the
prefix no key needs (``share.coordinator.state.topic.prune.interval.ms``), so
the topic's log start moves — past all another group wrote before it went
idle too (its key, cold, is snapshotted once the log is large); the broker is
then killed -9 and restarted, its state machine replays from that log start,
and both groups go on where they were: the records not acknowledged come,
none acknowledged comes again.

In a 3-broker cluster the preferred replica of the state partition is killed,
the group acknowledges on until the new leader has dropped more than the
killed one ever had, and the killed replica comes back (it can only rebuild
from the new log start: ``restore``), is made leader again (ElectLeaders
PREFERRED) and serves the rest, again without a redelivery.
"""

from __future__ import annotations

import base64
import time
import uuid
from pathlib import Path

from confluent_kafka import (
    AcknowledgeType,
    Consumer,
    ElectionType,
    ShareConsumer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests._broker import Broker, unique_topic
from compat_tests._cluster import Cluster
from compat_tests._share import produce, require_share_apis, set_group_configs
from kcompat.group.share_state import SHARE_STATE_TOPIC

RECORDS = 300
ACKNOWLEDGED = 150  # one at a time, before the restart
BROKER_ARGS = ("--set", "share.coordinator.state.topic.num.partitions=1",
               "--set", "share.coordinator.snapshot.update.records.per.snapshot=5",
               "--set", "share.coordinator.state.topic.prune.interval.ms=200")


def state_offsets(bootstrap: str) -> tuple[int, int]:
    """The state partition's log start and high watermark."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("wm")})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(SHARE_STATE_TOPIC, 0),
                                                   timeout=10)
    finally:
        consumer.close()
    return int(low), int(high)


def state_log_start(bootstrap: str) -> int:
    return state_offsets(bootstrap)[0]


def wait_state_log_start(bootstrap: str, above: int) -> int:
    deadline = time.monotonic() + 30
    while (start := state_log_start(bootstrap)) <= above:
        assert time.monotonic() < deadline, f"the state log start stayed at {start}"
        time.sleep(0.2)
    return start


def share_consumer(bootstrap: str, group: str, topic: str) -> ShareConsumer:
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    return consumer


def acknowledge_one_by_one(bootstrap: str, group: str, topic: str, acknowledged: set[int],
                           count: int) -> None:
    """ACCEPT ``count`` more records, each in its own ShareAcknowledge (a state
    update each); what the member got beyond them is given back as it leaves."""
    goal = len(acknowledged) + count
    consumer = share_consumer(bootstrap, group, topic)
    deadline = time.monotonic() + 60
    try:
        while len(acknowledged) < goal:
            assert time.monotonic() < deadline, f"acknowledged {len(acknowledged)}"
            for m in consumer.poll(0.5):
                assert m.error() is None, m.error()
                assert m.offset() not in acknowledged, f"{m.offset()} delivered again"
                if len(acknowledged) >= goal:
                    break
                consumer.acknowledge(m, AcknowledgeType.ACCEPT)
                results = consumer.commit_sync(30)
                assert all(err is None for err in results.values()), results
                acknowledged.add(m.offset())
    finally:
        consumer.close()


def consume_the_rest(bootstrap: str, group: str, topic: str, acknowledged: set[int],
                     members_before: int) -> None:
    """Every record not acknowledged yet comes (delivered at most once more
    per member that left with it), none acknowledged comes again."""
    seen: dict[int, int] = {}
    consumer = share_consumer(bootstrap, group, topic)
    deadline = time.monotonic() + 60
    try:
        while len(seen) < RECORDS - len(acknowledged):
            assert time.monotonic() < deadline, f"got {len(seen)} of the rest"
            for m in consumer.poll(0.5):
                assert m.error() is None, m.error()
                assert m.offset() not in acknowledged, f"{m.offset()} delivered again"
                seen[m.offset()] = m.delivery_count() or 0
                consumer.acknowledge(m, AcknowledgeType.ACCEPT)
            consumer.commit_sync(30)
    finally:
        consumer.close()
    assert set(seen) == set(range(RECORDS)) - acknowledged
    assert all(count <= members_before + 1 for count in seen.values()), seen


def test_state_log_start_moves_and_a_restart_resumes_the_group(tmp_path: Path) -> None:
    broker = Broker(tmp_path, extra_args=BROKER_ARGS)
    broker.start()
    try:
        bootstrap = broker.bootstrap
        require_share_apis(bootstrap)
        topic, group, idle = unique_topic("ssc"), unique_topic("ssc-g"), unique_topic("ssc-i")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        for g in (group, idle):
            set_group_configs(bootstrap, g, {"share.auto.offset.reset": "earliest"})
        produce(bootstrap, topic, [(0, None, str(i)) for i in range(RECORDS)])

        idle_acknowledged: set[int] = set()
        acknowledge_one_by_one(bootstrap, idle, topic, idle_acknowledged, 20)
        _start, idle_end = state_offsets(bootstrap)
        acknowledged: set[int] = set()
        acknowledge_one_by_one(bootstrap, group, topic, acknowledged, ACKNOWLEDGED)
        start = wait_state_log_start(bootstrap, idle_end)  # the idle key was snapshotted

        broker.kill()
        broker.start()
        assert state_log_start(bootstrap) >= start  # the restart replayed from there

        consume_the_rest(bootstrap, group, topic, acknowledged, 1)
        consume_the_rest(bootstrap, idle, topic, idle_acknowledged, 1)
    finally:
        broker.close()


def test_a_replica_back_after_the_cut_rebuilds_from_it_and_leads(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 3, extra_args=BROKER_ARGS)
    cluster.start()
    try:
        bootstrap = cluster.bootstrap
        require_share_apis(bootstrap)
        topic, group = unique_topic("sscc"), unique_topic("sscc-g")
        cluster.create_topic(topic, 1, 3)
        set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
        produce(bootstrap, topic, [(0, None, str(i)) for i in range(RECORDS)])
        acknowledged: set[int] = set()
        acknowledge_one_by_one(bootstrap, group, topic, acknowledged, 60)
        wait_state_log_start(bootstrap, 0)

        admin = AdminClient({"bootstrap.servers": bootstrap})
        state = admin.list_topics(SHARE_STATE_TOPIC, timeout=10).topics[SHARE_STATE_TOPIC]
        preferred = state.partitions[0].replicas[0]
        _start, end = state_offsets(bootstrap)
        cluster.brokers[preferred].kill()
        live = cluster.live_bootstrap()
        acknowledge_one_by_one(live, group, topic, acknowledged, 90)
        wait_state_log_start(live, end)  # past all the killed replica has

        cluster.brokers[preferred].start()
        partition = TopicPartition(SHARE_STATE_TOPIC, 0)
        deadline = time.monotonic() + 60
        while cluster.leaders(SHARE_STATE_TOPIC).get(0) != preferred:
            assert time.monotonic() < deadline, "the preferred replica never led again"
            admin = AdminClient({"bootstrap.servers": cluster.live_bootstrap()})
            try:
                admin.elect_leaders(ElectionType.PREFERRED, [partition]).result(30)
            except Exception:  # noqa: BLE001 - not in sync yet: ask again
                time.sleep(0.5)
        consume_the_rest(cluster.live_bootstrap(), group, topic, acknowledged, 2)
    finally:
        cluster.close()


def last_records(bootstrap: str) -> dict[tuple[str, str, int], dict]:
    """Per share key, the value of its last record in the state partition's log."""
    import json

    from confluent_kafka import OFFSET_BEGINNING

    from kcompat.group.share_state import decode_key

    low, high = state_offsets(bootstrap)
    last: dict[tuple[str, str, int], dict] = {}
    if high <= low:
        return last
    # The log's start may pass the offset asked for while it is read (a
    # snapshot lets the prefix before it go): begin again at the new start,
    # which the snapshot's records lead, rather than at the end.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("rd"),
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(SHARE_STATE_TOPIC, 0, OFFSET_BEGINNING)])
    try:
        deadline = time.monotonic() + 30
        while True:
            assert time.monotonic() < deadline, "the state log was not read to its end"
            m = consumer.poll(0.5)
            if m is None or m.error() is not None:
                continue
            last[decode_key(m.key())] = json.loads(m.value())
            if m.offset() >= high - 1:
                return last
    finally:
        consumer.close()


def test_a_deleted_topics_share_state_leaves_the_log(tmp_path: Path) -> None:
    """A share group's state of a topic that is then deleted: within two
    prune intervals its key gets a ``delete`` naming the topic's id (the
    key's last record, until the prefix it pinned is dropped with it), so it
    is no longer snapshotted forever; the state of a topic that lives on
    (the same group's) stays."""
    broker = Broker(tmp_path, extra_args=BROKER_ARGS)
    broker.start()
    try:
        bootstrap = broker.bootstrap
        require_share_apis(bootstrap)
        gone, kept, group = unique_topic("ssd"), unique_topic("ssk"), unique_topic("ssd-g")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for t in (gone, kept):
            admin.create_topics([NewTopic(t, 1, 1)])[t].result(30)
            produce(bootstrap, t, [(0, None, str(i)) for i in range(10)])
        set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
        for t in (gone, kept):
            acknowledge_one_by_one(bootstrap, group, t, set(), 3)
        described = admin.describe_topics(TopicCollection([gone]))[gone].result(30)
        topic_id = str(uuid.UUID(bytes=base64.urlsafe_b64decode(str(described.topic_id) + "==")))
        assert {(group, gone, 0), (group, kept, 0)} <= set(last_records(bootstrap))
        admin.delete_topics([gone])[gone].result(30)
        deadline = time.monotonic() + 30
        while (last := last_records(bootstrap)).get((group, gone, 0), {}).get("op") not in (
                None, "delete"):
            assert time.monotonic() < deadline, f"the deleted topic's state stayed: {last}"
            time.sleep(0.3)
        if (group, gone, 0) in last:
            assert last[(group, gone, 0)] == {"op": "delete", "tid": topic_id}
        assert last[(group, kept, 0)]["op"] != "delete"
    finally:
        broker.close()
