"""KIP-951 current-leader hints on a 3-broker cluster (issue 18 item 6).

A Produce (v10+) or Fetch (v16+) that reaches a broker which is not the
partition's leader is answered NOT_LEADER_OR_FOLLOWER carrying the current
leader's id and epoch, and the response lists that leader's endpoint, so the
client moves without a Metadata round trip; older versions carry no hint. The
requests are written with kafka-python's codec (Produce v13 and Fetch v18 by
topic id), sent to the two brokers of the session's rf3 cluster that do not
hold the partition (a topic of replication factor 1): as in Kafka, a
follower serves a consumer's Fetch v11+ itself (KIP-392,
``test_fetch_at_leaders``), so only a broker without a replica answers a
Fetch with the hint.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

from compat_tests._deployment import Deployment
from compat_tests.java.test_differential import _batch
from tests.integration._raw import RawConnection

PD = ProduceRequest.TopicProduceData
FT = FetchRequest.FetchTopic
NOT_LEADER = 6


def _metadata(conn: RawConnection, topic: str) -> Any:
    return conn.request(MetadataRequest[12](
        topics=[MetadataRequest[12].MetadataRequestTopic(topic_id=None, name=topic)],
        allow_auto_topic_creation=False, include_topic_authorized_operations=False),
        MetadataResponse[12]).to_dict()


def _until_known(conn: RawConnection, topic: str, leader: int) -> None:
    """A broker learns a new topic when it applies the metadata record, a moment
    after the one that answered wait_for_leaders (before, it answers
    UNKNOWN_TOPIC_OR_PARTITION, as Kafka's brokers do): until its Metadata
    names ``leader``."""
    deadline = time.monotonic() + 15
    while True:
        parts = _metadata(conn, topic)["topics"][0]["partitions"]
        if parts and parts[0]["leader_id"] == leader:
            return
        assert time.monotonic() < deadline, f"{topic} never known with leader {leader}"
        time.sleep(0.05)


def _produce(conn: RawConnection, version: int, topic: str, tid: uuid.UUID) -> Any:
    key = {"topic_id": tid} if version >= 13 else {"name": topic}
    req = ProduceRequest[version](transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        PD(**key, partition_data=[PD.PartitionProduceData(index=0, records=_batch(1))])])
    r = conn.request(req, ProduceResponse[version]).to_dict()
    return r["responses"][0]["partition_responses"][0], r.get("node_endpoints")


def _fetch(conn: RawConnection, version: int, topic: str, tid: uuid.UUID) -> Any:
    key = {"topic_id": tid} if version >= 13 else {"topic": topic}
    req = FetchRequest[version](
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, topics=[FT(**key, partitions=[FT.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
            partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")
    r = conn.request(req, FetchResponse[version]).to_dict()
    return r["responses"][0]["partitions"][0], r.get("node_endpoints")


@pytest.mark.parametrize("sbroker", ["rf3"], indirect=True)
def test_not_leader_answers_name_the_current_leader(sbroker: Deployment, topic: str) -> None:
    cluster = sbroker.cluster
    assert cluster is not None
    cluster.create_topic(topic, 1, 1)
    cluster.wait_for_leaders(topic, 1)
    leader = cluster.leaders(topic)[0]
    conn = RawConnection(cluster.brokers[leader].bootstrap)
    try:
        _until_known(conn, topic, leader)
        md = _metadata(conn, topic)
    finally:
        conn.close()
    part = md["topics"][0]["partitions"][0]
    assert part["leader_id"] == leader
    tid = uuid.UUID(md["topics"][0]["topic_id"])
    hint = {"leader_id": leader, "leader_epoch": part["leader_epoch"]}
    endpoint = [{k: b[k] for k in ("node_id", "host", "port", "rack")}
                for b in md["brokers"] if b["node_id"] == leader]
    assert endpoint
    for node, follower in cluster.brokers.items():
        if node == leader:
            continue
        conn = RawConnection(follower.bootstrap)
        try:
            _until_known(conn, topic, leader)
            for version in (10, 13):
                p, endpoints = _produce(conn, version, topic, tid)
                assert (p["error_code"], p["current_leader"], endpoints) == (
                    NOT_LEADER, hint, endpoint), (node, version)
            p, endpoints = _produce(conn, 9, topic, tid)  # before KIP-951: no hint
            assert (p["error_code"], "current_leader" in p, endpoints) == (NOT_LEADER, False, None)
            for version in (16, 18):
                p, endpoints = _fetch(conn, version, topic, tid)
                assert (p["error_code"], p["current_leader"], endpoints) == (
                    NOT_LEADER, hint, endpoint), (node, version)
            p, endpoints = _fetch(conn, 12, topic, tid)  # Fetch hints from v16 only
            assert p["error_code"] == NOT_LEADER and endpoints is None
            assert p["current_leader"] in (None, {"leader_id": -1, "leader_epoch": -1})
        finally:
            conn.close()
