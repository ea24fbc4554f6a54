"""REST v3: producing records (``POST .../topics/{topic}/records``).

A body holds one record, or several JSON objects one after another (REST
Proxy's streaming form); each is ``{"partition_id", "key", "value",
"headers", "timestamp"}`` with ``key`` and ``value`` as ``{"type": "BINARY",
"data": base64}``, ``{"type": "JSON", "data": any JSON}`` or ``{"type":
"STRING", "data": text}`` (kcompat's addition), and headers as ``[{"name",
"value": base64}]`` — so ``kc-delay-ms``, ``kc-dedup-id`` and every other
extension header work over HTTP as from a Kafka client. Schema types (AVRO,
PROTOBUF, JSONSCHEMA) need a schema registry, which kcompat does not have:
400.

Records without a partition go where Kafka's Java producer would send them:
a key's murmur2 hash modulo the partition count; keyless records fill one
partition's batch (up to 16 KiB of values, the producer's ``batch.size``)
before the next partition in turn, as the producer's sticky partitioner does
(KIP-480), so a body of small keyless records is one batch, not one per
partition. The records of one body are grouped per partition into
one batch each and sent as one Produce (acks=all) per leader — in-process to
this broker's partitions, in an envelope to the others' — so a body of 100
records costs a few requests, not 100. The answer is one report per record,
in order: a single record's report is the body; several are JSON objects
one after another. A bad record refuses the whole body before anything is
sent (400, nothing stored); a partition's Kafka error fails that partition's
records' reports with its code. A topic's leaders are kept a second per
caller, as a producer keeps its metadata; after a stale-leader error
(NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE and the like: nothing was
stored) they are looked up again and that partition's records sent once
more, at once and then after a backoff (0.1 s doubling to 1 s, as a
producer's ``retry.backoff.ms``) for up to ``RETRY_FOR_S`` — an election
after a broker died takes a few seconds — before their error is reported.
"""

from __future__ import annotations

import binascii
import datetime
import itertools
import json
import time
from dataclasses import dataclass
from typing import Any

import trio
from kio.schema.errors import ErrorCode
from starlette.responses import JSONResponse, Response

from kcompat.broker.http.rest import RETRIABLE, Ctx, RestError, iso_ms, kafka_error
from kcompat.broker.http.rest_admin import one_topic
from kcompat.wire import codec
from kcompat.wire import versions as v
from kcompat.wire.records import encode_batch

TIMEOUT = datetime.timedelta(seconds=30)
THROTTLE_MAX_S = 30.0
_keyless = itertools.count()
#: keyless records fill one partition's batch up to this many value bytes before
#: the next partition in turn (the Java producer's ``batch.size`` default)
STICKY_BYTES = 16384


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (the Java client's ``Utils.murmur2``), as a signed int32."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    whole = length & ~3
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length & 3
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


@dataclass(slots=True)
class OutRecord:
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp: int
    key_type: str | None
    value_type: str | None
    offset: int = -1  # once stored
    error: tuple[int, str] | None = None  # (REST error code, message) once refused

    def report(self, cluster_id: str, topic: str) -> dict[str, Any]:
        """REST Proxy's report of this record, once sent."""
        if self.error is not None:
            return {"error_code": self.error[0], "message": self.error[1]}
        return {"error_code": 200, "cluster_id": cluster_id, "topic_name": topic,
                "partition_id": self.partition, "offset": self.offset,
                "timestamp": iso_ms(self.timestamp),
                "key": None if self.key_type is None else
                {"type": self.key_type, "size": len(self.key or b"")},
                "value": None if self.value_type is None else
                {"type": self.value_type, "size": len(self.value or b"")}}


def _data(doc: dict[str, Any], name: str) -> tuple[bytes | None, str | None]:
    part = doc.get(name)
    if part is None:
        return None, None
    if not isinstance(part, dict):
        raise RestError(400, f"{name} must be an object such as {{\"type\": \"BINARY\", "
                             f"\"data\": \"...\"}}")
    kind = part.get("type")
    data = part.get("data")
    if kind is None:
        raise RestError(400, f"{name}.type is required: BINARY, JSON or STRING (kcompat has "
                             "no schema registry)")
    kind = str(kind).upper()
    if data is None:
        return None, kind
    if kind == "BINARY":
        if not isinstance(data, str):
            raise RestError(400, f"{name}.data of type BINARY must be a base64 string")
        try:
            return binascii.a2b_base64(data, strict_mode=True), kind
        except (binascii.Error, ValueError):
            raise RestError(400, f"{name}.data is not valid base64: {data[:40]!r}") from None
    if kind == "JSON":
        return json.dumps(data, separators=(",", ":")).encode(), kind
    if kind == "STRING":
        if not isinstance(data, str):
            raise RestError(400, f"{name}.data of type STRING must be a string")
        return data.encode(), kind
    if kind in ("AVRO", "PROTOBUF", "JSONSCHEMA"):
        raise RestError(400, f"{name}.type {kind} needs a schema registry, which kcompat does "
                             "not have: send BINARY, JSON or STRING")
    raise RestError(400, f"{name}.type must be BINARY, JSON or STRING, not {kind!r}")


def _headers(doc: dict[str, Any]) -> list[tuple[str, bytes | None]]:
    raw = doc.get("headers") or []
    if not isinstance(raw, list):
        raise RestError(400, "headers must be a list of {\"name\", \"value\"} objects")
    out: list[tuple[str, bytes | None]] = []
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise RestError(400, "each header needs a string name")
        value = item.get("value")
        if value is None:
            out.append((item["name"], None))
            continue
        if not isinstance(value, str):
            raise RestError(400, f"header {item['name']}: value must be a base64 string")
        try:
            out.append((item["name"], binascii.a2b_base64(value, strict_mode=True)))
        except (binascii.Error, ValueError):
            raise RestError(400, f"header {item['name']}: value is not valid base64: "
                                 f"{value[:40]!r}") from None
    return out


def _timestamp(doc: dict[str, Any], now: int) -> int:
    raw = doc.get("timestamp")
    if raw is None:
        return now
    if not isinstance(raw, str):
        raise RestError(400, "timestamp must be an ISO 8601 date-time string")
    try:
        when = datetime.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise RestError(400, f"timestamp is not an ISO 8601 date-time: {raw!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)


def parse_records(raw: bytes) -> list[OutRecord]:
    """The records of a body: JSON objects, one after another."""
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise RestError(400, "the body is not UTF-8 JSON") from None
    decoder = json.JSONDecoder()
    now = int(time.time() * 1000)
    records: list[OutRecord] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        if pos == len(text):
            break
        try:
            doc, pos = decoder.raw_decode(text, pos)
        except ValueError as e:
            raise RestError(400, f"record {len(records)}: not JSON: {e}") from None
        if not isinstance(doc, dict):
            raise RestError(400, f"record {len(records)}: must be a JSON object")
        try:
            partition = doc.get("partition_id")
            if partition is not None and (not isinstance(partition, int)
                                          or isinstance(partition, bool) or partition < 0):
                raise RestError(400, "partition_id must be a partition number")
            key, key_type = _data(doc, "key")
            value, value_type = _data(doc, "value")
            records.append(OutRecord(partition, key, value, _headers(doc), _timestamp(doc, now),
                                   key_type, value_type))
        except RestError as e:
            raise RestError(e.status, f"record {len(records)}: {e.message}", e.code) from None
    if not records:
        raise RestError(400, "a JSON body is required")
    return records


async def produce(c: Ctx) -> Response:
    topic_name = c.param("topic_name")
    records = parse_records(await c.raw_body())
    await send(c, topic_name, records)
    if len(records) == 1:
        report = records[0].report(c.cluster_id, topic_name)
        if report["error_code"] != 200:
            return JSONResponse(report, status_code=report["error_code"] // 100)
        return JSONResponse(report)
    return Response(report_lines(records, c.cluster_id, topic_name).encode(),
                    media_type="application/json")


def place(records: list[OutRecord], topic_name: str, count: int) -> None:
    """Give each record without a partition one of ``count``: by its key's
    murmur2, or, keyless, the sticky partition of this body (the next in turn
    once ``STICKY_BYTES`` of values went to it). 404 for a partition the
    topic lacks."""
    sticky, filled = -1, STICKY_BYTES
    for r in records:
        if r.partition is None:
            if r.key is not None:
                r.partition = partition_for_key(r.key, count)
                continue
            if filled >= STICKY_BYTES:
                sticky, filled = next(_keyless) % count, 0
            r.partition = sticky
            filled += len(r.value or b"")
        elif not 0 <= r.partition < count:
            raise RestError(404, f"This server does not host this topic-partition: "
                                 f"{topic_name}-{r.partition}", 40403)


async def deliver(c: Ctx, topic_name: str, records: list[OutRecord]) -> list[dict[str, Any]]:
    """``send`` ``records``; their reports, in order."""
    await send(c, topic_name, records)
    return [r.report(c.cluster_id, topic_name) for r in records]


#: Kafka errors after which a partition's leader is looked up again and its records
#: sent once more, as a producer refreshes its metadata and retries
STALE = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available,
                   ErrorCode.unknown_topic_or_partition, ErrorCode.fenced_leader_epoch})
#: how long a topic's partition count and leaders are reused (a producer keeps its
#: metadata up to ``metadata.max.age.ms``, refreshing sooner on a stale leader)
LAYOUT_TTL_S = 1.0
LAYOUTS_MAX = 1024
#: how long records refused by a stale leader are retried, and the backoff between
#: tries after the first (at once): a producer's retry.backoff.ms and its maximum
RETRY_FOR_S = 10.0
RETRY_BACKOFF_S = 0.1
RETRY_BACKOFF_MAX_S = 1.0
_layouts: dict[tuple[int, str, str], tuple[float, dict[int, int]]] = {}


async def _layout(c: Ctx, topic_name: str, fresh: bool = False) -> dict[int, int]:
    """Topic ``topic_name``'s leader by partition, as the caller's Metadata shows
    it (404 unless it exists and the caller may see it), kept ``LAYOUT_TTL_S``."""
    key = (id(c.broker), c.caller.principal, topic_name)  # brokers embedded in one process
    now = time.monotonic()
    kept = None if fresh else _layouts.get(key)
    if kept is not None and kept[0] > now:
        return kept[1]
    topic = await one_topic(c, topic_name)
    leaders = {p.partition_index: p.leader_id for p in topic.partitions}
    if len(_layouts) >= LAYOUTS_MAX:
        _layouts.clear()
    _layouts[key] = (now + LAYOUT_TTL_S, leaders)
    return leaders


async def _layout_led(c: Ctx, topic_name: str, deadline: float,
                      fresh: bool = False) -> dict[int, int]:
    """``_layout``, asked again after a growing backoff until ``deadline``
    while the topic answers a retriable error (LEADER_NOT_AVAILABLE: a topic
    created a moment ago whose leaders this broker has not heard yet), as a
    producer waits for its metadata."""
    backoff = RETRY_BACKOFF_S
    while True:
        try:
            return await _layout(c, topic_name, fresh)
        except RestError as e:
            if e.code != RETRIABLE or trio.current_time() + backoff >= deadline:
                raise
        await trio.sleep(backoff)
        backoff = min(backoff * 2, RETRY_BACKOFF_MAX_S)
        fresh = True


async def send(c: Ctx, topic_name: str, records: list[OutRecord]) -> None:
    """Produce ``records`` to ``topic_name`` (acks=all), a batch per partition and
    a request per leader, and set each one's offset or error. An unknown topic
    or a partition it lacks refuses them all before anything is sent. A topic
    whose leaders are not known yet, or a partition whose leader moved, is
    looked up again (and its records sent again), at once and then after a
    growing backoff, for up to ``RETRY_FOR_S``."""
    deadline = trio.current_time() + RETRY_FOR_S
    leaders = await _layout_led(c, topic_name, deadline)
    if any(r.partition is not None and r.partition not in leaders for r in records):
        leaders = await _layout_led(c, topic_name, deadline, fresh=True)  # grown since?
    place(records, topic_name, len(leaders))
    by_partition: dict[int, list[OutRecord]] = {}
    for r in records:
        assert r.partition is not None
        by_partition.setdefault(r.partition, []).append(r)
    stale = await _send_all(c, topic_name, leaders, by_partition, list(by_partition))
    backoff = 0.0  # the first retry at once: the leader usually moved, and Metadata knows
    while stale and trio.current_time() + backoff < deadline:
        await trio.sleep(backoff)
        backoff = min(max(backoff * 2, RETRY_BACKOFF_S), RETRY_BACKOFF_MAX_S)
        try:
            leaders = await _layout_led(c, topic_name, deadline, fresh=True)
        except RestError:
            return  # the topic is gone (or hidden) now: those records keep their error
        # a partition the topic no longer has (it cannot shrink) keeps its error
        again = [i for i in stale if i in leaders]
        for i in again:
            for r in by_partition[i]:
                r.error = None
        stale = await _send_all(c, topic_name, leaders, by_partition, again)


async def _send_all(c: Ctx, topic: str, leaders: dict[int, int],
                    by_partition: dict[int, list[OutRecord]], indexes: list[int]) -> list[int]:
    """Send the records of partitions ``indexes``, a request per leader, at once;
    the partitions that failed with a ``STALE`` error."""
    by_leader: dict[int, list[int]] = {}
    for index in indexes:
        by_leader.setdefault(leaders[index], []).append(index)
    stale: list[int] = []
    async with trio.open_nursery() as nursery:
        for leader, group in by_leader.items():
            nursery.start_soon(_send, c, topic, leader, group, by_partition, stale)
    return stale


async def _send(c: Ctx, topic: str, leader: int, indexes: list[int],
                by_partition: dict[int, list[OutRecord]], stale: list[int]) -> None:
    mod = codec.request_module(v.PRODUCE, 9)
    data = tuple(mod.PartitionProduceData(index=i, records=encode_batch(
        [(r.key, r.value, r.headers, r.timestamp) for r in by_partition[i]]))
        for i in indexes)
    try:
        if leader < 0:
            stale.extend(indexes)
            raise kafka_error(ErrorCode.leader_not_available, f"{topic} has no leader at the moment")
        answer = await c.call(v.PRODUCE, 9, leader, size=sum(len(d.records) for d in data),
                              transactional_id=None, acks=-1, timeout=TIMEOUT,
                              topic_data=(mod.TopicProduceData(name=topic,
                                                               partition_data=data),))
        # a quota or a service falling behind (delayed delivery's backpressure)
        # throttles the producer: the HTTP one waits it out before its answer,
        # as a Kafka client waits before its next request
        throttled = answer.throttle_time.total_seconds()
        if throttled > 0:
            await trio.sleep(min(throttled, THROTTLE_MAX_S))
        results = {p.index: p for t in answer.responses for p in t.partition_responses}
    except RestError as e:
        for i in indexes:
            for r in by_partition[i]:
                r.error = (e.code, e.message)
        return
    for i in indexes:
        result = results.get(i)
        if result is None or result.error_code != 0:
            code = ErrorCode(result.error_code) if result is not None else \
                ErrorCode.leader_not_available
            if code in STALE:
                stale.append(i)
            error = kafka_error(code, result.error_message if result is not None else None,
                                f"{topic}-{i}")
            for r in by_partition[i]:
                r.error = (error.code, error.message)
            continue
        for n, r in enumerate(by_partition[i], result.base_offset):
            r.offset = n


_compact = json.JSONEncoder(separators=(",", ":")).encode  # one encoder, not one per report


def _part_json(kind: str | None, data: bytes | None) -> str:
    return "null" if kind is None else f'{{"type":"{kind}","size":{len(data or b"")}}}'


def report_lines(records: list[OutRecord], cluster_id: str, topic: str) -> str:
    """The records' reports as compact JSON objects, one a line: a success's by
    a template (a body of many records has as many reports, and the general
    encoder costs several times more per report), an error's by the encoder."""
    cluster, name = _compact(cluster_id), _compact(topic)
    lines = [_compact(r.report(cluster_id, topic)) if r.error is not None else
             f'{{"error_code":200,"cluster_id":{cluster},"topic_name":{name},'
             f'"partition_id":{r.partition},"offset":{r.offset},'
             f'"timestamp":"{iso_ms(r.timestamp)}","key":{_part_json(r.key_type, r.key)},'
             f'"value":{_part_json(r.value_type, r.value)}}}' for r in records]
    lines.append("")
    return "\n".join(lines)


def routes() -> list[tuple[str, Any, str]]:
    return [("/clusters/{cluster_id}/topics/{topic_name}/records", produce, "POST")]
