"""kcompat's extensions over HTTP: delayed records and dead letters.

Not in REST Proxy (Kafka has neither); the shapes follow its conventions
(``kind``, ``metadata``, ``data``; errors as everywhere else).

* ``GET /v3/clusters/{c}/scheduled[?topic=T]`` — the delayed records waiting,
  per target partition, and per schedule partition its earliest due time and
  how late it is. Each schedule partition's leader answers for what it holds
  (a query in an envelope to every broker); the counts are kept as records
  come and go, so the answer costs the same with a million waiting.
* ``POST /v3/clusters/{c}/topics/{t}/scheduled:cancel`` ``{"schedule_id",
  "partition_id"?}`` — what any producer can do: a record with header
  ``kc-cancel-schedule`` to each partition (or the one named); it is not
  stored, and the delayed record with that id there is never delivered.
* ``GET /v3/clusters/{c}/dead-letters`` — the dead-letter topics (``*.dlq``)
  with their records per partition. Browse one with the records endpoint.
* ``POST /v3/clusters/{c}/dead-letters/{t}:replay`` ``{"execute", "partition_id"?,
  "offsets"?, "filter"?, "to"?}`` — the chosen dead letters back into their
  topic (``to``, else the ``kc-dlq-original-topic`` of each, else T without
  ``.dlq``; into their original partition when known and ``to`` is not
  given), same key, value and timestamp, the broker's bookkeeping headers
  removed. Without ``"execute": true`` a dry run listing what would go where;
  at most ``REPLAY_MAX`` per call. Replaying leaves them in place.
* ``POST /v3/clusters/{c}/dead-letters/{t}:purge`` ``{"execute"}`` — DeleteRecords
  up to the end of every partition; a dry run unless ``execute``.
"""

from __future__ import annotations

import datetime
from typing import Any

from starlette.responses import JSONResponse, Response

from kcompat.broker.http.rest import Ctx, RestError, check, iso_ms, need
from kcompat.broker.http.rest_admin import TIMEOUT, metadata, one_topic
from kcompat.broker.http.rest_groups import every_broker
from kcompat.broker.http.rest_read import EARLIEST, LATEST, Page, fetch, list_offset
from kcompat.broker.http.rest_records import OutRecord, deliver
from kcompat.ext.delay import CANCEL_SCHEDULE
from kcompat.ext.retry import DLQ_ORIGINAL_PARTITION, DLQ_ORIGINAL_TOPIC, DLQ_SUFFIX, replayable
from kcompat.ext.view_filter import FilterError, parse
from kcompat.wire import codec
from kcompat.wire import versions as v
from kcompat.wire.records import Record

REPLAY_MAX = 10_000


# -- delayed records ------------------------------------------------------------------------


async def scheduled(c: Ctx) -> Response:
    topic = c.request.query_params.get("topic")
    if topic is not None:
        await one_topic(c, topic)  # 404 unless it exists and the caller may see it
    found = [(node, part) for node, answer in
             await every_broker(c, "scheduled", {"topic": topic}) for part in answer]
    visible = None if topic is not None else {
        t.name for t in (await metadata(c, None)).topics if t.error_code == 0}
    targets = []
    schedule_partitions = []
    for node, part in sorted(found, key=lambda f: f[1]["schedule_partition"]):
        shown = [(t, p, n) for t, p, n in part["targets"] if visible is None or t in visible]
        targets += [{"topic_name": t, "partition_id": p, "pending": n,
                     "schedule_partition": part["schedule_partition"], "broker_id": node}
                    for t, p, n in shown]
        schedule_partitions.append({
            "schedule_partition": part["schedule_partition"], "broker_id": node,
            "pending": sum(n for _t, _p, n in shown),
            "earliest_due": None if part["earliest_due_ms"] is None
            else iso_ms(part["earliest_due_ms"]),
            "earliest_due_ms": part["earliest_due_ms"], "overdue_s": part["overdue_s"]})
    targets.sort(key=lambda t: (t["topic_name"], t["partition_id"]))
    return JSONResponse({"kind": "KcompatScheduledList",
                         "metadata": {"self": str(c.request.url), "next": None},
                         "pending": sum(t["pending"] for t in targets),
                         "data": targets, "schedule_partitions": schedule_partitions})


async def cancel(c: Ctx) -> Response:
    topic_name = c.param("topic_name")
    doc = await c.body()
    schedule_id = need(doc, "schedule_id", str)
    if not schedule_id:
        raise RestError(400, "schedule_id must not be empty")
    topic = await one_topic(c, topic_name)
    wanted = need(doc, "partition_id", int, required=False)
    indexes = sorted(p.partition_index for p in topic.partitions)
    if wanted is not None:
        if wanted not in indexes:
            raise RestError(404, f"This server does not host this topic-partition: "
                                 f"{topic_name}-{wanted}", 40403)
        indexes = [wanted]
    now = int(datetime.datetime.now(datetime.UTC).timestamp() * 1000)
    records = [OutRecord(i, None, None, [(CANCEL_SCHEDULE, schedule_id.encode())], now,
                         None, None) for i in indexes]
    reports = await deliver(c, topic_name, records)
    failed = [r for r in reports if r["error_code"] != 200]
    if failed:
        return JSONResponse({"error_code": failed[0]["error_code"],
                             "message": failed[0]["message"]},
                            status_code=failed[0]["error_code"] // 100)
    return JSONResponse({"kind": "KcompatScheduleCancel", "topic_name": topic_name,
                         "schedule_id": schedule_id, "partitions": indexes})


# -- dead letters ---------------------------------------------------------------------------


async def _partition_ends(c: Ctx, topic: Any) -> list[dict[str, Any]]:
    out = []
    for p in sorted(topic.partitions, key=lambda p: p.partition_index):
        if p.leader_id < 0:
            raise RestError(500, f"{topic.name}-{p.partition_index} has no leader at the "
                                 "moment", 50003)
        begin = await list_offset(c, p.leader_id, topic.name, p.partition_index, EARLIEST, 0)
        end = await list_offset(c, p.leader_id, topic.name, p.partition_index, LATEST, 0)
        out.append({"partition_id": p.partition_index, "beginning_offset": begin,
                    "end_offset": end, "leader": p.leader_id})
    return out


async def dead_letter_topics(c: Ctx) -> Response:
    answer = await metadata(c, None)
    data = []
    for t in sorted(answer.topics, key=lambda t: t.name):
        if t.error_code != 0 or not t.name.endswith(DLQ_SUFFIX):
            continue
        parts = await _partition_ends(c, t)
        data.append({"kind": "KcompatDeadLetterTopic", "topic_name": t.name,
                     "original_topic": t.name.removesuffix(DLQ_SUFFIX),
                     "records": sum(p["end_offset"] - p["beginning_offset"] for p in parts),
                     "partitions": [{k: p[k] for k in ("partition_id", "beginning_offset",
                                                       "end_offset")} for p in parts]})
    return c.listing("KcompatDeadLetterTopicList", data)


def _text(value: bytes | None) -> str | None:
    try:
        return None if value is None else value.decode()
    except UnicodeDecodeError:
        return None


def _dead_letter_topic(name: str) -> str:
    if not name.endswith(DLQ_SUFFIX):
        raise RestError(400, f"{name} is not a dead-letter topic (its name ends with "
                             f"{DLQ_SUFFIX})")
    return name


async def replay(c: Ctx) -> Response:
    topic_name = _dead_letter_topic(c.param("topic_name"))
    doc = await c.body()
    execute = need(doc, "execute", bool, required=False, default=False)
    to = need(doc, "to", str, required=False)
    only = need(doc, "partition_id", int, required=False)
    offsets = need(doc, "offsets", list, required=False)
    if offsets is not None and (only is None or not all(
            isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
        raise RestError(400, "offsets must be a list of offsets of the partition_id given")
    wanted = None
    text = need(doc, "filter", str, required=False)
    if text:
        try:
            wanted = parse(text)
        except FilterError as e:
            raise RestError(400, f"filter: {e}") from None
    if to == topic_name:
        raise RestError(400, f"cannot replay {topic_name} into itself; name another in \"to\"")
    topic = await one_topic(c, topic_name)
    plan: list[tuple[int, Record, OutRecord, str]] = []
    for part in await _partition_ends(c, topic):
        index = part["partition_id"]
        if only is not None and index != only:
            continue
        chosen = set(offsets) if offsets is not None else None
        position, end = part["beginning_offset"], part["end_offset"]
        while position < end and len(plan) < REPLAY_MAX:
            page = Page(REPLAY_MAX - len(plan), wanted, False)
            fetched = await fetch(c, part["leader"], topic_name, index, position, 0)
            if not fetched.records:
                break
            before, position = position, page.take(fetched, position)
            if position == before:
                break  # nothing whole came back: never loop on it
            for rec in page.records:
                if chosen is not None and rec.offset not in chosen:
                    continue
                plan.append((index, rec, *_destination(topic_name, to, rec)))
    if only is not None and not any(i == only for i, *_ in plan) and offsets:
        raise RestError(404, f"no dead letter at those offsets of {topic_name}-{only}")
    rows = [{"partition_id": index, "offset": rec.offset, "to_topic": dest,
             "to_partition": out.partition} for index, rec, out, dest in plan]
    if execute:
        by_topic: dict[str, list[tuple[dict[str, Any], OutRecord]]] = {}
        for row, (_i, _s, out, dest) in zip(rows, plan, strict=True):
            by_topic.setdefault(dest, []).append((row, out))
        for dest, items in by_topic.items():
            reports = await deliver(c, dest, [out for _row, out in items])
            for (row, _out), report in zip(items, reports, strict=True):
                row["error_code"] = report["error_code"]
                if report["error_code"] == 200:
                    row["to_partition"] = report["partition_id"]
                    row["replayed_offset"] = report["offset"]
                else:
                    row["message"] = report["message"]
    return JSONResponse({"kind": "KcompatDeadLetterReplay", "topic_name": topic_name,
                         "executed": execute, "records": len(rows), "data": rows})


def _destination(dlq: str, to: str | None, rec: Record) -> tuple[OutRecord, str]:
    notes = dict(rec.headers)
    dest = to or _text(notes.get(DLQ_ORIGINAL_TOPIC)) or dlq.removesuffix(DLQ_SUFFIX)
    original = _text(notes.get(DLQ_ORIGINAL_PARTITION))
    partition = int(original) if not to and original is not None and original.isdigit() \
        else None

    out = OutRecord(partition, rec.key, rec.value, list(replayable(tuple(rec.headers))),
                    rec.timestamp, None if rec.key is None else "BINARY",
                    None if rec.value is None else "BINARY")
    return out, dest


async def purge(c: Ctx) -> Response:
    topic_name = _dead_letter_topic(c.param("topic_name"))
    execute = need(await c.body(), "execute", bool, required=False, default=False)
    topic = await one_topic(c, topic_name)
    parts = await _partition_ends(c, topic)
    rows = [{"partition_id": p["partition_id"], "deleted_before": p["end_offset"],
             "records": p["end_offset"] - p["beginning_offset"]} for p in parts]
    if execute:
        mod = codec.request_module(v.DELETE_RECORDS, 2)
        by_leader: dict[int, list[Any]] = {}
        for p in parts:
            by_leader.setdefault(p["leader"], []).append(mod.DeleteRecordsPartition(
                partition_index=p["partition_id"], offset=p["end_offset"]))
        for leader, wanted in by_leader.items():
            answer = await c.call(v.DELETE_RECORDS, 2, leader, topics=(
                mod.DeleteRecordsTopic(name=topic_name, partitions=tuple(wanted)),),
                timeout=TIMEOUT)
            for result in answer.topics[0].partitions:
                check(result.error_code, None, f"{topic_name}-{result.partition_index}")
    return JSONResponse({"kind": "KcompatDeadLetterPurge", "topic_name": topic_name,
                         "executed": execute, "records": sum(r["records"] for r in rows),
                         "data": rows})


# -- dedup windows and views ---------------------------------------------------------------


async def _visible_topics(c: Ctx) -> set[str]:
    return {t.name for t in (await metadata(c, None)).topics if t.error_code == 0}


async def dedup_windows(c: Ctx) -> Response:
    image = c.broker.state.metadata.image
    visible = await _visible_topics(c)
    totals: dict[str, list[int]] = {}
    for _node, answer in await every_broker(c, "dedup", {}):
        for topic, row in answer.items():
            acc = totals.setdefault(topic, [0, 0, 0])
            for i, n in enumerate(row):
                acc[i] += n
    data = []
    for name in sorted(visible):
        meta = image.topics.get(name)
        window = int((meta.configs if meta else {}).get("kc.dedup.window.ms") or 0)
        if window <= 0:
            continue
        ids, dropped, evicted = totals.get(name, [0, 0, 0])
        data.append({"kind": "KcompatDedupWindow", "topic_name": name, "window_ms": window,
                     "by": meta.configs.get("kc.dedup.by", "header") if meta else "header",
                     "window_ids": ids, "duplicates_dropped": dropped, "evictions": evicted})
    return c.listing("KcompatDedupList", data)


async def views(c: Ctx) -> Response:
    image = c.broker.state.metadata.image
    visible = await _visible_topics(c)
    counts: dict[str, list[int]] = {}
    for _node, answer in await every_broker(c, "views", {}):
        for view, (matched, filtered) in answer.items():
            acc = counts.setdefault(view, [0, 0])
            acc[0] += matched
            acc[1] += filtered
    data = []
    for name in sorted(visible):
        meta = image.topics.get(name)
        if meta is None or meta.view_of is None:
            continue
        matched, filtered = counts.get(name, [0, 0])
        data.append({"kind": "KcompatView", "view_name": name, "source_topic": meta.view_of,
                     "filter": meta.configs.get("kc.view.filter"), "matched": matched,
                     "filtered": filtered})
    return c.listing("KcompatViewList", data)


def routes() -> list[tuple[str, Any, str]]:
    cl = "/clusters/{cluster_id}"
    return [(cl + "/scheduled", scheduled, "GET"),
            (cl + "/topics/{topic_name}/scheduled:cancel", cancel, "POST"),
            (cl + "/dead-letters", dead_letter_topics, "GET"),
            (cl + "/dead-letters/{topic_name}:replay", replay, "POST"),
            (cl + "/dead-letters/{topic_name}:purge", purge, "POST"),
            (cl + "/dedup", dedup_windows, "GET"), (cl + "/views", views, "GET")]
