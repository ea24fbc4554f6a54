"""Reading records over HTTP: kcompat's own endpoint, beside REST Proxy's shapes.

REST Proxy v3 has no way to read records (v2 has consumer instances, which
hold state on the proxy). kcompat serves a stateless page of one partition::

    GET /v3/clusters/{c}/topics/{t}/partitions/{p}/records
        ?offset=N | ?timestamp=MS     where to start (default: the log start)
        &limit=L                      records at most (default 100, at most 1000)
        &filter=EXPR                  the filtered views' language over headers
        &isolation=read_committed     (default read_uncommitted)

It is what a consumer does: ListOffsets for a timestamp, then Fetch from the
partition's leader (in-process, or in an envelope to it), the batches
decoded, control records left out and, read_committed, the records of
aborted transactions too (as Kafka's consumer drops them). A filter skips
records without counting them, so a page scans at most ``SCAN_BYTES`` of log
before it answers with what it found; ``metadata.next`` is the link to the
page after (the offset after the last record scanned), null at the end. Keys,
values and header values come as base64 (``{"type": "BINARY", "data": ...}``
as produce takes them); the log's start and end come with every page, so a
client pages through a million records without holding any of them.

``GET .../partitions/{p}/offsets`` answers ``{"beginning_offset",
"end_offset"}`` as REST Proxy v2's endpoint of that name.
"""

from __future__ import annotations

import base64
import datetime
from typing import Any
from urllib.parse import quote

import trio
from starlette.responses import JSONResponse, Response

from kcompat.broker.http.rest import Ctx, RestError, check, iso_ms
from kcompat.broker.http.rest_admin import partition_of
from kcompat.ext.view_filter import Filter, FilterError, parse
from kcompat.wire import batch as wbatch
from kcompat.wire import codec
from kcompat.wire import versions as v
from kcompat.wire.records import Record, decode_batch

LIMIT_DEFAULT, LIMIT_MAX = 100, 1000
FETCH_ATTEMPTS = 20
THROTTLE_MAX_S = 30.0
FETCH_BYTES = 1 << 20
SCAN_BYTES = 8 << 20
EARLIEST, LATEST = -2, -1


async def list_offset(c: Ctx, leader: int, topic: str, index: int, when: int,
                       isolation: int) -> int:
    mod = codec.request_module(v.LIST_OFFSETS, 7)
    answer = await c.call(v.LIST_OFFSETS, 7, leader, replica_id=-1, isolation_level=isolation,
                          topics=(mod.ListOffsetsTopic(name=topic, partitions=(
                              mod.ListOffsetsPartition(partition_index=index,
                                                       current_leader_epoch=-1,
                                                       timestamp=when),)),))
    part = answer.topics[0].partitions[0]
    check(part.error_code, None, f"{topic}-{index}")
    return int(part.offset)


async def fetch(c: Ctx, leader: int, topic: str, index: int, offset: int,
                 isolation: int) -> Any:
    """One Fetch of the partition from ``offset``. A fetch quota's throttle
    (an answer without the partition, KIP-219) is waited out and the fetch
    asked again, as a consumer does."""
    mod = codec.request_module(v.FETCH, 12)
    for _attempt in range(FETCH_ATTEMPTS):
        answer = await c.call(
            v.FETCH, 12, leader, cluster_id=None, replica_id=-1,
            max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=FETCH_BYTES,
            isolation_level=isolation, session_id=0, session_epoch=-1,
            topics=(mod.FetchTopic(topic=topic, partitions=(mod.FetchPartition(
                partition=index, current_leader_epoch=-1, fetch_offset=offset,
                last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=FETCH_BYTES),)),),
            forgotten_topics_data=(), rack_id="")
        check(answer.error_code, None)
        if answer.responses and answer.responses[0].partitions:
            part = answer.responses[0].partitions[0]
            check(part.error_code, None, f"{topic}-{index}")
            return part
        await trio.sleep(min(max(answer.throttle_time.total_seconds(), 0.01), THROTTLE_MAX_S))
    raise RestError(500, f"{topic}-{index}: the fetch stayed throttled (a fetch quota)", 50003)


def complete_batches(records: bytes | memoryview) -> list[memoryview]:
    """The whole batches of a fetched records field: a fetch may end inside
    its last batch (cut at the size asked), which a consumer reads again."""
    view = memoryview(records)
    out: list[memoryview] = []
    pos = 0
    while len(view) - pos >= wbatch.LOG_OVERHEAD:
        size = wbatch.batch_length_at(view, pos)
        if size < wbatch.HEADER_SIZE or pos + size > len(view):
            break
        out.append(view[pos:pos + size])
        pos += size
    return out


def shown(rec: Record) -> dict[str, Any]:
    """A record as the API shows it: bytes in base64, as produce takes them."""
    return {"offset": rec.offset, "timestamp": iso_ms(rec.timestamp),
            "timestamp_ms": rec.timestamp, "key": _data(rec.key), "value": _data(rec.value),
            "headers": [{"name": k, "value": None if val is None else
                         base64.b64encode(val).decode()} for k, val in rec.headers]}


def _data(raw: bytes | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    return {"type": "BINARY", "data": base64.b64encode(raw).decode(), "size": len(raw)}


class Page:
    """Records gathered from successive fetches, aborted transactions left out."""

    def __init__(self, limit: int, wanted: Filter | None, committed: bool) -> None:
        self.limit = limit
        self.filter = wanted
        self.committed = committed
        self.records: list[Record] = []  # shown as JSON by ``shown``, replayed as they are
        self.aborted: dict[int, list[int]] = {}  # producer id -> first offsets, sorted
        self.ongoing: set[int] = set()  # producers whose batches are being dropped

    def take(self, part: Any, position: int) -> int:
        """Add the fetched batches from ``position`` on; the next offset to read."""
        for txn in part.aborted_transactions or ():
            firsts = self.aborted.setdefault(int(txn.producer_id), [])
            if int(txn.first_offset) not in firsts:
                firsts.append(int(txn.first_offset))
                firsts.sort()
        for view in complete_batches(part.records or b""):
            header = wbatch.parse_header(view)
            if header.next_offset <= position:
                continue
            if self._dropped(header, view):
                position = header.next_offset
                continue
            for rec in decode_batch(view):
                if rec.offset < position:
                    continue
                position = rec.offset + 1
                if self.filter is not None and not self.filter.matches(rec.headers):
                    continue
                self.records.append(rec)
                if len(self.records) >= self.limit:
                    return position
            position = max(position, header.next_offset)
        return position

    def _dropped(self, header: wbatch.BatchHeader, view: memoryview) -> bool:
        """A control batch always; read_committed, an aborted transaction's batch."""
        pid = header.producer_id
        if header.is_control:
            if self.committed and pid in self.ongoing:
                self.ongoing.discard(pid)  # its abort marker: the transaction ends
                firsts = self.aborted.get(pid)
                if firsts:
                    firsts.pop(0)
            return True
        if not (self.committed and header.is_transactional):
            return False
        firsts = self.aborted.get(pid)
        if pid in self.ongoing or (firsts and firsts[0] <= header.last_offset):
            self.ongoing.add(pid)
            return True
        return False


async def read_records(c: Ctx) -> Response:
    topic, index = c.param("topic_name"), c.int_param("partition_id")
    q = c.request.query_params
    limit = c.query_int("limit", LIMIT_DEFAULT) or 0
    if not 1 <= limit <= LIMIT_MAX:
        raise RestError(400, f"limit must be 1 to {LIMIT_MAX}, not {limit}")
    isolation_name = q.get("isolation", "read_uncommitted")
    if isolation_name not in ("read_uncommitted", "read_committed"):
        raise RestError(400, "isolation must be read_uncommitted or read_committed, "
                             f"not {isolation_name!r}")
    isolation = int(isolation_name == "read_committed")
    wanted = None
    if q.get("filter"):
        try:
            wanted = parse(q["filter"])
        except FilterError as e:
            raise RestError(400, f"filter: {e}") from None
    leader = (await partition_of(c, topic, index)).leader_id
    if leader < 0:
        raise RestError(500, f"{topic}-{index} has no leader at the moment", 50003)
    begin = await list_offset(c, leader, topic, index, EARLIEST, isolation)
    end = await list_offset(c, leader, topic, index, LATEST, isolation)
    if "offset" in q and "timestamp" in q:
        raise RestError(400, "give offset or timestamp, not both")
    if "timestamp" in q:
        when = c.query_int("timestamp")
        assert when is not None
        found = await list_offset(c, leader, topic, index, when, isolation)
        position = end if found < 0 else found
    else:
        position = min(end, max(begin, c.query_int("offset", begin) or 0))
    page = Page(limit, wanted, bool(isolation))
    scanned = 0
    while position < end and len(page.records) < limit and scanned < SCAN_BYTES:
        part = await fetch(c, leader, topic, index, position, isolation)
        records = part.records or b""
        if not records:
            break
        scanned += len(records)
        before, position = position, page.take(part, position)
        if position == before:
            break  # nothing whole came back: the next page starts here again
        end = max(end, int(part.last_stable_offset if isolation else part.high_watermark))
    base = c.url("topics", topic, "partitions", index, "records")
    more = f"{base}?offset={position}&limit={limit}" + (
        f"&isolation={isolation_name}" if isolation else "")
    if wanted is not None:
        more += "&filter=" + quote(q["filter"], safe="")
    return JSONResponse({
        "kind": "KcompatRecordList",
        "metadata": {"self": str(c.request.url), "next": more if position < end else None},
        "cluster_id": c.cluster_id, "topic_name": topic, "partition_id": index,
        "beginning_offset": begin, "end_offset": end, "next_offset": position,
        "data": [shown(rec) for rec in page.records]})


async def offsets(c: Ctx) -> Response:
    topic, index = c.param("topic_name"), c.int_param("partition_id")
    leader = (await partition_of(c, topic, index)).leader_id
    if leader < 0:
        raise RestError(500, f"{topic}-{index} has no leader at the moment", 50003)
    return JSONResponse({
        "beginning_offset": await list_offset(c, leader, topic, index, EARLIEST, 0),
        "end_offset": await list_offset(c, leader, topic, index, LATEST, 0)})


def routes() -> list[tuple[str, Any, str]]:
    part = "/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}"
    return [(part + "/records", read_records, "GET"), (part + "/offsets", offsets, "GET")]
