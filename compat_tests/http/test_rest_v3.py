"""The HTTP API (Confluent REST Proxy v3 shapes) against real Kafka clients.

What is done over HTTP is checked with a Kafka client in this process
(confluent-kafka, kafka-python), and what a client does is checked over
HTTP. Every test runs on a single broker and on the session's 3-broker
clusters at replication factor 1 and 3 (``hbroker``); in a cluster the HTTP
calls go to one broker while the partitions' leaders and the controller are
spread over all three, so produce and admin calls cross brokers.
"""

from __future__ import annotations

import base64
import http.client
import json
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource
from kafka import KafkaAdminClient

from .._broker import Broker
from .._deployment import Deployment
from ..confluent._helpers import admin_client, consumer, create_topic

pytestmark = pytest.mark.timeout(120)


class Rest:
    """A REST v3 client over urllib: (status, JSON body or None)."""

    def __init__(self, deployment: Deployment, index: int = 0) -> None:
        self.base = deployment.brokers[index].admin_url + "/v3"
        status, body = self.call("GET", "/clusters")
        assert status == 200, body
        self.cluster_id = body["data"][0]["cluster_id"]
        self.cl = f"/clusters/{self.cluster_id}"

    def call(self, method: str, path: str, body: Any = None, raw: bytes | None = None
             ) -> tuple[int, Any]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=40) as r:
                text = r.read().decode()
                status = r.status
        except urllib.error.HTTPError as e:
            text, status = e.read().decode(), e.code
        if not text:
            return status, None
        try:
            return status, json.loads(text)
        except ValueError:  # several reports, one JSON object a line
            return status, [json.loads(line) for line in text.splitlines() if line]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _record(value: bytes, key: bytes | None = None, headers: dict[str, bytes] | None = None,
            partition: int | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"value": {"type": "BINARY", "data": _b64(value)}}
    if key is not None:
        doc["key"] = {"type": "BINARY", "data": _b64(key)}
    if headers:
        doc["headers"] = [{"name": k, "value": _b64(v)} for k, v in headers.items()]
    if partition is not None:
        doc["partition_id"] = partition
    return doc


def _read(bootstrap: str, topic: str, partitions: int, count: int,
          timeout_s: float = 30.0) -> list[Any]:
    c = consumer(bootstrap)
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        seen: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while len(seen) < count:
            assert time.monotonic() < deadline, f"read {len(seen)} of {count} from {topic}"
            m = c.poll(0.5)
            if m is None or (m.error() is not None
                             and m.error().code() == KafkaError._PARTITION_EOF):
                continue
            assert m.error() is None, m.error()
            seen.append(m)
        return seen
    finally:
        c.close()


def _until(get: Any, ok: Any, timeout_s: float = 10.0) -> Any:
    """``get()`` until ``ok`` of it (at most ``timeout_s``), the last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = get()
        if ok(value):
            return value
        assert time.monotonic() < deadline, value
        time.sleep(0.1)


def _ends(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    c = consumer(bootstrap)
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)}
    finally:
        c.close()


def test_cluster_and_brokers_are_the_ones_kafka_clients_see(hbroker: Deployment) -> None:
    rest = Rest(hbroker)
    admin = admin_client(hbroker.bootstrap)  # alive until its future resolves
    described = admin.describe_cluster(request_timeout=10).result(timeout=15)
    assert rest.cluster_id == described.cluster_id
    status, cluster = rest.call("GET", rest.cl)
    assert status == 200 and cluster["kind"] == "KafkaCluster"
    assert cluster["metadata"]["self"] == rest.base + rest.cl
    # as from Kafka 4, a broker names a live broker as the controller (clients
    # cannot reach the quorum's controllers), not always the same one
    live = {n.id for n in described.nodes}
    assert cluster["controller"]["related"].rsplit("/", 1)[1] in {str(n) for n in live}
    status, brokers = rest.call("GET", rest.cl + "/brokers")
    assert status == 200 and brokers["kind"] == "KafkaBrokerList"
    assert {(b["broker_id"], b["host"], b["port"]) for b in brokers["data"]} == {
        (n.id, n.host, n.port) for n in described.nodes}
    one = brokers["data"][0]["broker_id"]
    status, broker = rest.call("GET", f"{rest.cl}/brokers/{one}")
    assert status == 200 and broker["kind"] == "KafkaBroker" and broker["broker_id"] == one
    assert rest.call("GET", f"{rest.cl}/brokers/999")[0] == 404
    for n in described.nodes:  # each broker describes its own configs, asked from any
        status, configs = rest.call("GET", f"{rest.cl}/brokers/{n.id}/configs")
        assert status == 200 and configs["kind"] == "KafkaBrokerConfigList", configs
        by_name = {e["name"]: e for e in configs["data"]}
        assert by_name["node.id"]["value"] == str(n.id) and by_name["node.id"]["broker_id"] == n.id
    assert rest.call("GET", f"{rest.cl}/brokers/999/configs")[0] == 404
    status, error = rest.call("GET", "/clusters/not-this-one/topics")
    assert status == 404 and error["error_code"] == 404 and "not-this-one" in error["message"]


def test_a_topic_made_over_http_is_the_topic_clients_see(hbroker: Deployment, topic: str
                                                        ) -> None:
    rest = Rest(hbroker)
    rf = hbroker.replication
    status, made = rest.call("POST", rest.cl + "/topics", {
        "topic_name": topic, "partitions_count": 3, "replication_factor": rf,
        "configs": [{"name": "retention.ms", "value": "3600000"}]})
    assert status == 201, made
    assert (made["kind"], made["topic_name"], made["partitions_count"],
            made["replication_factor"]) == ("KafkaTopic", topic, 3, rf)
    admin = KafkaAdminClient(bootstrap_servers=hbroker.bootstrap)
    try:
        assert topic in admin.list_topics()
    finally:
        admin.close()
    confluent = admin_client(hbroker.bootstrap)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = confluent.describe_configs([res])[res].result(timeout=15)
    assert configs["retention.ms"].value == "3600000"
    status, again = rest.call("POST", rest.cl + "/topics", {"topic_name": topic,
                                                            "partitions_count": 1})
    assert (status, again["error_code"]) == (400, 40002) and topic in again["message"]
    status, listed = rest.call("GET", rest.cl + "/topics")
    assert status == 200 and topic in {t["topic_name"] for t in listed["data"]}
    status, parts = rest.call("GET", f"{rest.cl}/topics/{topic}/partitions")
    md = admin_client(hbroker.bootstrap).list_topics(topic, timeout=10).topics[topic]
    assert [p["partition_id"] for p in parts["data"]] == [0, 1, 2]
    for p in parts["data"]:
        leader = md.partitions[p["partition_id"]].leader
        assert p["leader"]["related"].endswith(f"/partitions/{p['partition_id']}/replicas/{leader}")
    status, grown = rest.call("PATCH", f"{rest.cl}/topics/{topic}", {"partitions_count": 5})
    assert status == 200 and grown["partitions_count"] == 5, grown
    deadline = time.monotonic() + 15
    while len(admin_client(hbroker.bootstrap).list_topics(topic, timeout=10)
              .topics[topic].partitions) != 5:
        assert time.monotonic() < deadline, "the client never saw 5 partitions"
        time.sleep(0.2)
    assert rest.call("DELETE", f"{rest.cl}/topics/{topic}")[0] == 204
    status, gone = rest.call("GET", f"{rest.cl}/topics/{topic}")
    assert (status, gone["error_code"]) == (404, 40403)
    assert rest.call("DELETE", f"{rest.cl}/topics/{topic}")[0] == 404


def test_topic_configs_over_http_and_over_kafka_agree(hbroker: Deployment, topic: str) -> None:
    create_topic(hbroker.bootstrap, topic, partitions=1, replication=hbroker.replication)
    rest = Rest(hbroker, index=-1)
    path = f"{rest.cl}/topics/{topic}/configs"
    assert rest.call("PUT", path + "/cleanup.policy", {"value": "compact"})[0] == 204
    # in a cluster the change is the controller's; each broker applies it a
    # moment later from the metadata log, as in Kafka
    entry = _until(lambda: rest.call("GET", path + "/cleanup.policy")[1],
                   lambda e: e["value"] == "compact")
    assert entry["kind"] == "KafkaTopicConfig"
    assert (entry["value"], entry["is_default"], entry["source"]) == (
        "compact", False, "DYNAMIC_TOPIC_CONFIG")
    admin = admin_client(hbroker.bootstrap)

    def seen() -> dict[str, Any]:
        res = ConfigResource(ConfigResource.Type.TOPIC, topic)
        return {k: v.value for k, v in admin.describe_configs([res])[res].result(
            timeout=15).items()}

    _until(seen, lambda now: now["cleanup.policy"] == "compact")
    status, _ = rest.call("POST", path + ":alter", {"data": [
        {"name": "cleanup.policy", "operation": "DELETE"},
        {"name": "max.message.bytes", "value": "200000"}]})
    assert status == 204
    _until(seen, lambda now: (now["cleanup.policy"], now["max.message.bytes"])
           == ("delete", "200000"))
    listed = _until(lambda: rest.call("GET", path)[1],
                    lambda body: any(e["value"] == "200000" for e in body["data"]))
    by_name = {e["name"]: e for e in listed["data"]}
    assert by_name["cleanup.policy"]["is_default"] is True
    assert by_name["max.message.bytes"]["value"] == "200000"
    status, refused = rest.call("PUT", path + "/retention.ms", {"value": "soon"})
    assert (status, refused["error_code"]) == (400, 40002), refused
    assert seen()["retention.ms"] == "604800000"  # nothing changed
    assert rest.call("GET", path + "/no.such.key")[0] == 404


def test_records_produced_over_http_are_what_a_consumer_reads(hbroker: Deployment, topic: str
                                                             ) -> None:
    create_topic(hbroker.bootstrap, topic, partitions=3, replication=hbroker.replication)
    rest = Rest(hbroker)
    keys = [f"key-{i}".encode() for i in range(60)]
    body = "".join(json.dumps(_record(f"v{i}".encode(), k, {"h": bytes([i, 0, 255])}))
                   for i, k in enumerate(keys)).encode()
    status, reports = rest.call("POST", f"{rest.cl}/topics/{topic}/records", raw=body)
    assert status == 200 and len(reports) == 60
    assert all(r["error_code"] == 200 and r["topic_name"] == topic for r in reports)
    seen = _read(hbroker.bootstrap, topic, 3, 60)
    by_value = {m.value(): m for m in seen}
    for i, r in enumerate(reports):
        m = by_value[f"v{i}".encode()]
        assert (m.partition(), m.offset(), m.key()) == (r["partition_id"], r["offset"], keys[i])
        assert m.headers() == [("h", bytes([i, 0, 255]))]
        assert r["value"] == {"type": "BINARY", "size": len(f"v{i}")}
    # a key goes where the Java producer's partitioner (librdkafka's murmur2) puts it
    murmur = Producer({"bootstrap.servers": hbroker.bootstrap, "partitioner": "murmur2"})
    chosen: dict[bytes, int] = {}
    for k in keys[:12]:
        murmur.produce(topic, key=k, value=b"again",
                       on_delivery=lambda _e, m: chosen.__setitem__(m.key(), m.partition()))
    assert murmur.flush(30) == 0
    assert chosen == {k: reports[i]["partition_id"] for i, k in enumerate(keys[:12])}
    assert len(set(chosen.values())) > 1


def test_json_and_string_values_timestamps_and_one_record_answers(hbroker: Deployment,
                                                                  topic: str) -> None:
    create_topic(hbroker.bootstrap, topic, partitions=2, replication=hbroker.replication)
    rest = Rest(hbroker, index=-1)
    status, report = rest.call("POST", f"{rest.cl}/topics/{topic}/records", {
        "partition_id": 1, "key": {"type": "STRING", "data": "k1"},
        "value": {"type": "JSON", "data": {"n": 1, "s": ["a", None]}},
        "timestamp": "2024-03-01T12:00:00.250Z"})
    assert status == 200, report
    assert (report["partition_id"], report["offset"]) == (1, 0)
    assert report["timestamp"] == "2024-03-01T12:00:00.250Z"
    m = _read(hbroker.bootstrap, topic, 2, 1)[0]
    assert (m.key(), json.loads(m.value())) == (b"k1", {"n": 1, "s": ["a", None]})
    assert m.timestamp()[1] == 1709294400250


def test_a_delay_header_over_http_delays_the_record(hbroker: Deployment, topic: str) -> None:
    create_topic(hbroker.bootstrap, topic, partitions=1, replication=hbroker.replication)
    rest = Rest(hbroker)
    due = int(time.time() * 1000) + 5000  # far enough for the plain record to go first
    status, report = rest.call("POST", f"{rest.cl}/topics/{topic}/records", _record(
        b"later", headers={"kc-deliver-at": str(due).encode()}))
    assert status == 200 and report["error_code"] == 200, report
    status, now = rest.call("POST", f"{rest.cl}/topics/{topic}/records", _record(b"now"))
    assert status == 200
    seen = _read(hbroker.bootstrap, topic, 1, 2)
    assert seen[0].value() == b"now"
    arrived = time.time() * 1000
    assert seen[1].value() == b"later" and arrived >= due - 50
    assert ("kc-scheduled-offset", str(report["offset"]).encode()) in seen[1].headers()


def test_bad_records_are_refused_whole_and_nothing_is_stored(hbroker: Deployment, topic: str
                                                            ) -> None:
    create_topic(hbroker.bootstrap, topic, partitions=2, replication=hbroker.replication)
    rest = Rest(hbroker)
    path = f"{rest.cl}/topics/{topic}/records"
    good = json.dumps(_record(b"fine"))
    cases = [
        (good + "{not json", 400, "not JSON"),
        (good + json.dumps({"value": {"type": "BINARY", "data": "***"}}), 400, "base64"),
        (good + json.dumps({"value": {"type": "AVRO", "data": {}}}), 400, "schema registry"),
        (good + json.dumps({"value": {"type": "BINARY", "data": "eA=="},
                            "headers": [{"name": "h", "value": 5}]}), 400, "base64"),
        (good + json.dumps({"value": {"data": "eA=="}}), 400, "type"),
        (good + json.dumps({"partition_id": "one"}), 400, "partition_id"),
        (good + json.dumps({"timestamp": "yesterday"}), 400, "timestamp"),
        (good + json.dumps(_record(b"x", partition=7)), 404, topic),
        ("[]", 400, "object"),
    ]
    for raw, status, words in cases:
        got, error = rest.call("POST", path, raw=raw.encode())
        assert got == status and words in error["message"], (raw, got, error)
        assert error["error_code"] in (400, 40403)
    status, error = rest.call("POST", f"{rest.cl}/topics/no-{topic}/records", _record(b"x"))
    assert (status, error["error_code"]) == (404, 40403)
    # a body over 16 MiB is refused from its Content-Length, before it is read
    url = urllib.parse.urlsplit(rest.base)
    conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
    try:
        conn.putrequest("POST", url.path + path)
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(17 << 20))
        conn.endheaders()
        answer = conn.getresponse()
        assert (answer.status, json.loads(answer.read())["error_code"]) == (413, 413)
    finally:
        conn.close()
    assert _ends(hbroker.bootstrap, topic, 2) == {0: 0, 1: 0}  # nothing of any of them
    status, refused = rest.call("POST", path, _record(b"x", headers={"kc-delay-ms": b"soon"}))
    assert status == 400 and "kc-delay-ms" in refused["message"], refused
    assert _ends(hbroker.bootstrap, topic, 2) == {0: 0, 1: 0}


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_groups_members_offsets_and_lag_are_what_its_consumer_committed(
        hbroker: Deployment, topic: str, protocol: str) -> None:
    """A confluent-kafka consumer group (classic, or KIP-848 with
    ``group.protocol=consumer``) commits offsets; REST shows the group, its
    member and the lag against the log end, then the group empty."""
    create_topic(hbroker.bootstrap, topic, partitions=2, replication=hbroker.replication)
    p = Producer({"bootstrap.servers": hbroker.bootstrap})
    for i in range(30):
        p.produce(topic, value=b"%d" % i, partition=i % 2)
    assert p.flush(30) == 0
    group = f"g-{topic}"
    settings: dict[str, Any] = {"group.id": group, "client.id": "rest-lag-client",
                                "auto.offset.reset": "earliest",
                                "enable.partition.eof": False}
    if protocol == "consumer":
        settings["group.protocol"] = "consumer"
    else:
        settings["session.timeout.ms"] = 10000
    c = consumer(hbroker.bootstrap, **settings)
    rest = Rest(hbroker, index=-1)
    base = f"{rest.cl}/consumer-groups/{group}"
    try:
        c.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 30
        while got < 30:
            assert time.monotonic() < deadline, f"consumed {got} of 30"
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got += 1
        c.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 12)],
                 asynchronous=False)
        described = _until(lambda: rest.call("GET", base)[1],
                           lambda g: g.get("state") == "STABLE", timeout_s=20)
        assert described["kind"] == "KafkaConsumerGroup" and not described["is_simple"]
        status, listed = rest.call("GET", f"{rest.cl}/consumer-groups")
        assert status == 200 and group in {g["consumer_group_id"] for g in listed["data"]}
        status, members = rest.call("GET", base + "/consumers")
        assert status == 200 and len(members["data"]) == 1
        member = members["data"][0]
        assert member["client_id"] == "rest-lag-client"
        status, one_member = rest.call(  # a KIP-848 member id may hold "/" or "+"
            "GET", base + "/consumers/" + urllib.parse.quote(member["consumer_id"], safe=""))
        assert status == 200 and one_member["consumer_id"] == member["consumer_id"], one_member
        status, lags = rest.call("GET", base + "/lags")
        assert status == 200
        assert [(x["partition_id"], x["current_offset"], x["log_end_offset"], x["lag"],
                 x["consumer_id"]) for x in lags["data"]] == [
            (0, 5, 15, 10, member["consumer_id"]), (1, 12, 15, 3, member["consumer_id"])]
        status, one = rest.call("GET", base + f"/lags/{topic}/partitions/1")
        assert (status, one["lag"]) == (200, 3)
        status, summary = rest.call("GET", base + "/lag-summary")
        assert status == 200
        assert (summary["max_lag"], summary["total_lag"], summary["max_lag_partition_id"],
                summary["max_lag_consumer_id"]) == (10, 13, 0, member["consumer_id"])
    finally:
        c.close()
    emptied = _until(lambda: rest.call("GET", base)[1], lambda g: g.get("state") == "EMPTY",
                     timeout_s=20)
    assert emptied["consumer_group_id"] == group
    status, lags = rest.call("GET", base + "/lags")
    assert [(x["lag"], x["consumer_id"]) for x in lags["data"]] == [(10, ""), (3, "")]
    status, missing = rest.call("GET", f"{rest.cl}/consumer-groups/no-{group}")
    assert status == 404 and missing["error_code"] == 404


def _page(rest: Rest, url: str) -> dict[str, Any]:
    path = url[len(rest.base):] if url.startswith(rest.base) else url
    status, body = rest.call("GET", path)
    assert status == 200, body
    return body


def test_reading_a_partition_page_by_page_with_a_filter_and_from_a_time(
        hbroker: Deployment, topic: str) -> None:
    create_topic(hbroker.bootstrap, topic, partitions=1, replication=hbroker.replication)
    p = Producer({"bootstrap.servers": hbroker.bootstrap, "linger.ms": 5})
    base_ts = int(time.time() * 1000) - 100_000
    for i in range(250):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, timestamp=base_ts + i * 10,
                  headers=[("color", b"red" if i % 5 == 0 else b"blue"), ("n", b"%d" % i)])
    assert p.flush(30) == 0
    rest = Rest(hbroker, index=-1)
    url = f"{rest.base}{rest.cl}/topics/{topic}/partitions/0/records?limit=100"
    offsets: list[int] = []
    pages = 0
    while url:
        page = _page(rest, url)
        assert page["kind"] == "KcompatRecordList" and page["end_offset"] == 250
        offsets += [r["offset"] for r in page["data"]]
        assert len(page["data"]) <= 100
        url = page["metadata"]["next"]
        pages += 1
    assert offsets == list(range(250)) and pages == 3
    first = _page(rest, f"{rest.cl}/topics/{topic}/partitions/0/records?offset=7&limit=1")
    rec = first["data"][0]
    assert (rec["offset"], base64.b64decode(rec["key"]["data"]),
            base64.b64decode(rec["value"]["data"]), rec["timestamp_ms"]) == (
        7, b"k7", b"v7", base_ts + 70)
    assert [(h["name"], base64.b64decode(h["value"])) for h in rec["headers"]] == [
        ("color", b"blue"), ("n", b"7")]
    red = _page(rest, f"{rest.cl}/topics/{topic}/partitions/0/records?limit=1000&filter="
                + urllib.parse.quote("color = 'red' AND n >= 100"))
    assert [r["offset"] for r in red["data"]] == list(range(100, 250, 5))
    later = _page(rest, f"{rest.cl}/topics/{topic}/partitions/0/records?limit=3&timestamp="
                  f"{base_ts + 1234}")
    assert [r["offset"] for r in later["data"]] == [124, 125, 126]
    status, ends = rest.call("GET", f"{rest.cl}/topics/{topic}/partitions/0/offsets")
    assert (status, ends) == (200, {"beginning_offset": 0, "end_offset": 250})
    past = _page(rest, f"{rest.cl}/topics/{topic}/partitions/0/records?offset=9999")
    assert (past["data"], past["next_offset"], past["metadata"]["next"]) == ([], 250, None)
    status, error = rest.call("GET", f"{rest.cl}/topics/{topic}/partitions/0/records?filter="
                              + urllib.parse.quote("color = "))
    assert status == 400 and error["message"].count("at character") == 1, error
    for bad in ("limit=0", "limit=5000", "filter=" + urllib.parse.quote("color = "),
                "isolation=dirty", "offset=1&timestamp=5", "offset=x"):
        status, error = rest.call("GET", f"{rest.cl}/topics/{topic}/partitions/0/records?{bad}")
        assert status == 400, (bad, error)
    assert rest.call("GET", f"{rest.cl}/topics/{topic}/partitions/9/records")[0] == 404


def test_read_committed_leaves_out_an_aborted_transaction(hbroker: Deployment,
                                                          topic: str) -> None:
    create_topic(hbroker.bootstrap, topic, partitions=1, replication=hbroker.replication)
    p = Producer({"bootstrap.servers": hbroker.bootstrap, "transactional.id": f"t-{topic}"})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, value=b"aborted-%d" % i)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    for i in range(2):
        p.produce(topic, value=b"committed-%d" % i)
    p.commit_transaction(30)
    rest = Rest(hbroker)
    path = f"{rest.cl}/topics/{topic}/partitions/0/records"

    def values(query: str) -> list[bytes]:
        return [base64.b64decode(r["value"]["data"])
                for r in _page(rest, path + query)["data"]]

    assert values("?isolation=read_committed") == [b"committed-0", b"committed-1"]
    assert values("") == [b"aborted-0", b"aborted-1", b"aborted-2", b"committed-0",
                          b"committed-1"]  # markers are never records


def test_the_overview_adds_up_what_metadata_says(hbroker: Deployment, topic: str) -> None:
    create_topic(hbroker.bootstrap, topic, partitions=4, replication=hbroker.replication)
    rest = Rest(hbroker, index=-1)
    admin = admin_client(hbroker.bootstrap)

    def both() -> tuple[Any, dict[str, Any]]:
        md = admin.list_topics(timeout=10)
        status, o = rest.call("GET", f"{rest.cl}/overview")
        assert status == 200 and o["kind"] == "KcompatClusterOverview", o
        return md, o

    def agree(pair: tuple[Any, dict[str, Any]]) -> bool:
        """Metadata and the overview agree (an internal topic may appear between)."""
        md, o = pair
        led: dict[int, int] = {}
        held: dict[int, int] = {}
        for t in md.topics.values():
            for p in t.partitions.values():
                led[p.leader] = led.get(p.leader, 0) + 1
                for r in p.replicas:
                    held[r] = held.get(r, 0) + 1
        return (o["partitions"] == sum(len(t.partitions) for t in md.topics.values())
                and {b["broker_id"]: b["partitions_led"] for b in o["brokers"]}
                == {n: led.get(n, 0) for n in md.brokers}
                and {b["broker_id"]: b["replicas"] for b in o["brokers"]}
                == {n: held.get(n, 0) for n in md.brokers}
                and o["topics"] + o["internal_topics"] == len(md.topics))

    md, o = _until(both, agree)
    assert topic in md.topics and o["partitions"] >= 4
    assert (o["offline_partitions"], o["reassignments"]) == (0, [])
    quorum = o["quorum"]
    assert quorum["leader_id"] in {v["node_id"] for v in quorum["voters"]}
    assert len(quorum["voters"]) == (1 if hbroker.kind == "single" else 3)


def test_pages_of_large_records_cross_fetch_boundaries(hbroker: Deployment, topic: str) -> None:
    """Batches of 500 KB (5 records of 100 KB a body): a 1 MiB fetch ends
    inside the third, which the page leaves for the next fetch."""
    create_topic(hbroker.bootstrap, topic, partitions=1, replication=hbroker.replication)
    rest = Rest(hbroker)
    for body in range(3):
        raw = "".join(json.dumps(_record(bytes([body * 5 + i]) * 100_000, partition=0))
                      for i in range(5)).encode()
        status, reports = rest.call("POST", f"{rest.cl}/topics/{topic}/records", raw=raw)
        assert status == 200 and all(r["error_code"] == 200 for r in reports), reports
    url = f"{rest.base}{rest.cl}/topics/{topic}/partitions/0/records?limit=4"
    seen: list[int] = []
    while url:
        page = _page(rest, url)
        seen += [base64.b64decode(r["value"]["data"])[0] for r in page["data"]]
        url = page["metadata"]["next"]
    assert seen == list(range(15))


def test_reading_waits_out_a_fetch_quota(tmp_path: Path, topic: str) -> None:
    """A consumer_byte_rate quota on the HTTP API's client id throttles its
    fetches (answers without the partition): the page waits and reads on."""
    b = Broker(tmp_path / "b", extra_args=("--admin-port", "0"))
    b.start()
    try:
        create_topic(b.bootstrap, topic, partitions=1, replication=1)
        p = Producer({"bootstrap.servers": b.bootstrap})
        for i in range(10):
            p.produce(topic, value=b"%d" % i * 2000)
        assert p.flush(30) == 0
        subprocess.run([sys.executable, "-m", "kcompat", "quotas", "alter", "--client-id",
                        "kcompat-http", "--add", "consumer_byte_rate=2000",
                        "--bootstrap-server", b.bootstrap], check=True, capture_output=True,
                       timeout=60)
        rest = Rest(Deployment.single(b))
        got: list[int] = []
        for _ in range(2):  # the quota's window fills, then fetches are throttled
            status, page = rest.call("GET", f"{rest.cl}/topics/{topic}/partitions/0/records"
                                            "?limit=1000")
            assert status == 200, page
            got.append(len(page["data"]))
        assert got == [10, 10], got
    finally:
        b.close()
