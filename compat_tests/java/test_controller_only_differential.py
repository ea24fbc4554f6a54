"""Differential: a controller-only node (``process.roles=controller``, a quorum
of one) of Apache Kafka 4.4 against kcompat's (issue 32).

Kafka's controller-only node listens on its controller listener alone and
serves the APIs of that listener type only; kcompat's has one listener and
serves the same (``versions.CONTROLLER_APIS``). The same raw requests go to
both: ApiVersions (the same APIs at the same versions, less the ones kcompat
carries as its own inter-broker frames or does not have, ``KAFKA_ONLY``), a
consumer's Fetch (INVALID_REQUEST, no topics), DescribeCluster for brokers
(MISMATCHED_ENDPOINT_TYPE, Kafka's message) and for controllers (the node
itself, the active controller), Metadata and Produce (the connection closed).
Kafka's own ``kafka-metadata-quorum --bootstrap-controller`` (an Admin client
in controller mode, KIP-919) describes both quorums.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.api_versions.v3 import request as api_versions
from kio.schema.describe_cluster.v1 import request as describe_cluster
from kio.schema.fetch.v12 import request as fetch
from kio.schema.metadata.v12 import request as metadata
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from compat_tests._broker import Broker, running
from compat_tests.java._toolbatch import METADATA_QUORUM, run_tools
from compat_tests.java.kafka_reference import KafkaReference
from kcompat.cli._base import CliError
from kcompat.cli._kio import Connection

pytestmark = pytest.mark.timeout(180)

#: Kafka's controller-listener APIs kcompat does not answer as APIs: the Raft,
#: registration, heartbeat, AlterPartition and forwarding traffic (kcompat's own
#: inter-broker frames), delegation tokens, UpdateFeatures, AllocateProducerIds,
#: AssignReplicasToDirs, UpdateRaftVoter and UnregisterController
KAFKA_ONLY = {38, 39, 40, 41, 52, 53, 54, 56, 57, 58, 59, 62, 63, 67, 70, 73, 82, 94}


class KafkaController(KafkaReference):
    """Kafka 4.4 with ``process.roles=controller``: its controller listener only."""

    def properties(self) -> dict[str, str]:
        return {"process.roles": "controller", "node.id": str(self.node_id),
                "controller.quorum.voters": f"{self.node_id}@{self.host}:{self.port}",
                "listeners": f"CONTROLLER://{self.host}:{self.port}",
                "controller.listener.names": "CONTROLLER",
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
                "log.dirs": str(self.data_dir)}


@pytest.fixture(scope="module")
def kafka_controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with KafkaController(Path(tmp_path_factory.mktemp("kafka-controller"))) as ref:
        yield ref.bootstrap


@pytest.fixture(scope="module")
def kcompat_controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    broker = Broker(tmp_path_factory.mktemp("kcompat-controller"),
                    extra_args=("--set", "process.roles=controller"))
    for b in running(broker):
        yield b.bootstrap


def _conn(bootstrap: str) -> Connection:
    host, port = bootstrap.rsplit(":", 1)
    return Connection(host, int(port), 10)


def _fetch() -> Any:
    return fetch.FetchRequest(
        replica_id=BrokerId(-1), max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=10)),
        min_bytes=i32(1), max_bytes=i32(1 << 20), isolation_level=i8(0), session_id=i32(0),
        session_epoch=i32(-1), forgotten_topics_data=(), rack_id="", topics=(fetch.FetchTopic(
            topic=TopicName("t"), partitions=(fetch.FetchPartition(
                partition=i32(0), fetch_offset=i64(0), log_start_offset=i64(-1),
                partition_max_bytes=i32(1 << 20)),)),))


def observe(bootstrap: str) -> dict[str, Any]:
    conn = _conn(bootstrap)
    obs: dict[str, Any] = {}
    r = conn.call(api_versions.ApiVersionsRequest(client_software_name="t",
                                                  client_software_version="1"))
    obs["api_versions"] = {int(k.api_key): (int(k.min_version), int(k.max_version))
                           for k in r.api_keys}
    r = conn.call(_fetch())
    obs["fetch"] = (r.error_code.name, r.session_id, r.responses)
    for endpoint in (1, 2):
        r = conn.call(describe_cluster.DescribeClusterRequest(
            include_cluster_authorized_operations=False, endpoint_type=i8(endpoint)))
        obs[f"describe_cluster_{endpoint}"] = (
            r.error_code.name, r.error_message, bool(r.cluster_id), r.controller_id,
            [(b.broker_id, f"{b.host}:{b.port}" == bootstrap) for b in r.brokers])
    try:
        conn.call(metadata.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                           include_topic_authorized_operations=False))
        obs["metadata"] = "answered"
    except CliError as e:
        obs["metadata"] = "closed" if "closed the connection" in str(e) else str(e)
    [status] = run_tools([[METADATA_QUORUM, "--bootstrap-controller", bootstrap,
                           "describe", "--status"]])
    obs["metadata_quorum_tool"] = (status.code, "LeaderId:" in status.stdout, status.stderr[:300])
    return obs


@pytest.fixture(scope="module")
def answers(kafka_controller: str, kcompat_controller: str) -> dict[str, dict[str, Any]]:
    return {"kafka": observe(kafka_controller), "kcompat": observe(kcompat_controller)}


def test_api_versions_list_the_controllers_apis(answers: dict[str, dict[str, Any]]) -> None:
    kafka, ours = answers["kafka"]["api_versions"], answers["kcompat"]["api_versions"]
    assert ours == {k: v for k, v in kafka.items() if k not in KAFKA_ONLY}
    assert set(kafka) >= KAFKA_ONLY


@pytest.mark.parametrize("step", ["fetch", "describe_cluster_1", "describe_cluster_2",
                                  "metadata", "metadata_quorum_tool"])
def test_step_matches_kafka(answers: dict[str, dict[str, Any]], step: str) -> None:
    assert answers["kcompat"][step] == answers["kafka"][step], step
