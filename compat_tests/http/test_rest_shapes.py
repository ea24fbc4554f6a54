"""The REST v3 answers against Confluent REST Proxy's documented shapes.

``SHAPES`` is REST Proxy v3's OpenAPI description (api/v3/openapi.yaml of
confluentinc/kafka-rest) restated as data, for every resource kind kcompat
serves: each field a resource must have (required there) and its JSON type,
and the fields it may have. Every served v3 endpoint is called on a real
broker and each resource in its answer is checked against its kind's shape:
no required field missing, no field of the wrong type, no field the
description does not name, links as ``{"related": url}``, ``metadata`` as
``{"self", "resource_name"}`` (lists: ``{"self", "next"}``). kcompat's own
endpoints (records read, scheduled, dead letters, share groups, dedup,
views) are not REST Proxy's and are not checked here; the ACL endpoints' shapes
are checked item by item in ``test_rest_acls`` (they need an authorizer).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from confluent_kafka import Producer

from .._deployment import Deployment
from ..confluent._helpers import consumer
from .test_rest_v3 import Rest, _until

pytestmark = pytest.mark.timeout(120)

S, N, B, LINK, STRS = str, int, bool, "link", "list[str]"
_CONFIG = {"required": {"cluster_id": S, "name": S, "is_default": B, "is_read_only": B,
                        "is_sensitive": B, "source": S, "synonyms": list},
           "optional": {"value": (S, type(None))}}
SHAPES: dict[str, dict[str, dict[str, Any]]] = {
    "KafkaCluster": {"required": {"cluster_id": S, "acls": LINK, "brokers": LINK,
                                  "broker_configs": LINK, "consumer_groups": LINK,
                                  "topics": LINK, "partition_reassignments": LINK},
                     "optional": {"controller": LINK}},
    "KafkaBroker": {"required": {"cluster_id": S, "broker_id": N, "configs": LINK,
                                 "partition_replicas": LINK},
                    "optional": {"host": (S, type(None)), "port": (N, type(None)),
                                 "rack": (S, type(None))}},
    "KafkaTopic": {"required": {"cluster_id": S, "topic_name": S, "is_internal": B,
                                "replication_factor": N, "partitions_count": N,
                                "partitions": LINK, "configs": LINK,
                                "partition_reassignments": LINK},
                   "optional": {"authorized_operations": STRS}},
    "KafkaPartition": {"required": {"cluster_id": S, "topic_name": S, "partition_id": N,
                                    "replicas": LINK, "reassignment": LINK},
                       "optional": {"leader": LINK}},
    "KafkaTopicConfig": {"required": {**_CONFIG["required"], "topic_name": S},
                         "optional": _CONFIG["optional"]},
    "KafkaBrokerConfig": {"required": {**_CONFIG["required"], "broker_id": N},
                          "optional": _CONFIG["optional"]},
    "KafkaConsumerGroup": {"required": {"cluster_id": S, "consumer_group_id": S,
                                        "is_simple": B, "partition_assignor": S, "state": S,
                                        "coordinator": LINK, "consumers": LINK,
                                        "lag_summary": LINK}, "optional": {}},
    "KafkaConsumer": {"required": {"cluster_id": S, "consumer_group_id": S,
                                   "consumer_id": S, "client_id": S, "assignments": LINK},
                      "optional": {"instance_id": (S, type(None))}},
    "KafkaConsumerLag": {"required": {"cluster_id": S, "consumer_group_id": S,
                                      "topic_name": S, "partition_id": N, "current_offset": N,
                                      "log_end_offset": N, "lag": N, "consumer_id": S,
                                      "client_id": S},
                         "optional": {"instance_id": (S, type(None))}},
    "KafkaConsumerGroupLagSummary": {
        "required": {"cluster_id": S, "consumer_group_id": S, "max_lag_consumer_id": S,
                     "max_lag_client_id": S, "max_lag_topic_name": S,
                     "max_lag_partition_id": N, "max_lag": N, "total_lag": N,
                     "max_lag_consumer": LINK, "max_lag_partition": LINK},
        "optional": {"max_lag_instance_id": (S, type(None))}},
}
CONFIG_SOURCES = {"DYNAMIC_CLUSTER_LINK_CONFIG", "DYNAMIC_TOPIC_CONFIG",
                  "DYNAMIC_BROKER_LOGGER_CONFIG", "DYNAMIC_BROKER_CONFIG",
                  "DYNAMIC_DEFAULT_BROKER_CONFIG", "STATIC_BROKER_CONFIG", "DEFAULT_CONFIG",
                  "UNKNOWN"}
GROUP_STATES = {"UNKNOWN", "PREPARING_REBALANCE", "COMPLETING_REBALANCE", "STABLE", "DEAD",
                "EMPTY"}
PRODUCE_REPORT = {"required": {"error_code": N, "cluster_id": S, "topic_name": S,
                               "partition_id": N, "offset": N},
                  "optional": {"timestamp": (S, type(None)), "key": (dict, type(None)),
                               "value": (dict, type(None))}}


def _type_ok(value: Any, kind: Any) -> bool:
    if kind == LINK:
        return isinstance(value, dict) and set(value) == {"related"} and isinstance(
            value["related"], str) and value["related"].startswith("http")
    if kind == STRS:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return not (isinstance(value, bool) and bool not in kinds) and isinstance(value, kinds)


def _problems(doc: dict[str, Any], shape: dict[str, dict[str, Any]], where: str) -> list[str]:
    out = []
    for name, kind in shape["required"].items():
        if name not in doc:
            out.append(f"{where}: {name} missing")
        elif not _type_ok(doc[name], kind):
            out.append(f"{where}: {name} = {doc[name]!r} is not {kind}")
    for name, kind in shape["optional"].items():
        if name in doc and not _type_ok(doc[name], kind):
            out.append(f"{where}: {name} = {doc[name]!r} is not {kind}")
    extra = set(doc) - set(shape["required"]) - set(shape["optional"]) - {"kind", "metadata"}
    out += [f"{where}: {name} is not in the description" for name in sorted(extra)]
    return out


def check_resource(doc: dict[str, Any], where: str) -> list[str]:
    kind = doc.get("kind")
    if kind not in SHAPES:
        return [f"{where}: unknown kind {kind!r}"]
    meta = doc.get("metadata")
    out = []
    allowed = {"self", "resource_name"}
    if not isinstance(meta, dict) or "self" not in meta or not set(meta) <= allowed:
        out.append(f"{where}: metadata {meta!r}")
    out += _problems(doc, SHAPES[kind], f"{where} ({kind})")
    if kind.endswith("Config"):
        if doc["source"] not in CONFIG_SOURCES:
            out.append(f"{where}: source {doc['source']}")
        for syn in doc["synonyms"]:
            if set(syn) - {"name", "value", "source"} or syn.get("source") not in CONFIG_SOURCES:
                out.append(f"{where}: synonym {syn}")
    if kind == "KafkaConsumerGroup" and doc["state"] not in GROUP_STATES:
        out.append(f"{where}: state {doc['state']}")
    return out


def check_list(doc: dict[str, Any], kind: str, where: str) -> list[str]:
    out = []
    if doc.get("kind") != kind + "List":
        out.append(f"{where}: kind {doc.get('kind')!r}, not {kind}List")
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or set(meta) != {"self", "next"}:
        out.append(f"{where}: list metadata {meta!r}")
    if not isinstance(doc.get("data"), list):
        return [*out, f"{where}: data is not a list"]
    for i, item in enumerate(doc["data"]):
        out += check_resource(item, f"{where}[{i}]")
        if item.get("kind") != kind:
            out.append(f"{where}[{i}]: kind {item.get('kind')}")
    return out


@pytest.mark.parametrize("hbroker", ["single", "rf3"], indirect=True)
def test_every_rest_proxy_endpoint_answers_in_its_documented_shape(
        hbroker: Deployment, topic: str) -> None:
    rest = Rest(hbroker)
    cl = rest.cl
    problems: list[str] = []

    def get(path: str) -> Any:
        status, body = rest.call("GET", path)
        assert status == 200, (path, body)
        return body

    status, made = rest.call("POST", cl + "/topics", {
        "topic_name": topic, "partitions_count": 2, "replication_factor": hbroker.replication,
        "configs": [{"name": "cleanup.policy", "value": "compact"}]})
    assert status == 201
    problems += check_resource(made, "POST topics")
    status, grown = rest.call("PATCH", f"{cl}/topics/{topic}", {"partitions_count": 3})
    assert status == 200
    problems += check_resource(grown, "PATCH topic")
    status, report = rest.call("POST", f"{cl}/topics/{topic}/records", {
        "key": {"type": "BINARY", "data": "a2V5"}, "value": {"type": "JSON", "data": [1]}})
    assert status == 200
    problems += _problems(report, PRODUCE_REPORT, "produce report")
    assert report["key"] == {"type": "BINARY", "size": 3}
    assert report["value"] == {"type": "JSON", "size": 3}
    group = f"g-{topic}"
    p = Producer({"bootstrap.servers": hbroker.bootstrap})
    p.produce(topic, value=b"x", partition=0)
    assert p.flush(30) == 0
    c = consumer(hbroker.bootstrap, **{"group.id": group, "auto.offset.reset": "earliest",
                                       "enable.partition.eof": False})
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while c.poll(0.5) is None:
            assert time.monotonic() < deadline
        c.commit(asynchronous=False)
        _until(lambda: get(f"{cl}/consumer-groups/{group}"), lambda g: g["state"] == "STABLE",
               timeout_s=20)
        member = get(f"{cl}/consumer-groups/{group}/consumers")["data"][0]["consumer_id"]
        problems += check_list(get("/clusters"), "KafkaCluster", "clusters")
        problems += check_resource(get(cl), "cluster")
        problems += check_list(get(cl + "/brokers"), "KafkaBroker", "brokers")
        broker = get(cl + "/brokers")["data"][0]["broker_id"]
        problems += check_resource(get(f"{cl}/brokers/{broker}"), "broker")
        problems += check_list(get(f"{cl}/brokers/{broker}/configs"), "KafkaBrokerConfig",
                               "broker configs")
        problems += check_list(get(cl + "/topics"), "KafkaTopic", "topics")
        problems += check_resource(get(f"{cl}/topics/{topic}"), "topic")
        problems += check_list(get(f"{cl}/topics/{topic}/configs"), "KafkaTopicConfig",
                               "topic configs")
        problems += check_resource(get(f"{cl}/topics/{topic}/configs/cleanup.policy"),
                                   "topic config")
        problems += check_list(get(f"{cl}/topics/{topic}/partitions"), "KafkaPartition",
                               "partitions")
        problems += check_resource(get(f"{cl}/topics/{topic}/partitions/1"), "partition")
        problems += check_list(get(cl + "/consumer-groups"), "KafkaConsumerGroup", "groups")
        problems += check_resource(get(f"{cl}/consumer-groups/{group}"), "group")
        problems += check_list(get(f"{cl}/consumer-groups/{group}/consumers"), "KafkaConsumer",
                               "consumers")
        problems += check_resource(get(f"{cl}/consumer-groups/{group}/consumers/{member}"),
                                   "consumer")
        lags = get(f"{cl}/consumer-groups/{group}/lags")
        problems += check_list(lags, "KafkaConsumerLag", "lags")
        committed = lags["data"][0]["partition_id"]
        problems += check_resource(
            get(f"{cl}/consumer-groups/{group}/lags/{topic}/partitions/{committed}"), "lag")
        problems += check_resource(get(f"{cl}/consumer-groups/{group}/lag-summary"),
                                   "lag summary")
    finally:
        c.close()
    status, error = rest.call("GET", f"{cl}/topics/no-{topic}")
    assert set(error) == {"error_code", "message"} and isinstance(error["error_code"], int)
    assert (status, error["error_code"]) == (404, 40403)
    status, error = rest.call("POST", cl + "/topics", raw=b"{'single': 'quotes'}")
    assert (status, error["error_code"]) == (400, 400) and set(error) == {"error_code",
                                                                       "message"}
    assert json.dumps(problems) == "[]", "\n".join(problems)
