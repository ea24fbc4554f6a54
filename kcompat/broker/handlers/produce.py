"""Produce (key 0), versions 3-13 parsed; 0-2 advertised (librdkafka feature
detection) but refused.

Quirks: librdkafka <= 2.0 sends v7, aiokafka v8, kafka-python v9, librdkafka 2.x
v10, Java 3.9 v11, Java 4.0 v12, Java 4.1+ v13, which names topics by id only
(KIP-516): an id this broker does not know is UNKNOWN_TOPIC_ID for each of its
partitions, as Kafka answers. acks=0 gets no response at all. From v10 a
partition answered NOT_LEADER_OR_FOLLOWER carries its current leader and the
response that leader's endpoint (KIP-951, ``_leader_hints``).

A batch with a magic no format has (above 2) fails the whole request before
anything else is looked at, every partition CORRUPT_MESSAGE whether its topic
exists or not, as Kafka fails it while reading the batches' flags.

Only the Raft leader of a partition accepts a batch; anyone else answers
NOT_LEADER_OR_FOLLOWER (also a replica-less broker for a topic that exists),
and the client refreshes metadata and retries at the leader. On the leader the
hot path (``append_records``: batch validation, CRC, idempotence and
transaction checks — a transaction's first batch in a partition verified first
with its coordinator, ``txn_verify``) ends in a Raft proposal written
to the log at once (``ClusterRuntime.propose_batch``), so the offset and the
producer state are final before any await.

An ``acks=all`` batch to a partition with fewer in-sync replicas than its
``min.insync.replicas`` (at most its replica count, as Kafka's effective
minimum) is refused before the append with NOT_ENOUGH_REPLICAS (retriable),
as Kafka refuses it.

Acknowledgement: ``acks=all`` answers once the high watermark (the Raft commit
index, reached only by entries durable on a quorum, the leader included — on a
single broker, its own fsync) is past the batch, in the term that wrote it; if
leadership is lost first the answer is NOT_LEADER_OR_FOLLOWER and an idempotent
producer's retry is deduplicated by the new leader, which rebuilt the same
producer state from the replicated log. ``acks=1`` answers after the leader's
own append (made durable first under ``kcompat.flush.mode=always``), as in
Kafka. A duplicate batch with acks=all waits for the commit of the original.

A partition whose log cannot be written (a full disk, EIO on a write or an
fsync) answers KAFKA_STORAGE_ERROR until a retry of the write succeeds, and
so do the acks=all produces waiting on a round that failed
(``replication.disk_faults``); the client retries after refreshing metadata.

Authorization (Kafka's KafkaApis): transactional batches need WRITE on the
transactional id, else every partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED
(an idempotent producer was checked when it got its id, InitProducerId);
each topic needs WRITE, else its partitions are TOPIC_AUTHORIZATION_FAILED and
nothing of them is looked at further.

Quotas: once served, the request's bytes count against its client's
``producer_byte_rate`` (``quotas``, as Kafka records ``request.sizeInBytes``
after the append); over quota, the answer carries the throttle time and the
connection is muted for it — with acks=0 too, which has no answer (KIP-219).
A produce that fed a service which is behind is throttled the same way
(``backpressure``): records scheduled to a late schedule partition (delayed
records, a retry topic's retries and dead letters), or appended to a
partition whose oldest unreplicated record is too old.

Delayed delivery (docs/extensions.md): a batch stored with delayed records taken
out is answered, whatever ``acks``, only once it is committed and its delayed
records are in the schedule log (``_schedule``); a retry the partition finds
to be a duplicate is scheduled again, and the schedule log keeps one copy.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from functools import partial
from typing import Any

import trio
from kio.schema.errors import ErrorCode

from kcompat.broker.config.topic_config import effective, retry_policy
from kcompat.broker.handlers import _authz, _quota
from kcompat.broker.handlers._common import ms_to_datetime
from kcompat.broker.handlers._leader_hints import LeaderHints, topic_name
from kcompat.broker.host.context import Later, RequestContext
from kcompat.broker.loop.offload import run_cpu
from kcompat.broker.replication.disk_faults import StorageError
from kcompat.broker.replication.group import Group, NotLeaderError
from kcompat.broker.storage import dedup_windows, views
from kcompat.broker.storage.append import AppendResult, Presplit, append_records, split_ahead
from kcompat.broker.storage.partition import Partition
from kcompat.broker.storage.state import now_ms
from kcompat.ext.schedule_log import SCHEDULE_TOPIC
from kcompat.wire.batch import LOG_OVERHEAD, MAGIC_V2, BatchError, BatchHeader, parse_header

_Row = tuple[int, AppendResult, Partition | None, Group | None, int]
MAGIC_AT = 16  # a batch's magic byte, the same place in every format
SPLIT_AHEAD_BYTES = 256 << 10  # a batch this large is split in a worker thread (~6 ms of work)


def _partition_response(ctx: RequestContext, index: int, result: AppendResult,
                        log_start: int, current_leader: Any = None) -> Any:
    return ctx.build(
        "PartitionProduceResponse",
        index=index,
        error_code=result.error,
        base_offset=result.base_offset,
        log_append_time=ms_to_datetime(result.log_append_time_ms)
        if result.log_append_time_ms >= 0 else None,
        log_start_offset=log_start,
        record_errors=tuple(ctx.build("BatchIndexAndErrorMessage", batch_index=i,
                                      batch_index_error_message=m)
                            for i, m in result.record_errors) if ctx.version >= 8 else (),
        error_message=result.message,
        **({"current_leader": current_leader} if current_leader is not None else {}),
    )


def _txn_check(ctx: RequestContext, topic: str, index: int
               ) -> Callable[[BatchHeader], ErrorCode | None]:
    """KIP-890 part 1: a transactional batch must belong to an ongoing
    transaction of its producer that includes this partition."""
    def check(header: BatchHeader) -> ErrorCode | None:
        if not ctx.txns.serves_producer(header.producer_id):
            # another broker coordinates it (txn_verify asked it)
            accepted = ctx.txns.verifier.accepts(topic, index, header)
            return None if accepted else ErrorCode.invalid_txn_state
        # the coordinator is here: the same answer it gives other brokers' leaders
        tid = ctx.txns.coordinator.by_producer.get(header.producer_id)
        if tid is None:
            return ErrorCode.invalid_txn_state
        code = ctx.txns.verify(tid, header.producer_id, header.producer_epoch, (topic, index))
        return None if code == ErrorCode.none else code
    return check


def _needs_sync(ctx: RequestContext) -> bool:
    """acks=0/1 made durable before the answer (``kcompat.flush.mode=always``)."""
    return bool(ctx.state.config["kcompat.flush.mode"] == "always")

def _append(ctx: RequestContext, topic: str, pdata: Any, acks: int, now: int,
            presplit: Presplit | None = None) -> _Row:
    state, cluster = ctx.state, ctx.cluster
    meta = state.topics.get(topic)
    if acks not in (-1, 0, 1):
        return pdata.index, AppendResult(ErrorCode.invalid_required_acks), None, None, -1
    if meta is None or (topic, pdata.index) not in cluster.assignments:
        return pdata.index, AppendResult(ErrorCode.unknown_topic_or_partition), None, None, -1
    if meta.internal:  # written by the coordinators only, as in Kafka
        return pdata.index, AppendResult(ErrorCode.invalid_topic_exception,
                                         message=f"Cannot append to internal topic {topic}"
                                         ), None, None, -1
    if meta.view_of is not None:  # read-only (views)
        return pdata.index, AppendResult(ErrorCode.invalid_topic_exception,
                                         message=views.read_only(topic, meta.view_of)
                                         ), None, None, -1
    group = cluster.group_of(topic, pdata.index)
    part = state.partition(topic, pdata.index)
    if group is None or part is None or not group.is_leader:
        return pdata.index, AppendResult(ErrorCode.not_leader_or_follower), None, None, -1
    if acks == -1:
        short = _under_min_isr(ctx, meta.configs, group)
        if short is not None:
            return pdata.index, AppendResult(ErrorCode.not_enough_replicas, message=(
                f"{topic}-{pdata.index} has {short[0]} in-sync replicas, fewer than its "
                f"min.insync.replicas {short[1]}")), None, None, -1
    term = group.raft.term

    def write(view: memoryview, header: BatchHeader, now_ms: int) -> BatchHeader:
        return cluster.propose_batch(group, view, header, now_ms, durable=acks == -1)

    try:
        result = append_records(part, pdata.records, meta.configs, state.broker_defaults, now,
                                _txn_check(ctx, topic, pdata.index), write, presplit)
    except StorageError as e:  # a full disk, EIO: the partition is offline for writes
        result = AppendResult(ErrorCode.kafka_storage_error, message=str(e))
    except NotLeaderError:
        result = AppendResult(ErrorCode.not_leader_or_follower)
    if result.split is not None and acks != -1:
        group.sync_wanted = True  # waited for like acks=all (``_schedule``)
    ctx.metrics.produced(topic, pdata.records, result.error == ErrorCode.none)
    return pdata.index, result, part, group, term


def _under_min_isr(ctx: RequestContext, configs: dict[str, Any], group: Group
                   ) -> tuple[int, int] | None:
    """(in-sync replicas, min.insync.replicas) when an ``acks=all`` batch
    cannot be accepted (Kafka refuses it before the append: the leader would
    hold what no quorum can commit); None when it can. As in Kafka the bound is
    at most the replica count (a topic may set more). Free at the default 1."""
    least = min(int(effective("min.insync.replicas", configs, ctx.state.broker_defaults)[0]),
                len(group.replicas))
    if least <= 1:
        return None
    isr = len(ctx.cluster.isr(group))
    return (isr, least) if isr < least else None


async def _schedule(ctx: RequestContext, row: _Row, acks: int, deadline: float,
                    tid: str | None) -> AppendResult | None:
    """A batch that had delayed records taken out (``result.split``): once it is
    committed — whatever ``acks`` — its delayed records are scheduled, and
    only then is it acknowledged (``delays``); a transactional batch's in its
    transaction, whose coordinator first adds the schedule partition to it.
    None when done."""
    index, result, part, group, term = row
    split = result.split
    assert part is not None and group is not None and split is not None
    if acks != -1:
        code = await ctx.cluster.wait_committed(group, result.base_offset, term, deadline)
        if code != ErrorCode.none:
            return AppendResult(code)
    timeout_s = max(deadline - trio.current_time(), 1.0)
    hole = parse_header(split.hole)
    if hole.is_transactional:
        code, message, schedule_index = await ctx.delays.prepare(part.topic, index, split,
                                                                 timeout_s)
        if code == ErrorCode.none and tid is not None:
            code = await ctx.txns.verifier.add_partition(tid, hole,
                                                         (SCHEDULE_TOPIC, schedule_index))
            message = f"the transaction coordinator did not add {SCHEDULE_TOPIC}: {code.name}"
        if code != ErrorCode.none:
            return AppendResult(code, message=message)
    code, message = await ctx.delays.schedule(part.topic, index, split, result.base_offset,
                                              timeout_s)
    return None if code == ErrorCode.none else AppendResult(code, message=message)


async def _dedup_ready(ctx: RequestContext, named: list[tuple[str | None, Any]],
                       allowed: set[str]) -> None:
    """The dedup index of each partition led here that has a window, built
    (in turns) before the appends, which have no await until their write."""
    for name, t in named:
        meta = ctx.state.topics.get(name) if name is not None and name in allowed else None
        if name is None or meta is None or not meta.configs.get("kc.dedup.window.ms"):
            continue
        for p in t.partition_data:
            part = ctx.state.partition(name, p.index)
            if part is not None and ctx.cluster.leads(name, p.index):
                await dedup_windows.ready(part, meta.configs, ctx.state.broker_defaults, now_ms())


async def _split_ahead(ctx: RequestContext, named: list[tuple[str | None, Any]],
                       allowed: set[str], now: int) -> dict[int, Presplit]:
    """The delayed records of large batches, split in a worker thread
    (``append.split_ahead``) before the no-await appends; by id of the
    partition's data."""
    out: dict[int, Presplit] = {}
    for name, t in named:
        meta = ctx.state.topics.get(name) if name is not None and name in allowed else None
        if meta is None:
            continue
        retry = retry_policy(meta.configs, ctx.state.broker_defaults) is not None
        dedup = dedup_windows.policy(meta.configs, ctx.state.broker_defaults) is not None
        for p in t.partition_data:
            if not _may_split(p.records, retry, dedup):
                continue
            found = await run_cpu(split_ahead, p.records, meta.configs,
                                  ctx.state.broker_defaults, now)
            if found is not None:
                out[id(p)] = found
    return out


def _may_split(records: bytes | None, retry: bool, dedup: bool = False) -> bool:
    """A large batch of a retry topic or of a topic with a dedup window (its
    records' ids read ahead), or an uncompressed one naming ``kc-`` (a
    compressed one is looked into in place, as before: a plain batch must
    not pay a second decompression)."""
    if records is None or len(records) < SPLIT_AHEAD_BYTES:
        return False
    try:
        compressed = parse_header(records).compression != 0
    except BatchError:
        return False
    return retry or dedup or (not compressed and b"kc-" in records)


async def _schedule_row(ctx: RequestContext, row: _Row, acks: int, deadline: float,
                        tid: str | None, errors: dict[int, AppendResult]) -> None:
    failed = await _schedule(ctx, row, acks, deadline, tid)
    if failed is not None:
        errors[id(row)] = failed


def _refused(index: int, code: ErrorCode) -> _Row:
    message = ("the transaction coordinator could not be asked whether this partition is in "
               "the producer's transaction; retry" if code == ErrorCode.not_enough_replicas
               else "the transaction coordinator did not confirm this partition in the "
               "producer's transaction")
    return index, AppendResult(code, message=message), None, None, -1


def _denied(index: int, code: ErrorCode) -> _Row:
    """A partition answered ``code`` without a message, nothing looked at."""
    return index, AppendResult(code), None, None, -1


def _named_topics(ctx: RequestContext, request: Any) -> list[tuple[str | None, Any]]:
    """(topic name, request topic) in request order; v13 names topics by id
    (None: an id this broker does not know)."""
    if ctx.version < 13:
        return [(t.name, t) for t in request.topic_data]
    return [(topic_name(ctx, t.topic_id), t) for t in request.topic_data]


def _rows(ctx: RequestContext, named: list[tuple[str | None, Any]], acks: int,
          refused: dict[tuple[str, int], ErrorCode], allowed: set[str], now: int,
          presplits: dict[int, Presplit]) -> list[list[_Row]]:
    out: list[list[_Row]] = []
    for name, t in named:
        if name is None:
            out.append([_denied(p.index, ErrorCode.unknown_topic_id) for p in t.partition_data])
            continue
        if name not in allowed:
            out.append([_denied(p.index, ErrorCode.topic_authorization_failed)
                        for p in t.partition_data])
            continue
        out.append([_refused(p.index, refused[(name, p.index)]) if (name, p.index) in refused
                    else _append(ctx, name, p, acks, now, presplits.get(id(p)))
                    for p in t.partition_data])
    return out


def _response(ctx: RequestContext, named: list[tuple[str | None, Any]],
              results: list[list[_Row]], errors: dict[int, AppendResult],
              throttle: datetime.timedelta = datetime.timedelta(0)) -> Any:
    hints = LeaderHints(ctx) if ctx.version >= 10 else None
    topics = []
    for (name, t), rows in zip(named, results, strict=True):
        parts = []
        for row in rows:
            index, result, part, _g, _t = row
            if id(row) in errors:
                result = errors[id(row)]
            log_start = part.log.log_start_offset if part and result.error == ErrorCode.none else -1
            leader = (hints.current_leader(name, index) if hints is not None
                      and result.error == ErrorCode.not_leader_or_follower else None)
            parts.append(_partition_response(ctx, index, result, log_start, leader))
        topics.append(ctx.build("TopicProduceResponse", name=name,
                                topic_id=getattr(t, "topic_id", None),
                                partition_responses=tuple(parts)))
    endpoints = hints.node_endpoints() if hints is not None else ()
    return ctx.response(responses=tuple(topics), throttle_time=throttle,
                        node_endpoints=endpoints)


def _backpressure_ms(ctx: RequestContext, rows: list[_Row]) -> int:
    """A service behind on what this produce fed slows its producer
    (``backpressure``): the schedule of its delayed records (``delayed``) or
    of a retry topic's retries and dead letters (``retry``), and the
    replication of the partitions it appended to (``replication``)."""
    fed: dict[str, set[tuple[str, int]]] = {"delayed": set(), "retry": set(),
                                            "replication": set()}
    for index, result, part, _g, _t in rows:
        if part is None:
            continue
        fed["replication"].add((part.topic, index))
        if result.split is not None:
            meta = ctx.state.topics.get(part.topic)
            retry = meta is not None and retry_policy(
                meta.configs, ctx.state.broker_defaults) is not None
            fed["retry" if retry else "delayed"].add((part.topic, index))
    pressure = ctx.broker.backpressure
    return max((pressure.throttle_ms(name, keys) for name, keys in fed.items() if keys),
               default=0)


def _unknown_magic(topic_data: Any) -> bool:
    """Whether a batch of the request has a magic no format has: Kafka fails
    the whole request on it (CORRUPT_MESSAGE for every partition, whether its
    topic exists or not) as it reads the batches' flags, before anything else.
    A look at each batch's header, not its records."""
    for t in topic_data:
        for p in t.partition_data:
            records = p.records or b""
            pos = 0
            while pos + MAGIC_AT < len(records):
                if records[pos + MAGIC_AT] > MAGIC_V2:  # unsigned: a negative one too
                    return True
                length = int.from_bytes(records[pos + 8:pos + 12], "big", signed=True)
                if length <= 0:
                    break  # a framing fault: the batch's own checks answer it
                pos += LOG_OVERHEAD + length
    return False


async def handle(ctx: RequestContext, request: Any) -> Any:
    named = _named_topics(ctx, request)
    acks = request.acks
    if _unknown_magic(request.topic_data):
        corrupt = [[_denied(p.index, ErrorCode.corrupt_message) for p in t.partition_data]
                   for _n, t in named]
        return None if acks == 0 else _response(ctx, named, corrupt, {})
    tid = request.transactional_id
    if _authz.enabled(ctx) and _authz.transactional_records(request.topic_data) and (
            tid is None or not _authz.txn_id(ctx, _authz.Op.WRITE, tid)):
        code = ErrorCode.transactional_id_authorization_failed
        denied = [[_denied(p.index, code) for p in t.partition_data] for _n, t in named]
        return None if acks == 0 else _response(ctx, named, denied, {})
    allowed = _authz.topics(ctx, _authz.Op.WRITE, (name for name, _t in named))
    refused = await ctx.txns.verifier.verify_request(  # KIP-890
        tid, [(name, t.partition_data) for name, t in named if name in allowed])
    await _dedup_ready(ctx, named, allowed)
    now = now_ms()
    presplits = await _split_ahead(ctx, named, allowed, now)
    results = _rows(ctx, named, acks, refused, allowed, now, presplits)
    ok = [row for rows in results for row in rows if row[1].error == ErrorCode.none]
    deadline = trio.current_time() + request.timeout.total_seconds()
    waits = acks == -1 or acks == 1 and (
        _needs_sync(ctx) or any(row[1].split is not None for row in ok))
    if ok and waits and ctx.session is not None and ctx.session.pipelined:
        # appended, in request order: the wait for the replicas (or the
        # fsync) overlaps the next requests' appends (``connection``), and
        # so does the scheduling of records taken out (delayed, retried),
        # which the sender still does one request after another, in order
        # (a cancellation finds the record an earlier request scheduled).
        # The throttle mutes the connection from now on, so the next
        # request waits for it even while this one waits
        return Later(partial(_finish, ctx, request, named, results, ok, deadline,
                             _throttle(ctx, ok)))
    return await _finish(ctx, request, named, results, ok, deadline, None)


def _throttle(ctx: RequestContext, ok: list[_Row]) -> datetime.timedelta:
    """The request's quota and backpressure throttle, its connection muted for it."""
    throttle_ms = _quota.record(ctx, _quota.managers(ctx).produce, ctx.request_size)
    return _quota.throttle(ctx, max(throttle_ms, _backpressure_ms(ctx, ok)))


async def _finish(ctx: RequestContext, request: Any, named: list[tuple[str | None, Any]],
                  results: list[list[_Row]], ok: list[_Row], deadline: float,
                  throttle: datetime.timedelta | None) -> Any:
    """The appended rows made durable as ``acks`` asks and delayed records
    scheduled: the response (None for acks=0). The throttle, unless given,
    once they are (delayed delivery's weighs the records just scheduled)."""
    state, cluster, acks = ctx.state, ctx.cluster, request.acks
    errors: dict[int, AppendResult] = {}
    if ok and acks == -1:
        for row in ok:
            _i, result, _p, group, term = row
            assert group is not None
            code = await cluster.wait_committed(group, result.base_offset, term, deadline)
            if code != ErrorCode.none:
                errors[id(row)] = AppendResult(code)
    elif ok and _needs_sync(ctx):
        try:
            await state.flusher.sync(*[p.log for _i, _r, p, _g, _t in ok if p is not None])
        except OSError as e:
            errors.update({id(row): AppendResult(ErrorCode.kafka_storage_error) for row in ok})
            for _i, _r, _p, group, _t in ok:  # offline, written again (``disk_faults``)
                if group is not None:
                    cluster.faults.fail(group, e, "fsync")
    moving = [row for row in ok if row[1].split is not None and id(row) not in errors]
    if moving:  # each partition's records scheduled at once, not one partition after another
        async with trio.open_nursery() as nursery:
            for row in moving:
                nursery.start_soon(_schedule_row, ctx, row, acks, deadline,
                                   request.transactional_id, errors)
    if throttle is None:
        throttle = _throttle(ctx, ok)
    if acks == 0:
        return None  # no answer, but muted all the same
    return _response(ctx, named, results, errors, throttle)
