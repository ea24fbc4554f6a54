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


def _until_kept(c: Any, due: int, margin_s: float = 1.5) -> list[bytes]:
    """What a consumer reads until the kept delayed record (due at ``due``)
    has come, however late, and ``margin_s`` after it: a cancelled record
    due at the same time would have come by then (at most 30 s)."""
    seen: list[bytes] = []
    deadline, until = time.time() + 30, None
    while time.time() < (until or deadline):
        m = c.poll(0.3)
        if m is not None and m.error() is None:
            seen.append(m.value())
            if m.value() == b"keep" and until is None:
                until = max(time.time(), due / 1000) + margin_s
    return seen


def _pending(rest: Rest, topic: str) -> dict[str, Any]:
    status, body = rest.call("GET", f"{rest.cl}/scheduled?topic={topic}")
    assert status == 200, body
    return body


def test_delayed_records_are_counted_and_one_is_cancelled_over_http(
        hbroker: Deployment, topic: str) -> None:
    create_topic(hbroker.bootstrap, topic, partitions=1, replication=hbroker.replication)
    p = Producer({"bootstrap.servers": hbroker.bootstrap})
    due = int(time.time() * 1000) + 6000  # time to cancel before it is due, loaded or not
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
        seen = _until_kept(c, due)
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
    # only a dead-letter topic is purged or replayed: the topic itself is refused
    ends = _ends(hbroker.bootstrap, topic, 2)
    for verb in ("purge", "replay"):
        status, error = rest.call("POST", f"{rest.cl}/dead-letters/{topic}:{verb}",
                                  {"execute": True})
        assert status == 400 and "not a dead-letter topic" in error["message"], error
    assert _ends(hbroker.bootstrap, topic, 2) == ends


def test_a_share_groups_records_in_flight_with_their_delivery_counts(
        hbroker: Deployment, topic: str) -> None:
    """A confluent-kafka ShareConsumer (explicit acknowledgement) holds records
    it has not acknowledged: the share group's page shows them ACQUIRED by
    that member with delivery count 1, then the ones it accepted done."""
    from confluent_kafka import AcknowledgeType, ShareConsumer

    from .._share import set_group_configs

    create_topic(hbroker.bootstrap, topic, partitions=1, replication=hbroker.replication)
    p = Producer({"bootstrap.servers": hbroker.bootstrap})
    for i in range(6):
        p.produce(topic, value=b"%d" % i)
    assert p.flush(30) == 0
    group = f"sg-{topic}"
    set_group_configs(hbroker.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    c = ShareConsumer({"bootstrap.servers": hbroker.bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit"})
    rest = Rest(hbroker, index=-1)
    try:
        c.subscribe([topic])
        held: list[Any] = []
        deadline = time.monotonic() + 30
        while len(held) < 6:
            assert time.monotonic() < deadline, f"the share consumer got {len(held)} of 6"
            held += [m for m in c.poll(0.5) if m.error() is None]
        for m in held[:2]:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        c.commit_sync(30)  # ShareAcknowledge: the two accepted, the rest still held
        status, listed = rest.call("GET", f"{rest.cl}/share-groups")
        assert status == 200 and group in {g["group_id"] for g in listed["data"]}, listed
        body = _until(lambda: rest.call("GET", f"{rest.cl}/share-groups/{group}")[1],
                      lambda b: b.get("partitions") and b["partitions"][0]["counts"][
                          "acquired"] == 4, timeout_s=20)
        assert body["kind"] == "KcompatShareGroup" and body["state"] == "STABLE"
        (member,) = body["members"]
        assert member["assignments"] == [{"topic_name": topic, "partition_id": 0}]
        (part,) = body["partitions"]
        assert (part["topic_name"], part["start_offset"]) == (topic, 2)
        assert [(r["first_offset"], r["last_offset"], r["state"], r["delivery_count"],
                 r["member_id"]) for r in part["in_flight"]] == [
            (2, 5, "ACQUIRED", 1, member["member_id"])]
    finally:
        c.close()
    assert rest.call("GET", f"{rest.cl}/share-groups/no-{group}")[0] == 404
    assert rest.call("GET", f"{rest.cl}/share-groups/{group}?limit=0")[0] == 400


def test_dedup_windows_and_views_show_what_they_dropped(hbroker: Deployment,
                                                        topic: str) -> None:
    rest = Rest(hbroker)
    status, _ = rest.call("POST", f"{rest.cl}/topics", {
        "topic_name": topic, "partitions_count": 1, "replication_factor": hbroker.replication,
        "configs": [{"name": "kc.dedup.window.ms", "value": "600000"}]})
    assert status == 201
    view = f"{topic}-red"
    status, made = rest.call("POST", f"{rest.cl}/topics", {
        "topic_name": view, "configs": [{"name": "kc.view.of", "value": topic},
                                        {"name": "kc.view.filter", "value": "color = 'red'"}]})
    assert status == 201, made
    p = Producer({"bootstrap.servers": hbroker.bootstrap})
    for i, (dedup_id, color) in enumerate([("a", "red"), ("a", "red"), ("b", "blue"),
                                          ("c", "red")]):
        p.produce(topic, value=b"%d" % i, headers=[("kc-dedup-id", dedup_id.encode()),
                                                  ("color", color.encode())])
        assert p.flush(30) == 0  # one at a time: the second "a" is a duplicate
    c = consumer(hbroker.bootstrap, **{"auto.offset.reset": "earliest",
                                       "enable.partition.eof": False, "group.id": f"g-{view}"})
    try:
        c.subscribe([view])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 2:
            assert time.monotonic() < deadline, got
            m = c.poll(0.3)
            if m is not None and m.error() is None:
                got.append(m.value())
        assert got == [b"0", b"3"]
    finally:
        c.close()
    dedup = _until(lambda: rest.call("GET", f"{rest.cl}/dedup")[1],
                   lambda b: any(d["topic_name"] == topic for d in b["data"]))
    (window,) = [d for d in dedup["data"] if d["topic_name"] == topic]
    assert (window["window_ms"], window["window_ids"], window["duplicates_dropped"]) == (
        600000, 3, 1), window
    views = _until(lambda: rest.call("GET", f"{rest.cl}/views")[1],
                   lambda b: any(v["view_name"] == view and v["matched"] for v in b["data"]))
    (shown,) = [v for v in views["data"] if v["view_name"] == view]
    assert (shown["source_topic"], shown["filter"], shown["matched"], shown["filtered"]) == (
        topic, "color = 'red'", 2, 1), shown
