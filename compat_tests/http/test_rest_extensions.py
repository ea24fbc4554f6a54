"""kcompat's extensions over HTTP: delayed records and dead letters.

The records come from real clients (confluent-kafka producers and a consumer
that hands a record back with ``kcompat.ext.nack``); what the HTTP API shows
and does is checked by what a consumer then reads. On a single broker and on
3 brokers at RF 1 and 3 (``hbroker``): the schedule partitions and the
topics' leaders are spread over the brokers there.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest
from confluent_kafka import Producer

from kcompat.ext.nack import nack

from .._deployment import Deployment
from ..confluent._helpers import consumer, create_topic
from .test_rest_v3 import Rest, _ends, _record, _until

pytestmark = pytest.mark.timeout(120)


def _pending(rest: Rest, topic: str) -> dict[str, Any]:
    status, body = rest.call("GET", f"{rest.cl}/scheduled?topic={topic}")
    assert status == 200, body
    return body


def test_delayed_records_are_counted_and_one_is_cancelled_over_http(
        hbroker: Deployment, topic: str) -> None:
    create_topic(hbroker.bootstrap, topic, partitions=1, replication=hbroker.replication)
    p = Producer({"bootstrap.servers": hbroker.bootstrap})
    due = int(time.time() * 1000) + 4000
    for name in ("keep", "drop"):
        p.produce(topic, value=name.encode(), headers=[
            ("kc-deliver-at", str(due).encode()), ("kc-schedule-id", f"{name}-1".encode())])
    assert p.flush(30) == 0
    rest = Rest(hbroker, index=-1)
    body = _until(lambda: _pending(rest, topic), lambda b: b["pending"] == 2)
    assert body["kind"] == "KcompatScheduledList"
    assert [(t["topic_name"], t["partition_id"], t["pending"]) for t in body["data"]] == [
        (topic, 0, 2)]
    (holder,) = [s for s in body["schedule_partitions"] if s["pending"]]
    assert abs(holder["earliest_due_ms"] - due) < 1000, holder
    status, cancelled = rest.call("POST", f"{rest.cl}/topics/{topic}/scheduled:cancel",
                                  {"schedule_id": "drop-1"})
    assert status == 200 and cancelled["partitions"] == [0], cancelled
    _until(lambda: _pending(rest, topic), lambda b: b["pending"] == 1)
    c = consumer(hbroker.bootstrap, **{"auto.offset.reset": "earliest",
                                       "enable.partition.eof": False, "group.id": f"g-{topic}"})
    try:
        c.subscribe([topic])
        seen: list[bytes] = []
        until = due / 1000 + 2.5  # the kept one's due time, and then some
        while time.time() < until:
            m = c.poll(0.3)
            if m is not None and m.error() is None:
                seen.append(m.value())
        assert seen == [b"keep"], seen  # the cancelled one never comes
    finally:
        c.close()
    assert _pending(rest, topic)["pending"] == 0
    for body_, status_ in (({}, 400), ({"schedule_id": ""}, 400),
                           ({"schedule_id": "x", "partition_id": 5}, 404)):
        got, _ = rest.call("POST", f"{rest.cl}/topics/{topic}/scheduled:cancel", body_)
        assert got == status_, body_
    assert rest.call("POST", f"{rest.cl}/topics/no-{topic}/scheduled:cancel",
                     {"schedule_id": "x"})[0] == 404
    assert rest.call("GET", f"{rest.cl}/scheduled?topic=no-{topic}")[0] == 404


def test_dead_letters_are_listed_replayed_and_purged_over_http(hbroker: Deployment,
                                                               topic: str) -> None:
    rest = Rest(hbroker)
    status, made = rest.call("POST", f"{rest.cl}/topics", {
        "topic_name": topic, "partitions_count": 2, "replication_factor": hbroker.replication,
        "configs": [{"name": "kc.retry.max.attempts", "value": "0"}]})
    assert status == 201, made
    body = b"".join(
        json.dumps(_record(v, key=k, partition=i % 2)).encode()
        for i, (k, v) in enumerate([(b"a", b"va"), (b"b", b"vb"), (b"c", b"vc")]))
    status, reports = rest.call("POST", f"{rest.cl}/topics/{topic}/records", raw=body)
    assert status == 200 and all(r["error_code"] == 200 for r in reports), reports
    c = consumer(hbroker.bootstrap, **{"auto.offset.reset": "earliest", "group.id": f"g-{topic}",
                                       "enable.partition.eof": False})
    p = Producer({"bootstrap.servers": hbroker.bootstrap})
    try:
        c.subscribe([topic])
        failed = 0
        deadline = time.monotonic() + 30
        while failed < 2:
            assert time.monotonic() < deadline
            m = c.poll(0.3)
            if m is None or m.error() is not None:
                continue
            if m.key() in (b"a", b"b"):
                nack(p, m, "boom")
                failed += 1
        assert p.flush(30) == 0
    finally:
        c.close()
    dlq = topic + ".dlq"
    listed = _until(lambda: rest.call("GET", f"{rest.cl}/dead-letters")[1],
                    lambda b: any(t["topic_name"] == dlq and t["records"] == 2
                                  for t in b["data"]), timeout_s=20)
    (entry,) = [t for t in listed["data"] if t["topic_name"] == dlq]
    assert entry["original_topic"] == topic
    before = _ends(hbroker.bootstrap, topic, 2)
    status, dry = rest.call("POST", f"{rest.cl}/dead-letters/{dlq}:replay", {})
    assert status == 200 and dry["executed"] is False and dry["records"] == 2, dry
    assert {r["to_topic"] for r in dry["data"]} == {topic}
    assert _ends(hbroker.bootstrap, topic, 2) == before  # a dry run sends nothing
    # the dead letter of key "a", found by browsing the dead-letter topic
    located = None
    for part in entry["partitions"]:
        status, page = rest.call(
            "GET", f"{rest.cl}/topics/{dlq}/partitions/{part['partition_id']}/records")
        for r in page["data"]:
            if base64.b64decode(r["key"]["data"]) == b"a":
                located = (part["partition_id"], r["offset"])
    assert located is not None
    status, done = rest.call("POST", f"{rest.cl}/dead-letters/{dlq}:replay", {
        "partition_id": located[0], "offsets": [located[1]], "execute": True})
    assert status == 200 and done["executed"] and done["records"] == 1, done
    (row,) = done["data"]
    assert row["error_code"] == 200 and row["to_topic"] == topic and row["to_partition"] == 0
    status, page = rest.call("GET", f"{rest.cl}/topics/{topic}/partitions/0/records"
                                    f"?offset={row['replayed_offset']}")
    (again,) = page["data"]
    assert base64.b64decode(again["value"]["data"]) == b"va"
    assert not [h for h in again["headers"] if h["name"].startswith("kc-")], again["headers"]
    status, dry = rest.call("POST", f"{rest.cl}/dead-letters/{dlq}:purge", {})
    assert status == 200 and dry["records"] == 2 and not dry["executed"]
    assert rest.call("GET", f"{rest.cl}/dead-letters")[1]["data"]
    status, purged = rest.call("POST", f"{rest.cl}/dead-letters/{dlq}:purge", {"execute": True})
    assert status == 200 and purged["executed"], purged
    listed = rest.call("GET", f"{rest.cl}/dead-letters")[1]
    assert [t["records"] for t in listed["data"] if t["topic_name"] == dlq] == [0]
    status, error = rest.call("POST", f"{rest.cl}/dead-letters/{dlq}:replay",
                              {"filter": "kc-attempt >"})
    assert status == 400 and "filter" in error["message"]
    assert rest.call("POST", f"{rest.cl}/dead-letters/{dlq}:replay", {"to": dlq})[0] == 400
