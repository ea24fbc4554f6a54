"""A controller-only node (``process.roles=controller``) serves what Kafka 4.4's
controller listener serves, and nothing a client reads or writes through
(issue 32; before, it answered Produce, Fetch, Metadata... like a broker).

Real processes: voters 1 and 2 are brokers too, voter 3 a controller only.
On node 3: ApiVersions lists exactly the controller listener's APIs kcompat
has (``versions.CONTROLLER_APIS``, Kafka's ``apisForListener(CONTROLLER)``);
confluent-kafka bootstrapped from it alone gets no metadata and delivers
nothing (Metadata and Produce close the connection, as Kafka's "not enabled"
API does); a Fetch is INVALID_REQUEST with no topics; DescribeCluster asked
for controllers lists the three voters and the active controller, asked for
brokers it is MISMATCHED_ENDPOINT_TYPE; DescribeQuorum (kafka-python's codec)
and CreateTopics still work there. What
the cluster needs still runs through node 3: it votes, and with broker 1
killed the quorum {2, 3} commits a topic. Kafka's own answers on a
controller-only node were read from a Kafka 4.4.0 controller (the report of
the change)."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import NewTopic
from kio.schema.api_versions.v3 import request as api_versions
from kio.schema.create_topics.v7 import request as create_topics
from kio.schema.describe_cluster.v1 import request as describe_cluster
from kio.schema.fetch.v12 import request as fetch
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from compat_tests._broker import unique_topic
from compat_tests._cluster import Cluster, quorum_leader
from kcompat.cli._base import CliError
from kcompat.cli._kio import Connection
from kcompat.wire.versions import API_RANGES, CONTROLLER_APIS
from tests.integration import _elastic as el
from tests.integration._elastic import FAST_SESSIONS

pytestmark = pytest.mark.timeout(240)


def _conn(bootstrap: str) -> Connection:
    host, port = bootstrap.rsplit(":", 1)
    return Connection(host, int(port), 10)


def _fetch(topic: str) -> fetch.FetchRequest:
    return fetch.FetchRequest(
        replica_id=BrokerId(-1), max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=10)),
        min_bytes=i32(1), max_bytes=i32(1 << 20), isolation_level=i8(0), session_id=i32(0),
        session_epoch=i32(-1), forgotten_topics_data=(), rack_id="", topics=(fetch.FetchTopic(
            topic=TopicName(topic), partitions=(fetch.FetchPartition(
                partition=i32(0), fetch_offset=i64(0), log_start_offset=i64(-1),
                partition_max_bytes=i32(1 << 20)),)),))


def _describe(conn: Connection, endpoint: int) -> describe_cluster.DescribeClusterResponse:
    return conn.call(describe_cluster.DescribeClusterRequest(
        include_cluster_authorized_operations=False, endpoint_type=i8(endpoint)))


def test_a_controller_only_node_serves_the_controller_apis_only(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, extra_args=FAST_SESSIONS)
    node3 = cluster.brokers[3]
    node3.extra_args += ("--set", "process.roles=controller")
    try:
        for broker in cluster.brokers.values():
            broker.start(wait=False)
        for broker in cluster.brokers.values():
            broker.wait_ready()
        two, ctl = cluster.brokers[2].bootstrap, node3.bootstrap
        el.wait(lambda: sorted(el.admin(two).list_topics(timeout=10).brokers) == [1, 2],
                "brokers 1 and 2 (not the controller-only 3) in Metadata")
        topic = unique_topic("ctl-only")
        admin = el.admin(two)  # alive until its futures resolve
        admin.create_topics([NewTopic(topic, 1, 2)], operation_timeout=20)[topic].result(30)

        conn = _conn(ctl)
        r = conn.call(api_versions.ApiVersionsRequest(client_software_name="test",
                                                      client_software_version="1"))
        served = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in r.api_keys}
        assert served == {k: (API_RANGES[k].min_version, API_RANGES[k].max_version)
                          for k in CONTROLLER_APIS}
        r = conn.call(_fetch(topic))
        assert (r.error_code.name, r.responses) == ("invalid_request", ())
        controllers = _describe(conn, 2)
        assert controllers.error_code.name == "none"
        assert sorted(b.broker_id for b in controllers.brokers) == [1, 2, 3]
        assert controllers.controller_id == cluster.wait_for_controller()
        brokers = _describe(conn, 1)
        assert (brokers.error_code.name, brokers.brokers) == ("mismatched_endpoint_type", ())
        assert quorum_leader(ctl) == controllers.controller_id  # DescribeQuorum

        # a client API closes the connection (Kafka: "... which is not enabled")
        with pytest.raises(CliError, match="closed the connection"):
            _conn(ctl).call(_metadata_request())
        with pytest.raises(KafkaException):
            el.admin(ctl).list_topics(timeout=5)
        producer = Producer({"bootstrap.servers": ctl, "message.timeout.ms": 5000,
                             "log_level": 0})
        failed: list[object] = []
        producer.produce(topic, b"never", partition=0,
                         on_delivery=lambda err, _msg: failed.append(err))
        producer.flush(15)
        assert len(failed) == 1 and failed[0] is not None, failed

        # what the controller listener serves still works: CreateTopics sent there
        made = unique_topic("made-on-controller")
        r = _conn(ctl).call(create_topics.CreateTopicsRequest(
            validate_only=False, timeout=i32Timedelta.parse(datetime.timedelta(seconds=20)),
            topics=(create_topics.CreatableTopic(
                name=TopicName(made), num_partitions=i32(1), replication_factor=i16(2),
                assignments=(), configs=()),)))
        assert [(t.name, t.error_code.name) for t in r.topics] == [(made, "none")]
        el.wait(lambda: made in el.admin(two).list_topics(timeout=10).topics, "topic made")

        # node 3 still votes: broker 1 killed, the quorum {2, 3} commits a topic
        cluster.brokers[1].kill()
        late = unique_topic("quorum-2-3")
        # until broker 2 stops naming broker 1 (down, then fenced), a client it
        # names broker 1 to as the controller waits for a dead broker, on Kafka too
        el.wait(lambda: 1 not in el.admin(two).list_topics(timeout=10).brokers,
                "broker 1 no longer listed by broker 2")
        admin = el.admin(two)  # a fresh client: the old one may still name broker 1
        admin.create_topics([NewTopic(late, 1, 1)], operation_timeout=20)[late].result(30)
    finally:
        cluster.kill()


def _metadata_request() -> object:
    from kio.schema.metadata.v12 import request as metadata
    return metadata.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                    include_topic_authorized_operations=False)
