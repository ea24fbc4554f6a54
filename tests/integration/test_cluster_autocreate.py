"""Auto-created topics on a 3-broker cluster of real processes, at replication
factor 3: Metadata never shows a new topic whose partition has no leader yet.

In Kafka the controller names a new partition's leader in the record that
creates it, so once a broker knows the topic it knows the leaders; while the
topic is being created, Metadata answers the topic LEADER_NOT_AVAILABLE and
clients retry after ``retry.backoff.ms``. Here a new partition elects its first
leader a moment after the record is applied (its first replica campaigns), and
Metadata used to answer the topic in that moment with its partition leaderless
(leader -1, partition error LEADER_NOT_AVAILABLE). Clients treat that state
differently from a topic being created: librdkafka parks the records on its
internal broker and asks again on its 1 s topic scan, so confluent-kafka's
first produce to an auto-created topic took 1.0 s against 3 brokers where a
single broker (whose lone replica leads at once) answers in 0.05 s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from compat_tests._broker import unique_topic
from compat_tests._cluster import Cluster
from tests.integration._raw import RawConnection

LEADER_NOT_AVAILABLE = 5
VERSION = 8


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("autocreate"))
    try:
        yield c.start()
    finally:
        c.close()


def _metadata(conn: RawConnection, topic: str) -> tuple[int, list[tuple[int, int, int]]]:
    """(topic error, [(partition, error, leader)]) for ``topic``, auto-creating it."""
    req = MetadataRequest[VERSION](
        topics=[MetadataRequest[VERSION].MetadataRequestTopic(name=topic)],
        allow_auto_topic_creation=True, include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False)
    t = conn.request(req, MetadataResponse[VERSION]).topics[0]
    return t.error_code, [(p.partition_index, p.error_code, p.leader_id) for p in t.partitions]


@pytest.mark.parametrize("entry", [1, 2, 3])
def test_metadata_names_no_leaderless_partition_of_a_new_topic(cluster: Cluster,
                                                               entry: int) -> None:
    """Metadata polled as fast as it answers from the moment a client asks for
    a new topic: every answer is the topic-level LEADER_NOT_AVAILABLE of a topic
    being created or the topic with a leader for each partition, never the
    topic with a leaderless partition (before the fix: 76-252 such answers in
    a row per topic); and the leader is known within a bound that rules out
    any time-out wait."""
    topic = unique_topic("autocreate")
    conn = RawConnection(cluster.brokers[entry].bootstrap)
    answers: list[tuple[int, list[tuple[int, int, int]]]] = []
    started = time.monotonic()
    try:
        while time.monotonic() - started < 10.0:
            answer = _metadata(conn, topic)
            answers.append(answer)
            error, parts = answer
            if error == 0 and parts and all(leader >= 0 for _p, _e, leader in parts):
                break
    finally:
        conn.close()
    took = time.monotonic() - started
    print(f"broker {entry}: {len(answers)} Metadata round trips in {took:.3f} s")
    leaderless = [a for a in answers if a[0] == 0 and any(ldr < 0 for _p, _e, ldr in a[1])]
    assert not leaderless, (f"Metadata from broker {entry} named {topic} with a leaderless "
                            f"partition {len(leaderless)} time(s), e.g. {leaderless[0]}")
    assert all(e in (0, LEADER_NOT_AVAILABLE) for e, _p in answers), answers
    final_error, final_parts = answers[-1]
    assert final_error == 0 and [p for p, _e, _l in final_parts] == [0], answers[-1]
    assert took < 3.0, f"the new topic had no leader after {took:.1f} s"


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.mark.parametrize("acks", ["1", "all"])
def test_confluent_first_produce_to_auto_created_topic(cluster: Cluster, acks: str) -> None:
    """librdkafka's first produce to a new topic through a broker that is not
    the controller: it learns the topic with its leader from Metadata alone,
    never parks the record on a leaderless partition (which it would only ask
    about again on its 1 s topic scan), and the record is delivered."""
    from confluent_kafka import Producer

    controller = cluster.wait_for_controller()
    entry = next(n for n in cluster.brokers if n != controller)
    topic = unique_topic("autocreate-ck")
    lines = _Lines()
    logger = logging.getLogger(f"rdkafka-{topic}")
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    producer = Producer({"bootstrap.servers": cluster.brokers[entry].bootstrap, "acks": acks,
                         "debug": "metadata,topic"}, logger=logger)
    producer.list_topics(timeout=10)  # connected: the timing below is the produce's
    delivered: list[object] = []
    started = time.monotonic()
    producer.produce(topic, b"first", on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(30) == 0
    took = time.monotonic() - started
    print(f"acks={acks}: first produce to an auto-created topic delivered in {took:.3f} s")
    assert delivered == [None], delivered
    leaderless = [line for line in lines.lines if topic in line and "Leader -1" in line]
    assert not leaderless, f"librdkafka saw {topic} without a leader: {leaderless[:2]}"
    assert took < 3.0  # no wait for a time-out (librdkafka's topic scan is 1 s)
