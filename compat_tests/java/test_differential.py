"""Differential tests: the same scenario against Apache Kafka and against kcompat.

Two scenarios, each run against a reference Apache Kafka (``KafkaReference``, KRaft
single node) and a kcompat broker process, and their observations compared:

* the Java ``AdminScenario`` (Admin client + default idempotent producer + consumers):
  offsets assigned, ListOffsets answers (earliest, latest, by timestamp incl. none
  found, max timestamp), error names/codes of bad requests, topic description,
  DescribeConfigs of a topic and of the broker;
* raw requests written with kafka-python's protocol classes (an independent codec):
  Metadata v12 / v4 and DescribeTopicPartitions (incl. its cursor) answers field by
  field, Fetch / ListOffsets / Produce error codes.

Differences that are understood are listed in ``KNOWN`` with their FINDINGS.md id.
A known difference that disappears fails too, so FINDINGS.md stays true.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from kafka.protocol.admin.topics import DescribeTopicPartitionsRequest as DTPRequest
from kafka.protocol.admin.topics import DescribeTopicPartitionsResponse as DTPResponse
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder

from compat_tests._broker import Broker, unique_topic
from compat_tests.java._differential import admin_create_topic, on_both, until_led
from compat_tests.java.conftest import PKG, run_java
from compat_tests.java.kafka_reference import KafkaReference
from tests.integration._raw import RawConnection

# Differences seen and understood (FINDINGS.md has the details). step -> finding id.
KNOWN_JAVA_STEPS: dict[str, str] = {}
# Topic configs Kafka 4.4 lists that kcompat does not know (FINDINGS.md D3: none left).
KNOWN_MISSING_TOPIC_CONFIGS: set[str] = set()
# kcompat's own broker keys (not Kafka keys): allowed in its DescribeConfigs answer,
# besides every "kcompat.*" key (FINDINGS.md D8).
KCOMPAT_ONLY_BROKER_KEYS = {"admin.host", "admin.port", "admin.tls", "admin.token", "advertised.host",
                            "host", "port"}
# (Kafka type, kcompat type) of broker keys whose ConfigType differs (FINDINGS.md D9: none left).
KNOWN_BROKER_TYPE_DIFFS: dict[str, tuple[str, str]] = {}
# Broker keys whose default value both must report identically.
SAME_BROKER_DEFAULTS = [
    "message.max.bytes", "log.segment.bytes", "log.retention.bytes", "num.partitions",
    "default.replication.factor", "auto.create.topics.enable", "delete.topic.enable",
    "compression.type", "log.message.timestamp.type", "log.index.interval.bytes",
    "offsets.topic.num.partitions", "group.min.session.timeout.ms",
    "group.max.session.timeout.ms", "log.cleanup.policy", "min.insync.replicas",
]


def _run_both(fn: Any, kafka: str, kcompat: str) -> dict[str, Any]:
    return on_both({"kafka": kafka, "kcompat": kcompat}, fn)


@pytest.fixture(scope="module")
def java_obs(kafka_reference: KafkaReference, module_broker: Broker,
             clients_cp: str) -> dict[str, dict[str, Any]]:
    def scenario(bootstrap: str) -> dict[str, Any]:
        run = run_java(clients_cp, f"{PKG}.AdminScenario", bootstrap, "diff", timeout=180)
        assert run.returncode == 0, run.explain()
        return run.json_lines()[-1]["observations"]

    return _run_both(scenario, kafka_reference.bootstrap, module_broker.bootstrap)


def _steps(obs: dict[str, Any]) -> list[str]:
    return [k for k in obs if not k.startswith("describe_configs_")]


def test_java_scenario_observes_the_same(java_obs: dict[str, dict[str, Any]]) -> None:
    kafka, kc = java_obs["kafka"], java_obs["kcompat"]
    assert _steps(kafka) == _steps(kc)
    diffs = {s: (kafka[s], kc[s]) for s in _steps(kafka) if kafka[s] != kc[s]}
    unexpected = {s: d for s, d in diffs.items() if s not in KNOWN_JAVA_STEPS}
    assert not unexpected, "new differences (kafka, kcompat):\n" + "\n".join(
        f"{s}:\n  kafka  : {json.dumps(a)}\n  kcompat: {json.dumps(b)}"
        for s, (a, b) in unexpected.items())
    gone = set(KNOWN_JAVA_STEPS) - set(diffs)
    assert not gone, f"known differences no longer seen, update FINDINGS.md: {sorted(gone)}"


def test_java_describe_topics_uses_describe_topic_partitions(
        java_obs: dict[str, dict[str, Any]]) -> None:
    """Java's Admin.describeTopics sends DescribeTopicPartitions (key 75) when the
    broker advertises it, and falls back to Metadata, which has no ELR fields,
    otherwise: non-null ELR lists show it used key 75 on both (FINDINGS.md D1)."""
    for broker in ("kafka", "kcompat"):
        parts = java_obs[broker]["describe_main"]["partitions"]
        assert parts and all((p["elr"], p["last_known_elr"]) == (0, 0) for p in parts), broker


def test_topic_describe_configs_same_shape(java_obs: dict[str, dict[str, Any]]) -> None:
    kafka = java_obs["kafka"]["describe_configs_topic"]
    kc = java_obs["kcompat"]["describe_configs_topic"]
    assert set(kc) - set(kafka) == set(), "kcompat lists topic configs Kafka does not"
    assert set(kafka) - set(kc) == KNOWN_MISSING_TOPIC_CONFIGS
    diffs = {}
    for name in sorted(set(kafka) & set(kc)):
        a, b = dict(kafka[name]), dict(kc[name])
        if a != b:
            diffs[name] = (a, b)
    assert not diffs, json.dumps(diffs, indent=1)


def test_broker_describe_configs_same_types_and_defaults(
        java_obs: dict[str, dict[str, Any]]) -> None:
    kafka = java_obs["kafka"]["describe_configs_broker"]
    kc = java_obs["kcompat"]["describe_configs_broker"]
    # kcompat's own keys: "kcompat.*" and the extensions' "kc.*" (docs/extensions.md)
    extra = {k for k in set(kc) - set(kafka) if not k.startswith(("kcompat.", "kc."))}
    assert extra <= KCOMPAT_ONLY_BROKER_KEYS, extra
    assert set(kafka) - set(kc) == set(), "Kafka lists broker keys kcompat does not (D8)"
    common = set(kc) & set(kafka)
    assert len(common) >= 300, len(common)
    shape = ("type", "sensitive", "read_only")
    bad_types = {n: (kafka[n]["type"], kc[n]["type"]) for n in common
                 if [kafka[n][f] for f in shape] != [kc[n][f] for f in shape]}
    assert bad_types == KNOWN_BROKER_TYPE_DIFFS, (
        "broker config types differ from Kafka's (or a known difference was fixed: "
        f"update KNOWN_BROKER_TYPE_DIFFS and FINDINGS.md): {bad_types}")
    for name in SAME_BROKER_DEFAULTS:
        assert kc[name]["value"] == kafka[name]["value"], (name, kafka[name], kc[name])


# ---------------------------------------------------------------------------------------
# Raw requests through kafka-python's protocol classes.

FT = FetchRequest.FetchTopic
LT = ListOffsetsRequest.ListOffsetsTopic
PD = ProduceRequest.TopicProduceData
BASE_TS = (int(time.time() * 1000) - 3_600_000) // 1000 * 1000


def _batch(n: int, value_size: int = 10, ts_step: int = 1000) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 23)
    for i in range(n):
        b.append(i, timestamp=BASE_TS + i * ts_step, key=b"k%d" % i, value=b"v" * value_size,
                 headers=[])
    return bytes(b.build())


def _normalize(value: Any) -> Any:
    """Drop what legitimately differs between two brokers: ports, ids, messages, throttle."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in ("port", "throttle_time_ms"):
                continue
            if k == "cluster_id":
                out[k] = v is not None and len(v) > 0
            elif k == "topic_id":
                out[k] = str(v) not in ("None", "AAAAAAAAAAAAAAAAAAAAAA", "0" * 32,
                                        "00000000-0000-0000-0000-000000000000")
            elif k == "error_message":
                continue
            elif k == "partitions" and isinstance(v, list) and v and "partition_index" in v[0]:
                # Kafka lists a topic's partitions in hash-map order; order carries no meaning.
                out[k] = _normalize(sorted(v, key=lambda p: p["partition_index"]))
            else:
                out[k] = _normalize(v)
        return out
    if isinstance(value, list):
        return [_normalize(v) for v in value]
    return value


def _produce(conn: RawConnection, topic: str, partition: int, records: bytes) -> dict[str, Any]:
    req = ProduceRequest[9](transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        PD(name=topic, partition_data=[PD.PartitionProduceData(index=partition,
                                                                records=records)])])
    return conn.request(req, ProduceResponse[9]).to_dict()


def _raw_session(bootstrap: str) -> dict[str, Any]:
    """Create a 2-partition topic, then send the same raw requests; return the answers."""
    topic = RAW_TOPIC
    admin_create_topic(bootstrap, topic, 2)
    obs: dict[str, Any] = {}
    conn = RawConnection(bootstrap)
    try:
        # Wait until the topic is visible with a leader on both partitions.
        for _ in range(50):
            md = conn.request(MetadataRequest[12](
                topics=[MetadataRequest[12].MetadataRequestTopic(topic_id=None, name=topic)],
                allow_auto_topic_creation=False, include_topic_authorized_operations=False),
                MetadataResponse[12]).to_dict()
            parts = md["topics"][0]["partitions"]
            if md["topics"][0]["error_code"] == 0 and len(parts) == 2 and \
                    all(p["leader_id"] >= 0 for p in parts):
                break
            time.sleep(0.1)
        obs["produce_p0"] = until_led(lambda: _produce(conn, topic, 0, _batch(3)))
        obs["produce_p0_again"] = _produce(conn, topic, 0, _batch(2))
        obs["produce_bad_partition"] = _produce(conn, topic, 5, _batch(1))
        obs["produce_oversized"] = _produce(conn, topic, 1, _batch(1, value_size=1_100_000))
        obs["metadata_v12"] = conn.request(MetadataRequest[12](
            topics=[MetadataRequest[12].MetadataRequestTopic(topic_id=None, name=topic),
                    MetadataRequest[12].MetadataRequestTopic(topic_id=None, name=topic + "-nope")],
            allow_auto_topic_creation=False, include_topic_authorized_operations=True),
            MetadataResponse[12]).to_dict()
        obs["metadata_v4"] = conn.request(MetadataRequest[4](
            topics=[MetadataRequest[4].MetadataRequestTopic(name=topic),
                    MetadataRequest[4].MetadataRequestTopic(name=topic + "-nope")],
            allow_auto_topic_creation=False), MetadataResponse[4]).to_dict()

        def describe(limit: int, cursor: tuple[str, int] | None = None) -> dict[str, Any]:
            req = DTPRequest[0](
                topics=[DTPRequest[0].TopicRequest(name=n) for n in (topic + "-nope", topic)],
                response_partition_limit=limit, cursor=cursor and DTPRequest[0].Cursor(
                    topic_name=cursor[0], partition_index=cursor[1]))
            return conn.request(req, DTPResponse[0]).to_dict()

        # the second page ends at the topic's end: the cursor names the next (unknown) topic
        obs["describe_topic_partitions"] = {
            "all": describe(2000), "page_1": describe(1), "page_2": describe(1, (topic, 1)),
            "bad_cursor": describe(5, (topic + "-other", 0)),
        }

        def list_offsets(partition: int, ts: int, name: str = topic) -> dict[str, Any]:
            req = ListOffsetsRequest[7](replica_id=-1, isolation_level=0, topics=[LT(
                name=name, partitions=[LT.ListOffsetsPartition(
                    partition_index=partition, current_leader_epoch=-1, timestamp=ts)])])
            return conn.request(req, ListOffsetsResponse[7]).to_dict()

        obs["list_offsets"] = {
            "earliest": list_offsets(0, -2), "latest": list_offsets(0, -1),
            "max_ts": list_offsets(0, -3), "ts_1500": list_offsets(0, BASE_TS + 1500),
            "ts_none_found": list_offsets(0, BASE_TS + 100_000),
            "empty_partition_ts": list_offsets(1, BASE_TS),
            "empty_partition_max_ts": list_offsets(1, -3),
            "bad_partition": list_offsets(7, -1),
            "unknown_topic": list_offsets(0, -1, topic + "-nope"),
        }

        def fetch(partition: int, offset: int, name: str = topic) -> dict[str, Any]:
            req = FetchRequest[11](
                replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                session_id=0, session_epoch=-1, topics=[FT(topic=name, partitions=[
                    FT.FetchPartition(partition=partition, current_leader_epoch=-1,
                                      fetch_offset=offset, log_start_offset=-1,
                                      partition_max_bytes=1 << 20)])],
                forgotten_topics_data=[], rack_id="")
            resp = conn.request(req, FetchResponse[11]).to_dict()
            for t in resp["responses"]:
                for p in t["partitions"]:
                    recs = p.get("records")
                    p["records"] = None if recs is None else len(recs) > 0
            return resp

        obs["fetch"] = {
            "from_0": fetch(0, 0), "at_end": fetch(0, 5), "out_of_range": fetch(0, 50),
            "negative": fetch(0, -5), "bad_partition": fetch(9, 0),
            "unknown_topic": fetch(0, 0, topic + "-nope"),
        }
    finally:
        conn.close()
    return obs


RAW_TOPIC = unique_topic("raw-diff")


@pytest.fixture(scope="module")
def raw_obs(kafka_reference: KafkaReference, module_broker: Broker) -> dict[str, dict[str, Any]]:
    got = _run_both(_raw_session, kafka_reference.bootstrap, module_broker.bootstrap)
    return {k: _normalize(v) for k, v in got.items()}


RAW_KEYS = ["produce_p0", "produce_p0_again", "produce_bad_partition", "produce_oversized",
            "metadata_v12", "metadata_v4", "describe_topic_partitions", "list_offsets", "fetch"]


@pytest.mark.parametrize("key", RAW_KEYS)
def test_raw_answers_are_the_same(raw_obs: dict[str, dict[str, Any]], key: str) -> None:
    kafka, kc = raw_obs["kafka"][key], raw_obs["kcompat"][key]
    assert kc == kafka, (f"{key} differs\n  kafka  : {json.dumps(kafka, default=str)}\n"
                         f"  kcompat: {json.dumps(kc, default=str)}")


def test_raw_scenario_really_hit_the_errors(raw_obs: dict[str, dict[str, Any]]) -> None:
    """The comparison above is only worth something if the bad requests were rejected."""
    k = raw_obs["kafka"]

    def pcode(key: str) -> int:
        return int(k[key]["responses"][0]["partition_responses"][0]["error_code"])

    assert pcode("produce_p0") == 0 and pcode("produce_oversized") == 10
    assert pcode("produce_bad_partition") == 3
    f = {n: v["responses"][0]["partitions"][0]["error_code"] for n, v in k["fetch"].items()}
    assert f == {"from_0": 0, "at_end": 0, "out_of_range": 1, "negative": 1,
                 "bad_partition": 3, "unknown_topic": 3}
    dtp = k["describe_topic_partitions"]
    assert [t["error_code"] for t in dtp["all"]["topics"]] == [0, 3]
    assert [c["next_cursor"]["partition_index"] for c in (dtp["page_1"], dtp["page_2"])] == [1, 0]
    assert dtp["page_2"]["next_cursor"]["topic_name"] == RAW_TOPIC + "-nope"
    assert [t["error_code"] for t in dtp["bad_cursor"]["topics"]] == [42, 42]
    lo = k["list_offsets"]["ts_none_found"]["topics"][0]["partitions"][0]
    assert (lo["offset"], lo["timestamp"], lo["leader_epoch"]) == (-1, -1, -1)
