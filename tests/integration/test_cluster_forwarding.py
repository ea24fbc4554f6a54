"""Admin requests on any broker of a 3-broker cluster of real processes, as on
Apache Kafka 4 (KIP-590): a broker that is not the controller takes CreateTopics
and DeleteTopics and forwards them to the active controller, asking again while
the controller moves, so clients never see NOT_CONTROLLER (41) for them; and
Metadata's ``controller_id`` is a random live broker (Kafka's
``getRandomAliveBrokerId``), never -1 while brokers live.

Before: a non-controller answered NOT_CONTROLLER, and Metadata named the Raft
leader, or -1 while a broker knew none (a pre-candidate for a moment), so
confluent-kafka's AdminClient failed topic creation under load right after a
cluster started ("This is not the correct controller for this cluster.").

Requests are sent to one chosen broker over a socket with kafka-python's codec
(``tests.integration._raw``), so the broker that receives them is known.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from kafka.protocol.admin import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from compat_tests._broker import unique_topic
from compat_tests._cluster import Cluster, consume_all, diagnostics
from tests.integration._raw import RawConnection
from tests.integration.test_quota_enforcement import set_quota

OK, UNKNOWN_TOPIC, NOT_CONTROLLER = 0, 3, 41
PARTITIONS = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("forwarding"))
    try:
        yield c.start()
    finally:
        c.kill()  # nothing to keep: no graceful shutdown


def _create_request(topic: str, timeout_ms: int = 20_000, validate_only: bool = False,
                    replication: int = 3) -> CreateTopicsRequest:
    t = CreateTopicsRequest[7].CreatableTopic
    return CreateTopicsRequest[7](
        topics=[t(name=topic, num_partitions=PARTITIONS, replication_factor=replication,
                  assignments=[], configs=[t.CreatableTopicConfig(name="retention.ms",
                                                                  value="3600000")])],
        timeout_ms=timeout_ms, validate_only=validate_only)


def _create(bootstrap: str, topic: str, **kw: object) -> object:
    conn = RawConnection(bootstrap, timeout=40)
    try:
        return conn.request(_create_request(topic, **kw),  # type: ignore[arg-type]
                            CreateTopicsResponse[7]).topics[0]
    finally:
        conn.close()


def _metadata(bootstrap: str, topic: str) -> tuple[int, int, int]:
    """(topic error, partition count, controller id) from the broker at ``bootstrap``."""
    req = MetadataRequest[8](
        topics=[MetadataRequest[8].MetadataRequestTopic(name=topic)],
        allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False)
    conn = RawConnection(bootstrap)
    try:
        md = conn.request(req, MetadataResponse[8])
    finally:
        conn.close()
    t = md.topics[0]
    return t.error_code, len(t.partitions), md.controller_id


def _usable(cluster: Cluster, topic: str) -> None:
    """A record per partition acknowledged by all replicas, and read back."""
    cluster.wait_for_leaders(topic, PARTITIONS)
    producer = Producer({"bootstrap.servers": cluster.live_bootstrap(), "acks": "all",
                         "log_level": 0})
    failed: list[str] = []
    for p in range(PARTITIONS):
        producer.produce(topic, f"{topic}-{p}".encode(), partition=p, on_delivery=lambda e, _m:
                         failed.append(str(e)) if e is not None else None)
    assert producer.flush(30) == 0 and not failed, failed
    got = consume_all(cluster.live_bootstrap(), topic, PARTITIONS, timeout_s=30)
    assert got == {p: [f"{topic}-{p}".encode()] for p in range(PARTITIONS)}, got


def test_create_and_delete_topics_on_every_non_controller(cluster: Cluster) -> None:
    with diagnostics(cluster):
        controller = cluster.wait_for_controller()
        for node in (n for n in cluster.brokers if n != controller):
            bootstrap = cluster.brokers[node].bootstrap
            probe = unique_topic(f"validate-{node}")
            r = _create(bootstrap, probe, validate_only=True)
            assert (r.error_code, r.num_partitions, r.replication_factor) == (OK, PARTITIONS, 3)
            assert _metadata(bootstrap, probe)[0] == UNKNOWN_TOPIC  # validate_only made nothing

            topic = unique_topic(f"forwarded-{node}")
            r = _create(bootstrap, topic)
            assert (r.error_code, r.error_message) == (OK, None), (node, r)
            assert (r.num_partitions, r.replication_factor) == (PARTITIONS, 3)
            assert r.topic_id not in (None, uuid.UUID(int=0))
            assert ("retention.ms", "3600000") in {(c.name, c.value) for c in r.configs}
            # the receiving broker answered once its own image has the topic
            assert _metadata(bootstrap, topic)[:2] == (OK, PARTITIONS)
            again = _create(bootstrap, topic)
            assert again.error_code == 36, again  # TOPIC_ALREADY_EXISTS, not a second topic
            _usable(cluster, topic)

            conn = RawConnection(bootstrap, timeout=40)
            try:
                deleted = conn.request(DeleteTopicsRequest[6](
                    topics=[DeleteTopicsRequest[6].DeleteTopicState(name=topic, topic_id=None)],
                    timeout_ms=20_000), DeleteTopicsResponse[6]).responses[0]
            finally:
                conn.close()
            assert (deleted.error_code, deleted.topic_id) == (OK, r.topic_id), deleted
            assert _metadata(bootstrap, topic)[0] == UNKNOWN_TOPIC


def _until_quota_known(bootstrap: str, client_id: str) -> None:
    """Until the broker at ``bootstrap`` describes a quota of ``client_id`` (it
    applies the committed record a moment after the controller)."""
    R = DescribeClientQuotasRequest
    req = R[1](components=[R.ComponentData(entity_type="client-id", match_type=0,
                                           match=client_id)], strict=False)
    deadline = time.monotonic() + 15
    while True:
        conn = RawConnection(bootstrap)
        try:
            entries = conn.request(req, DescribeClientQuotasResponse[1]).entries
        finally:
            conn.close()
        if entries:
            return
        assert time.monotonic() < deadline, f"{bootstrap} never learnt {client_id}'s quota"
        time.sleep(0.05)


def test_mutation_quota_on_a_non_controller(cluster: Cluster) -> None:
    """KIP-599 at a broker that forwards its creations: a client id with
    controller_mutation_rate=0.1 (a bucket of 1.1 partitions) creates 12 at once,
    then is refused THROTTLING_QUOTA_EXCEEDED (89) with a throttle; the topic
    that went through exists on every broker; another client id is not refused.
    The rate is low enough that the bucket, taken to -10.9, is still below zero
    at the second request however long the first creation took (at rate 1 it
    was -1, refilled in 1 s: a loaded CI machine took longer and the second was
    let through)."""
    with diagnostics(cluster):
        controller = cluster.wait_for_controller()
        node = next(n for n in cluster.brokers if n != controller)
        bootstrap = cluster.brokers[node].bootstrap
        client = f"mutq-{uuid.uuid4().hex[:8]}"
        set_quota(cluster.brokers[controller].bootstrap, client, "controller_mutation_rate", 0.1)
        t = CreateTopicsRequest[7].CreatableTopic

        def create(topic: str, partitions: int, client_id: str) -> CreateTopicsResponse:
            conn = RawConnection(bootstrap, timeout=40, client_id=client_id)
            try:
                return conn.request(CreateTopicsRequest[7](
                    topics=[t(name=topic, num_partitions=partitions, replication_factor=3,
                              assignments=[], configs=[])], timeout_ms=20_000,
                    validate_only=False), CreateTopicsResponse[7])
            finally:
                conn.close()
        _until_quota_known(bootstrap, client)
        big, refused, other = (unique_topic(f"mutq-{k}") for k in ("big", "refused", "other"))
        r = create(big, 12, client)  # a full bucket: taken below zero, not refused
        assert (r.topics[0].error_code, r.throttle_time_ms) == (OK, 0), r
        r = create(refused, 1, client)
        assert r.topics[0].error_code == 89 and r.throttle_time_ms > 0, r
        assert _metadata(bootstrap, refused)[0] == UNKNOWN_TOPIC
        for b in cluster.brokers.values():
            assert _metadata(b.bootstrap, big)[:2] == (OK, 12)
        assert create(other, 1, "some-other-client").topics[0].error_code == OK


def test_metadata_names_a_random_live_broker_as_controller(cluster: Cluster) -> None:
    """Kafka 4 brokers answer ``controller_id`` with a random unfenced broker,
    not the metadata leader; clients send admin requests there."""
    seen = [_metadata(b.bootstrap, "__none__")[2]
            for b in cluster.brokers.values() for _ in range(12)]
    assert set(seen) <= set(cluster.brokers), seen
    assert len(set(seen)) >= 2, seen  # 36 draws from 3 brokers: all alike has p < 1e-16


def test_create_topics_while_the_controller_is_killed(cluster: Cluster) -> None:
    """A CreateTopics in flight when the controller dies (kill -9), and one
    that arrives right after, both succeed once a new controller is elected
    (the broker asks again within the request's timeout), never NOT_CONTROLLER.
    Last in this module: it leaves the cluster one broker short."""
    with diagnostics(cluster):
        controller = cluster.wait_for_controller()
        first, second = (n for n in cluster.brokers if n != controller)
        before, after = unique_topic("before-kill"), unique_topic("after-kill")
        in_flight = RawConnection(cluster.brokers[first].bootstrap, timeout=40)
        try:
            cid = in_flight.send(_create_request(before))
            cluster.brokers[controller].kill()
            killed = time.monotonic()
            r_after = _create(cluster.brokers[second].bootstrap, after)
            got, response = in_flight.recv(CreateTopicsResponse[7])
            assert got == cid
            r_before = response.topics[0]
        finally:
            in_flight.close()
        print(f"answers {time.monotonic() - killed:.2f} s after the kill: "
              f"{r_before.error_code} {r_after.error_code}")
        for r in (r_before, r_after):
            assert r.error_code != NOT_CONTROLLER, r
            assert (r.error_code, r.num_partitions) == (OK, PARTITIONS), r
        new_controller = cluster.wait_for_controller()
        assert new_controller != controller
        for topic in (before, after):
            _usable(cluster, topic)
