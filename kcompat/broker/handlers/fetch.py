"""Fetch (key 1), versions 4-18.

Quirks: records are always bytes, never null — librdkafka rejects a null
MessageSet ("invalid MessageSetSize"). Fetch sessions are not kept: session_id
is always 0, so clients send full requests (and ``forgotten_topics_data`` has
nothing to forget). aiokafka and old librdkafka use v11, kafka-python v12,
librdkafka 2.x and Java 4.4 the newest both serve once every topic has an id.
From v13 topics are named by id only (KIP-516): an id this broker does not know
is UNKNOWN_TOPIC_ID for each partition asked, as Kafka answers (Kafka's
INCONSISTENT_TOPIC_ID — a local log of another incarnation of the topic —
cannot arise: the partition is found through the same metadata image that
resolved the id, and a re-created topic's partitions replace the old ones when
its record is applied); v14/v15 add
nothing a consumer sends (tiered storage, replica state of follower fetches),
v16 the KIP-951 hints (a NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH
partition carries its current leader, the response those leaders' endpoints),
v17/v18 only follower fields (directory id, high watermark). The first
partition with data gets at least one whole batch even beyond max_bytes /
partition_max_bytes. A controller-only node answers INVALID_REQUEST with no
topics, as Kafka's controller answers a Fetch that is not a Raft replica's.

Authorization: a consumer needs READ on each topic it fetches, else its
partitions are TOPIC_AUTHORIZATION_FAILED (Kafka's check of a consumer fetch;
replicas do not fetch through this API here, so Kafka's CLUSTER_ACTION check
of follower fetches has no counterpart).

Quotas (``quotas``, Kafka's KafkaApis): a consumer's Fetch reads at most what
its ``consumer_byte_rate`` allows in one quota window
(``max_value_in_quota_window``; min_bytes no more than that); once read,
the answer's size (Kafka's ``FetchResponse.sizeOf``) counts against the rate.
Over quota, those bytes are taken back and the answer is empty — no topic, no
error — carrying the throttle time, and the connection is muted for it
(KIP-219).

A partition whose log cannot be read (EIO locating the offset) answers
KAFKA_STORAGE_ERROR, as Kafka does for an offline log directory; a partition
that only cannot be written (a full disk) is read as usual
(``replication.disk_faults``).

read_committed reads stop at the last stable offset and carry the aborted
transactions overlapping the returned range, so the consumer can drop their
records; control batches are returned as they are (clients skip them).

Long poll: if fewer than min_bytes are available, wait until one of the
partitions asked has news — an append, a moved high watermark (so a moved last
stable offset), a leadership change, its deletion (``partition.wait_news``) —
then re-read, or until max_wait passes; appends to other partitions never wake
it (``kcompat_fetch_wakeups_total`` counts the wake-ups). A Fetch naming no
partition (the one a consumer sends to close its fetch session, and waits for
on close) is answered at once, as Kafka does.

Records go out zero-copy: the answer carries each partition's located
segment range and the connection sends it with ``sendfile``
(``zero_copy``; ``kcompat.fetch.sendfile=false`` copies them as before),
byte for byte what the copy would send. Nothing awaits between the read and
the built answer, so the located ranges are still the log's.

A partition answer never starts with batches that hold no record (delayed,
retried or deduplicated records taken out) when a batch with records follows
below the read's limit: it starts at that batch (``hole_reads``), as a log
whose cleaner removed them would answer; a record-less tail is answered empty
for a while, then as stored. librdkafka takes an answer without any record or
control batch for a message too large to fetch (MSG_SIZE_TOO_LARGE).

A filtered view (``views``) reads its source's partition and answers the
batches with the non-matching records taken out (holes; offsets, watermarks
and aborted transactions are the source's); the filtering one Fetch does is
bounded (``views.WORK_RECORDS``, ``WORK_BYTES``); only the headers of the
source's batches are read on the loop where their filtered form is cached,
and a large batch not filtered yet is read and filtered in a worker thread
(``ViewReader.warm``) before the Fetch reads again. A view's answer starts at
its first batch that kept a record, read past the located range if need be,
and its record-less runs are held as ``hole_reads`` holds them (``views``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import trio
from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import _authz, _quota
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.handlers._leader_hints import LeaderHints, topic_name
from kcompat.broker.host.context import RequestContext
from kcompat.broker.net import quotas
from kcompat.broker.net.zero_copy import take
from kcompat.broker.replication.read_replicas import NO_REPLICA
from kcompat.broker.storage.partition import Partition, wait_news
from kcompat.broker.storage.views import WORK_BYTES, WORK_RECORDS, Asked, Cold
from kcompat.log.partition_log import FileSlice, OffsetOutOfRange

READ_COMMITTED = 1
_HINTED = (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch)


def _epoch_error(part: Partition, requested: int) -> ErrorCode | None:
    if requested < 0 or requested == part.leader_epoch:
        return None
    if requested > part.leader_epoch:
        return ErrorCode.unknown_leader_epoch
    return ErrorCode.fenced_leader_epoch


def _partition_data(ctx: RequestContext, part: Partition | None, index: int, code: ErrorCode,
                    records: Any, aborted: tuple[Any, ...] | None,
                    current_leader: Any = None, preferred: int = NO_REPLICA) -> Any:
    # Like Kafka, an errored partition (offset out of range, fenced epoch, unknown
    # partition) carries -1 for high watermark, last stable and log start offset; an
    # unknown partition also gets an empty (not null) aborted list, as Kafka's
    # FetchResponse.partitionResponse builds it. Found by the differential tests
    # (compat_tests/FINDINGS.md, D5).
    ok = part is not None and code == OK
    if part is None and aborted is None:
        aborted = ()
    return ctx.build(
        "PartitionData",
        partition_index=index,
        error_code=code,
        high_watermark=part.high_watermark if ok and part else -1,
        last_stable_offset=part.last_stable_offset if ok and part else -1,
        log_start_offset=part.log.log_start_offset if ok and part else -1,
        aborted_transactions=aborted,
        preferred_read_replica=preferred,
        records=records,
        **({"current_leader": current_leader} if current_leader is not None else {}),
    )


def _aborted(ctx: RequestContext, part: Partition, start: int, end: int) -> tuple[Any, ...]:
    return tuple(ctx.build("AbortedTransaction", producer_id=a.producer_id,
                           first_offset=a.first_offset)
                 for a in part.log.aborted_transactions(start, end))


def _requested(ctx: RequestContext, request: Any) -> list[tuple[str | None, Any]]:
    """(topic name, request topic); from v13 topics come by id (None: unknown id)."""
    if ctx.version < 13:
        return [(t.topic, t) for t in request.topics]
    return [(topic_name(ctx, t.topic_id), t) for t in request.topics]


@dataclass(slots=True)
class _Read:
    """One partition's answer before its entity is built: its records are
    still a located slice of a segment (``zero_copy.take`` decides at the end)."""

    part: Partition | None
    index: int
    code: ErrorCode
    records: bytes | FileSlice
    aborted: tuple[Any, ...] | None
    leader: Any
    preferred: int = NO_REPLICA  # the leader sends this client to a follower (KIP-392)


def _from_follower(request: Any) -> bool:
    state = getattr(request, "replica_state", None)
    replica_id = state.replica_id if state is not None else getattr(request, "replica_id", -1)
    return bool(replica_id >= 0)


def _max_bytes(ctx: RequestContext, request: Any) -> int:
    """max_bytes, for a consumer no more than its quota allows in one window."""
    if _from_follower(request):
        return int(request.max_bytes)
    cap = _quota.managers(ctx).fetch.max_value_in_quota_window(
        _quota.image_quotas(ctx), ctx.principal, ctx.client_id)
    return int(min(request.max_bytes, cap, _quota.INT_MAX))


def response_bytes(ctx: RequestContext, named: list[tuple[str | None, Any]],
                   reads: list[list[_Read]]) -> int:
    """The answer's size as Kafka counts it for quotas (``FetchResponse.sizeOf``),
    to within the bytes of compact lengths."""
    size = 4 + 4 + 2 + 4 + 4
    for (name, _t), parts in zip(named, reads, strict=True):
        size += (16 if ctx.version >= 13 else 2 + len((name or "").encode())) + 4
        for r in parts:
            records = r.records.length if isinstance(r.records, FileSlice) else len(r.records)
            size += 4 + 2 + 8 + 8 + 8 + 4 + 16 * len(r.aborted or ()) + 4 + 4 + records
    return size


def _throttle_ms(ctx: RequestContext, request: Any, named: list[tuple[str | None, Any]],
                 reads: list[list[_Read]]) -> int:
    """Count the answer against the consumer's rate; over quota, take it back."""
    manager = _quota.managers(ctx).fetch
    if _from_follower(request) or not quotas.enabled(_quota.image_quotas(ctx), manager.key):
        return 0  # no quota set: the answer need not be measured
    size = response_bytes(ctx, named, reads)
    throttle_ms = _quota.record(ctx, manager, size)
    if throttle_ms > 0:  # answered empty: its bytes are not taken (unrecordQuotaSensor)
        manager.unrecord(_quota.image_quotas(ctx), ctx.principal, ctx.client_id, size)
    return throttle_ms


def _read_all(ctx: RequestContext, request: Any, named: list[tuple[str | None, Any]],
              hints: LeaderHints | None, allowed: set[str], budget: int,
              cold: list[Cold] | None = None
              ) -> tuple[list[list[_Read]], int, bool, list[Partition]]:
    """One pass over every requested partition: (reads per topic, bytes,
    answer now (an error, or a client sent to another replica), the
    partitions a long poll waits on); the view batches left for a worker
    thread are added to ``cold``."""
    committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    rack = getattr(request, "rack_id", "") or ""
    replicas = ctx.broker.read_replicas
    total = 0
    now = False
    topics = []
    asked = []
    view_work = [WORK_RECORDS, WORK_BYTES]
    for name, topic in named:
        parts = []
        meta = ctx.state.topics.get(name) if name is not None else None
        view_of = meta.view_of if meta is not None else None
        for fp in topic.partitions:
            records: bytes | FileSlice = b""
            aborted: tuple[Any, ...] | None = None
            preferred = NO_REPLICA
            leads = False
            if name is None:
                part, code = None, ErrorCode.unknown_topic_id
            elif name not in allowed:  # READ on the topic, as Kafka checks a consumer
                part, code = None, ErrorCode.topic_authorization_failed
            else:  # the leader, or from v11 any replica (read_replicas)
                part, code, leads = replicas.partition(name, fp.partition, ctx.version)
            epoch = getattr(fp, "current_leader_epoch", -1)
            if part is not None:
                code = _epoch_error(part, epoch) or OK
            if part is not None and code == OK and leads and rack:
                assert name is not None
                preferred = replicas.preferred(name, fp.partition, rack, fp.fetch_offset)
            remaining = budget - total
            if part is not None and code == OK and preferred == NO_REPLICA:
                asked.append(part)
            if part is not None and code == OK and preferred == NO_REPLICA and (
                    total == 0 or remaining > 0):
                upper = part.last_stable_offset if committed else part.high_watermark
                limit = max(min(fp.partition_max_bytes, remaining), 1)
                try:
                    where = part.log.locate(fp.fetch_offset, limit, upper)
                    if where is not None and view_of is None:  # record-less batches first
                        where = ctx.state.hole_reads.lead(part.log, where, limit, upper,
                                                          trio.current_time)
                except OffsetOutOfRange:
                    where = None
                    # a follower reached through stale metadata, by a client that
                    # sent no leader epoch, answers empty (it will ask again)
                    if leads or epoch >= 0:
                        code = ErrorCode.offset_out_of_range
                except OSError:  # the disk cannot be read there (EIO), as Kafka answers
                    where = None
                    code = ErrorCode.kafka_storage_error
                if where is not None:
                    records = where
                if where is not None and view_of is not None:  # views walk their own holes
                    assert meta is not None and name is not None
                    of_view = Asked(name, meta.configs["kc.view.filter"], view_of,
                                    fp.partition, fp.fetch_offset, limit, upper)
                    records = ctx.state.views.answer(
                        of_view, part.log, where, view_work, cold if cold is not None else [],
                        ctx.state.hole_reads, trio.current_time)
                if committed and records:
                    aborted = _aborted(ctx, part, fp.fetch_offset, upper)
            leader = None
            if code != OK:
                now = True
                if hints is not None and code in _HINTED:
                    leader = hints.current_leader(name, fp.partition)
            if preferred != NO_REPLICA:
                now = True  # Kafka answers at once: the client goes to that replica
            total += records.length if isinstance(records, FileSlice) else len(records)
            if committed and aborted is None:
                aborted = ()
            parts.append(_Read(part, fp.partition, code, records, aborted, leader, preferred))
        topics.append(parts)
    return topics, total, now, asked


def _built(ctx: RequestContext, named: list[tuple[str | None, Any]],
           reads: list[list[_Read]]) -> list[Any]:
    """The response topics; record slices become file ranges to send (or bytes)."""
    sendfile = bool(ctx.state.config["kcompat.fetch.sendfile"])
    topics = []
    for (name, topic), parts in zip(named, reads, strict=True):
        built = tuple(
            _partition_data(ctx, r.part, r.index, r.code,
                            take(r.records, sendfile) if isinstance(r.records, FileSlice)
                            else r.records, r.aborted, r.leader, r.preferred)
            for r in parts)
        topics.append(ctx.build("FetchableTopicResponse", topic=name,
                                topic_id=getattr(topic, "topic_id", None), partitions=built))
    return topics


async def handle(ctx: RequestContext, request: Any) -> Any:
    if ctx.state.controller_only:  # Kafka's controller: only its Raft fetches
        return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.invalid_request,
                            session_id=0, responses=(), node_endpoints=())
    wait_s = max(request.max_wait.total_seconds(), 0.0)
    deadline = trio.current_time() + wait_s
    # as Kafka's ReplicaManager: no partition asked (a consumer closing its fetch
    # session sends such a Fetch and waits for it) is answered at once
    asked = any(t.partitions for t in request.topics)
    named = _requested(ctx, request)
    max_bytes = _max_bytes(ctx, request)  # the quota's cap, once per request
    min_bytes = max(min(request.min_bytes, max_bytes), 1)
    allowed = _authz.topics(ctx, _authz.Op.READ, (name for name, _t in named))
    warmed = False
    while True:
        hints = LeaderHints(ctx) if ctx.version >= 16 else None
        cold: list[Cold] = []
        paused = ctx.state.views.paused
        reads, total, now, parts = _read_all(ctx, request, named, hints, allowed, max_bytes,
                                             cold)
        if cold and (not warmed or (total == 0 and trio.current_time() < deadline)):
            warmed = True  # large view batches: filtered off the loop, then read again
            await ctx.state.views.warm(cold)
            continue
        if ctx.state.views.paused > paused and total == 0 and not now and (
                trio.current_time() < deadline):
            await trio.sleep(0)  # a view's walk stopped at its bound: on from where it stopped
            continue
        if (total >= min_bytes or now or not asked
                or trio.current_time() >= deadline):
            break
        if await wait_news(parts, deadline):
            ctx.metrics.woken("Fetch")
    endpoints = hints.node_endpoints() if hints is not None else ()
    throttle_ms = _throttle_ms(ctx, request, named, reads)
    if throttle_ms > 0:  # Kafka's throttled answer: nothing read, the throttle time
        return ctx.response(throttle_time=_quota.throttle(ctx, throttle_ms), error_code=OK,
                            session_id=0, responses=(), node_endpoints=endpoints)
    topics = _built(ctx, named, reads)  # no await from the read to here: the slices hold
    ctx.metrics.fetched([name for name, _t in named], topics)
    return ctx.response(throttle_time=NO_THROTTLE, error_code=OK, session_id=0,
                        responses=tuple(topics), node_endpoints=endpoints)
