"""Differential: the newest API versions Apache Kafka 4.4 serves, against kcompat.

Issue 18 item 6: kcompat advertises Kafka 4.4's maxima, so clients that infer the
broker version from ApiVersions (kafka-python) see at least 4.1 and Java 4.4 clients
take their newest paths (Produce v13, Fetch v17, by topic id). Here the same raw
requests go to a reference Apache Kafka 4.4.0 and to a kcompat broker, and the
answers are compared field by field:

* ApiVersions: every API key both serve has the same maximum, except the ones in
  ``KNOWN_MAX_DIFFS`` (each a FINDINGS.md entry saying why kcompat stays lower),
  and ApiVersions v5 (KIP-1242) naming this or another cluster / node (raw frames:
  neither kafka-python nor kio 0.6.5 has v5);
* Produce v13 and Fetch v13/v16/v17/v18 by topic id (kafka-python's codec): data,
  a partition that does not exist, an id nobody knows (UNKNOWN_TOPIC_ID),
  an offset out of range; Metadata v13 by name and by an unknown id;
* ListOffsets v11 with every special timestamp (-1 .. -6);
* OffsetCommit v10 / OffsetFetch v10 by topic id (kio's codec: kafka-python's
  schemas lack v10's topic ids), with an unknown id;
* DeleteGroups v3 (kio_extra's schema: kio 0.6.5 lacks it), a group named twice,
* DescribeGroups v6 of an unknown group (GROUP_ID_NOT_FOUND), DescribeCluster v2,
  ListTransactions v2 with transactional id patterns (two open transactions).

Records are compared as "present or not", ids as "non-zero", and each broker's
answers must echo its own topic id.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import socket
import struct
import time
import uuid
from typing import Any

import pytest
from kafka.protocol.admin.cluster import DescribeClusterRequest, DescribeClusterResponse
from kafka.protocol.admin.groups import DescribeGroupsRequest, DescribeGroupsResponse
from kafka.protocol.admin.transactions import ListTransactionsRequest, ListTransactionsResponse
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kio.schema.offset_commit.v10 import request as commit_req
from kio.schema.offset_fetch.v10 import request as fetch_req
from kio.static.primitive import i32, i64

from compat_tests._broker import Broker, unique_topic
from compat_tests.java._differential import admin_create_topic, until_led
from compat_tests.java.kafka_reference import KafkaReference
from compat_tests.java.test_differential import _batch, _normalize, _run_both
from kcompat.cli._kio import Connection
from kcompat.wire.kio_extra.delete_groups_v3 import DeleteGroupsRequest
from tests.integration._raw import RawConnection

# API key -> (Kafka 4.4 max, kcompat max), each explained in FINDINGS.md (D11).
KNOWN_MAX_DIFFS: dict[int, tuple[int, int]] = {
    24: (5, 3),  # AddPartitionsToTxn v4+: broker-to-broker batches, v5: transactions V2
    26: (5, 4),  # EndTxn v5: transactions V2 (an epoch bump per transaction)
    28: (6, 4),  # TxnOffsetCommit v5: transactions V2; v6: topic ids, unknown to kio
}
GROUP = "newest-diff-group"
PD = ProduceRequest.TopicProduceData
FT = FetchRequest.FetchTopic
LT = ListOffsetsRequest.ListOffsetsTopic
UNKNOWN_ID = uuid.UUID("5f0c0b5e-0000-4000-8000-00000000abcd")


def _api_versions(bootstrap: str) -> dict[int, tuple[int, int]]:
    conn = RawConnection(bootstrap)
    try:
        r = conn.request(ApiVersionsRequest[3](client_software_name="diff",
                                               client_software_version="1"),
                         ApiVersionsResponse[3]).to_dict()
    finally:
        conn.close()
    assert r["error_code"] == 0
    return {k["api_key"]: (k["min_version"], k["max_version"]) for k in r["api_keys"]}


def _compact_string(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    data = value.encode()
    assert len(data) < 127
    return bytes([len(data) + 1]) + data


def _api_versions_v5(bootstrap: str, cluster_id: str | None, node_id: int) -> list[int]:
    """[error code, number of API keys] of an ApiVersions v5 naming a target."""
    header = struct.pack(">hhih", 18, 5, 1, 4) + b"diff" + b"\x00"
    body = (_compact_string("diff") + _compact_string("1") + _compact_string(cluster_id)
            + struct.pack(">i", node_id) + b"\x00")
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(header + body)) + header + body)
        sock.settimeout(10)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = sock.recv(65536)
            assert chunk, "connection closed"
            data += chunk
    # size, correlation id (header v0), error code, compact array length + 1
    error = struct.unpack(">h", data[8:10])[0]
    n = 0  # the array length is an unsigned varint
    for shift, byte in enumerate(data[10:15]):
        n |= (byte & 0x7F) << (7 * shift)
        if byte < 0x80:
            break
    return [error, n - 1]


def _target_checks(bootstrap: str) -> dict[str, list[int]]:
    conn = RawConnection(bootstrap)
    try:
        md = conn.request(MetadataRequest[12](topics=[], allow_auto_topic_creation=False,
                                              include_topic_authorized_operations=False),
                          MetadataResponse[12]).to_dict()
    finally:
        conn.close()
    cluster, node = md["cluster_id"], md["brokers"][0]["node_id"]
    cases = {"neither": (None, -1), "this_broker": (cluster, node),
             "other_cluster": ("AAAAAAAAAAAAAAAAAAAAAA", node), "other_node": (cluster, node + 7),
             "node_only": (None, node), "cluster_only": (cluster, -1)}
    out = {name: _api_versions_v5(bootstrap, c, n) for name, (c, n) in cases.items()}
    # the API list itself is compared at v3; here only whether there is one
    return {name: [e, int(n > 0)] for name, (e, n) in out.items()}


def _inferred_version(bootstrap: str) -> tuple[int, ...]:
    """The broker version kafka-python infers from the ApiVersions maxima."""
    from kafka.net.compat import KafkaNetClient

    client = KafkaNetClient(bootstrap_servers=bootstrap)
    try:
        return tuple(client.check_version())
    finally:
        client.close()


def _plain(value: Any) -> Any:
    """A kio entity as JSON-like data (error codes as ints, ids as strings)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value[0] if isinstance(value.value, tuple) else value.value
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return value


def _records_present(resp: dict[str, Any]) -> dict[str, Any]:
    for t in resp["responses"]:
        for p in t["partitions"]:
            recs = p.get("records")
            p["records"] = None if recs is None else len(recs) > 0
    return resp


def _wait_for_topic(conn: RawConnection, topic: str) -> dict[str, Any]:
    md: dict[str, Any] = {}
    for _ in range(100):
        md = conn.request(MetadataRequest[13](
            topics=[MetadataRequest[13].MetadataRequestTopic(topic_id=None, name=topic)],
            allow_auto_topic_creation=False, include_topic_authorized_operations=False),
            MetadataResponse[13]).to_dict()
        t = md["topics"][0]
        if t["error_code"] == 0 and t["partitions"] and \
                all(p["leader_id"] >= 0 for p in t["partitions"]):
            break
        time.sleep(0.1)
    return md


def _by_id_session(bootstrap: str, topic: str) -> dict[str, Any]:
    admin_create_topic(bootstrap, topic, 2)
    obs: dict[str, Any] = {}
    conn = RawConnection(bootstrap)
    try:
        md = _wait_for_topic(conn, topic)
        tid = uuid.UUID(md["topics"][0]["topic_id"])
        obs["metadata_v13"] = md

        def produce(topic_id: uuid.UUID, partition: int) -> dict[str, Any]:
            req = ProduceRequest[13](transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
                PD(topic_id=topic_id, partition_data=[PD.PartitionProduceData(
                    index=partition, records=_batch(3))])])
            return conn.request(req, ProduceResponse[13]).to_dict()

        obs["produce_v13"] = until_led(lambda: produce(tid, 0))
        obs["produce_v13_bad_partition"] = produce(tid, 5)
        obs["produce_v13_unknown_id"] = produce(UNKNOWN_ID, 0)
        echoed = {str(tid)} == {t["topic_id"] for k in ("produce_v13", "produce_v13_bad_partition")
                                for t in obs[k]["responses"]}

        def fetch(version: int, topic_id: uuid.UUID, partition: int, offset: int) -> Any:
            req = FetchRequest[version](
                replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                session_id=0, session_epoch=-1, topics=[FT(topic_id=topic_id, partitions=[
                    FT.FetchPartition(partition=partition, current_leader_epoch=-1,
                                      fetch_offset=offset, log_start_offset=-1,
                                      partition_max_bytes=1 << 20)])],
                forgotten_topics_data=[], rack_id="")
            return _records_present(conn.request(req, FetchResponse[version]).to_dict())

        for v in (13, 16, 17, 18):
            obs[f"fetch_v{v}"] = {
                "from_0": fetch(v, tid, 0, 0), "at_end": fetch(v, tid, 0, 3),
                "out_of_range": fetch(v, tid, 0, 50), "bad_partition": fetch(v, tid, 9, 0),
                "unknown_id": fetch(v, UNKNOWN_ID, 0, 0),
            }
            echoed = echoed and fetch(v, tid, 0, 0)["responses"][0]["topic_id"] == str(tid)
        obs["topic_id_echoed"] = echoed

        obs["metadata_v13_unknown_id"] = conn.request(MetadataRequest[13](
            topics=[MetadataRequest[13].MetadataRequestTopic(topic_id=UNKNOWN_ID, name=None)],
            allow_auto_topic_creation=False, include_topic_authorized_operations=False),
            MetadataResponse[13]).to_dict()

        def list_offsets(ts: int) -> Any:
            req = ListOffsetsRequest[11](replica_id=-1, isolation_level=0, timeout_ms=1000,
                                         topics=[LT(name=topic, partitions=[LT.ListOffsetsPartition(
                                             partition_index=0, current_leader_epoch=-1,
                                             timestamp=ts)])])
            return conn.request(req, ListOffsetsResponse[11]).to_dict()

        obs["list_offsets_v11"] = {str(ts): list_offsets(ts) for ts in (-1, -2, -3, -4, -5, -6)}
        obs.update(_group_session(conn, bootstrap, tid))
        obs["list_transactions_v2"] = _txn_session(conn, bootstrap, topic)
        obs["describe_cluster_v2"] = conn.request(DescribeClusterRequest[2](
            include_cluster_authorized_operations=False, endpoint_type=1,
            include_fenced_brokers=True), DescribeClusterResponse[2]).to_dict()
    finally:
        conn.close()
    return obs


def _group_session(conn: RawConnection, bootstrap: str, tid: uuid.UUID) -> dict[str, Any]:
    """OffsetCommit/OffsetFetch v10 (kio) and DescribeGroups v6 at the coordinator."""
    obs: dict[str, Any] = {}
    described: dict[str, Any] = {}
    for _ in range(100):  # until the coordinator has loaded __consumer_offsets
        conn.request(FindCoordinatorRequest[4](key_type=0, coordinator_keys=[GROUP]),
                     FindCoordinatorResponse[4])
        described = conn.request(DescribeGroupsRequest[6](
            groups=[GROUP + "-none"], include_authorized_operations=False),
            DescribeGroupsResponse[6]).to_dict()
        if described["groups"][0]["error_code"] not in (14, 15, 16):
            break
        time.sleep(0.2)
    obs["describe_groups_v6_unknown"] = described
    host, port = bootstrap.rsplit(":", 1)
    kconn = Connection(host, int(port), timeout_s=10.0)
    try:
        commit = commit_req.OffsetCommitRequest(
            group_id=GROUP, generation_id_or_member_epoch=i32(-1), member_id="",
            group_instance_id=None, topics=tuple(
                commit_req.OffsetCommitRequestTopic(topic_id=t, partitions=(
                    commit_req.OffsetCommitRequestPartition(
                        partition_index=i32(0), committed_offset=i64(2),
                        committed_leader_epoch=i32(-1), committed_metadata="m"),))
                for t in (tid, UNKNOWN_ID)))
        obs["offset_commit_v10"] = _plain(kconn.call(commit))
        fetch_one = fetch_req.OffsetFetchRequest(require_stable=False, groups=(
            fetch_req.OffsetFetchRequestGroup(group_id=GROUP, topics=tuple(
                fetch_req.OffsetFetchRequestTopics(topic_id=t, partition_indexes=(i32(0), i32(1)))
                for t in (tid, UNKNOWN_ID))),))
        obs["offset_fetch_v10"] = _plain(kconn.call(fetch_one))
        fetch_all = fetch_req.OffsetFetchRequest(require_stable=False, groups=(
            fetch_req.OffsetFetchRequestGroup(group_id=GROUP, topics=None),))
        obs["offset_fetch_v10_all"] = _plain(kconn.call(fetch_all))
        deleted = _plain(kconn.call(DeleteGroupsRequest(
            groups_names=(GROUP, GROUP + "-none", GROUP))))
        deleted["results"].sort(key=lambda r: r["group_id"])  # Kafka's order: by partition
        obs["delete_groups_v3"] = deleted
    finally:
        kconn.close()
    return obs


def _txn_session(conn: RawConnection, bootstrap: str, topic: str) -> dict[str, Any]:
    """ListTransactions v2 (KIP-1152) while two transactions of this topic are open."""
    from kafka import KafkaProducer

    producers = [KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{topic}-{name}")
                 for name in ("alpha-1", "beta-1")]
    try:
        for p in producers:
            p.init_transactions()
            p.begin_transaction()
            p.send(topic, b"open", partition=1)
            p.flush()

        def listed(pattern: str | None) -> Any:
            r = conn.request(ListTransactionsRequest[2](
                state_filters=[], producer_id_filters=[], duration_filter=-1,
                transactional_id_pattern=pattern), ListTransactionsResponse[2]).to_dict()
            r["transaction_states"] = sorted(  # other tests' transactions left out
                (t["transactional_id"], t["transaction_state"]) for t in r["transaction_states"]
                if t["transactional_id"].startswith(topic))
            return r

        return {"all": listed(None), "empty": listed(""), "prefix": listed(topic + "-alpha.*"),
                "part": listed("alpha"), "part_any": listed(".*alpha.*"), "invalid": listed("[")}
    finally:
        for p in producers:
            p.abort_transaction()
            p.close()


@pytest.fixture(scope="module")
def newest_obs(kafka_reference: KafkaReference, module_broker: Broker) -> dict[str, Any]:
    topic = unique_topic("newest-diff")
    got = _run_both(lambda b: _by_id_session(b, topic), kafka_reference.bootstrap,
                    module_broker.bootstrap)
    for name, broker in (("kafka", kafka_reference), ("kcompat", module_broker)):
        got[name]["api_versions"] = _api_versions(broker.bootstrap)
        got[name]["inferred_version"] = _inferred_version(broker.bootstrap)
        got[name]["api_versions_v5"] = _target_checks(broker.bootstrap)
    return got


def test_api_versions_maxima_are_kafka_44s(newest_obs: dict[str, Any]) -> None:
    kafka, kc = newest_obs["kafka"]["api_versions"], newest_obs["kcompat"]["api_versions"]
    diffs = {k: (kafka[k][1], kc[k][1]) for k in set(kafka) & set(kc) if kafka[k][1] != kc[k][1]}
    assert diffs == KNOWN_MAX_DIFFS, (
        "ApiVersions maxima differ from Kafka 4.4's (key: (kafka, kcompat)); a known "
        f"difference that is gone must leave KNOWN_MAX_DIFFS and FINDINGS.md: {diffs}")
    # the versions clients infer the broker from and take their newest paths with
    assert {k: kc[k][1] for k in (0, 1, 2, 3, 8, 9)} == {0: 13, 1: 18, 2: 11, 3: 13, 8: 10, 9: 10}


def test_api_versions_v5_checks_the_target_as_kafka(newest_obs: dict[str, Any]) -> None:
    """KIP-1242: REBOOTSTRAP_REQUIRED (129) for another cluster or node, INVALID_REQUEST
    (42) when only one of the two is named."""
    kafka, kc = newest_obs["kafka"]["api_versions_v5"], newest_obs["kcompat"]["api_versions_v5"]
    assert kc == kafka
    assert kafka["other_cluster"] == kafka["other_node"] == [129, 0]
    assert kafka["this_broker"] == kafka["neither"] == [0, 1]


def test_kafka_python_infers_the_same_broker_version(newest_obs: dict[str, Any]) -> None:
    kafka, kc = newest_obs["kafka"]["inferred_version"], newest_obs["kcompat"]["inferred_version"]
    assert kc == kafka and kc >= (4, 1), (kafka, kc)


DIFF_KEYS = ["metadata_v13", "metadata_v13_unknown_id", "produce_v13",
             "produce_v13_bad_partition", "produce_v13_unknown_id", "fetch_v13", "fetch_v16",
             "fetch_v17", "fetch_v18", "list_offsets_v11", "describe_groups_v6_unknown",
             "offset_commit_v10", "offset_fetch_v10", "offset_fetch_v10_all",
             "delete_groups_v3", "describe_cluster_v2", "list_transactions_v2",
             "topic_id_echoed"]


@pytest.mark.parametrize("key", DIFF_KEYS)
def test_answers_by_topic_id_are_kafkas(newest_obs: dict[str, Any], key: str) -> None:
    kafka, kc = _normalize(newest_obs["kafka"][key]), _normalize(newest_obs["kcompat"][key])
    assert kc == kafka, (f"{key} differs\n  kafka  : {json.dumps(kafka, default=str)}\n"
                         f"  kcompat: {json.dumps(kc, default=str)}")


def test_the_comparison_hit_the_errors(newest_obs: dict[str, Any]) -> None:
    """Worth something only if the bad requests really were refused, as Kafka does."""
    k = newest_obs["kafka"]
    assert k["topic_id_echoed"] is True

    def pcode(key: str) -> int:
        return int(k[key]["responses"][0]["partition_responses"][0]["error_code"])

    assert (pcode("produce_v13"), pcode("produce_v13_bad_partition"),
            pcode("produce_v13_unknown_id")) == (0, 3, 100)
    f = {n: r["responses"][0]["partitions"][0]["error_code"] for n, r in k["fetch_v17"].items()}
    assert f == {"from_0": 0, "at_end": 0, "out_of_range": 1, "bad_partition": 3,
                 "unknown_id": 100}
    assert k["metadata_v13_unknown_id"]["topics"][0]["error_code"] == 100
    assert k["describe_groups_v6_unknown"]["groups"][0]["error_code"] == 69
    assert [r["error_code"] for r in k["delete_groups_v3"]["results"]] == [0, 69]
    commit = k["offset_commit_v10"]["topics"]
    assert [t["partitions"][0]["error_code"] for t in commit] == [100, 0]  # unknown id first
    fetched = k["offset_fetch_v10"]["groups"][0]["topics"]
    assert [p["committed_offset"] for p in fetched[0]["partitions"]] == [2, -1]
    assert [p["error_code"] for p in fetched[1]["partitions"]] == [100, 100]
    lo = {ts: r["topics"][0]["partitions"][0]["offset"] for ts, r in k["list_offsets_v11"].items()}
    assert lo == {"-1": 3, "-2": 0, "-3": 2, "-4": 0, "-5": -1, "-6": -1}
    lt = {n: [t[0].rsplit("-", 2)[-2] for t in r["transaction_states"]]
          for n, r in k["list_transactions_v2"].items()}
    # the whole id must match (Java's Matcher.matches), a bad pattern is error 128
    assert (lt["all"], lt["prefix"], lt["part"], lt["part_any"]) == (
        ["alpha", "beta"], ["alpha"], [], ["alpha"])
    assert k["list_transactions_v2"]["invalid"]["error_code"] == 128
