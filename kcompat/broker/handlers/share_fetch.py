"""ShareFetch (key 78), versions 1-2 (KIP-932; v2 adds RENEW, KIP-1222).

A share consumer fetches from each partition leader in its share session
(``share_sessions``): acknowledgements ride along (applied first), then records
are acquired for the member, up to ``max_records`` over all the session's
partitions, and answered as whole log batches plus the acquired offset ranges
with their delivery counts; the client keeps only acquired records. In
ShareAcquireMode batch_optimized (v1, and v2's default) ``max_records`` is
soft as in Kafka: a partition's acquisition runs to the end of the log batch
holding its last offset (10-record batches, max_records 7: 10 per fetch);
record_limit (v2, KIP-1206) stops at ``max_records`` exactly; 0 acquires
nothing (the Java client in record_limit mode sends it to the brokers it only
acknowledges with). As in
Kafka 4.4, ``max_bytes`` is shared evenly among the partitions and is soft:
the answer's first batch goes out whatever its size, nothing past a
partition's share after it (``ShareReads.byte_end``); and a partition whose
share-partition is not loaded yet is claimed in the background once another
one gave records (Kafka answers with its initialized share-partitions), so a
new member's first answers hold one partition each. A session partition
whose topic is gone (deleted, or re-created with a new id) is
UNKNOWN_TOPIC_OR_PARTITION and fetched from no more. Nothing
acquirable: the request waits up to ``max_wait`` for news of one of the
session's partitions (new data, a moved high watermark; appends to other
partitions do not wake it: ``Partition.waiters``), a released record or an
expired lock. Epoch -1 closes the session (acknowledgements
only). Acknowledgements in an opening request (epoch 0) are INVALID_REQUEST,
as in Kafka. Every change is written to ``__share_group_state`` before the
answer (``shares``); while a state partition it wrote to is behind
(``backpressure``, ``share_state``), the answer carries a throttle and the
connection is muted.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

import trio
from kio.schema.errors import ErrorCode

from kcompat.broker.groups.share_sessions import FINAL_EPOCH, INITIAL_EPOCH, Session
from kcompat.broker.groups.shares import Held, ShareError
from kcompat.broker.handlers import _quota
from kcompat.broker.handlers._common import OK
from kcompat.broker.handlers._share import (
    Parsed,
    PartitionResult,
    Unknown,
    apply_acks,
    error_answer,
    parse_request,
    persist,
    release_session,
    topic_responses,
)
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.partition import Partition, unwatch
from kcompat.broker.storage.state import now_ms


async def handle(ctx: RequestContext, request: Any) -> Any:
    parsed = parse_request(ctx, request)
    if not isinstance(parsed, Parsed):
        return parsed
    group_id, member_id, entries = parsed.group_id, parsed.member_id, parsed.entries
    unknown = parsed.unknown
    epoch = request.share_session_epoch
    ids = {name: tid for tid, name in parsed.names.items()}
    acks = {tp: batches for tp, batches in parsed.acks.items() if batches}
    sessions = ctx.shares.sessions
    touched: dict[tuple[str, str, int], Held] = {}
    if epoch == INITIAL_EPOCH:
        if acks:
            return error_answer(ctx, ErrorCode.invalid_request,
                                "Acknowledge data present on initial epoch")
        session, old = sessions.open(group_id, member_id, now_ms())
        if session is None:
            return error_answer(ctx, ErrorCode.share_session_limit_reached,
                                "The share session cache is full.")
        if old is not None:
            release_session(ctx, old, touched)
    else:
        found, code = sessions.advance(group_id, member_id, epoch, now_ms())
        if found is None:
            return error_answer(ctx, code)
        session = found
    _forget(session, request.forgotten_topics_data)
    for tp in entries:
        session.partitions[tp] = ids.get(tp[0])
    unknown, acked_gone = _in_session(session, unknown)

    results: dict[tuple[str, int], PartitionResult] = {}
    await apply_acks(ctx, group_id, member_id, acks, results, touched)
    gone = _gone(ctx, session, results, acked_gone)
    if epoch == FINAL_EPOCH:
        release_session(ctx, session, touched)
    elif not getattr(request, "is_renew_ack", False):
        await _acquire(ctx, request, session, results, touched, bool(acks), gone)
    for (topic, _index), tid in session.partitions.items():
        if tid is not None:
            ids.setdefault(topic, tid)
    state_keys = {held.state_index for held in touched.values()}
    seen_s = ctx.broker.backpressure.lag_s("share_state", state_keys)
    await persist(ctx, touched, results)
    throttle = _quota.throttle(ctx, ctx.broker.backpressure.throttle_ms(
        "share_state", state_keys, seen_s))  # its state writes behind: slowed
    responses, endpoints = topic_responses(ctx, results, ids, unknown, fetch=True)
    lock_ms = ctx.shares.settings_of(group_id).config.record_lock_duration_ms
    return ctx.response(throttle_time=throttle, error_code=OK, error_message=None,
                        acquisition_lock_timeout=datetime.timedelta(milliseconds=lock_ms),
                        responses=responses, node_endpoints=endpoints)


def _forget(session: Session, forgotten: Any) -> None:
    """Drop the forgotten partitions, matched by topic id: a deleted
    topic's id no longer names it."""
    drop = {(t.topic_id, index) for t in forgotten for index in t.partitions}
    for tp, tid in list(session.partitions.items()):
        if (tid, tp[1]) in drop:
            del session.partitions[tp]


def _in_session(session: Session, unknown: list[Unknown]
                ) -> tuple[list[Unknown], set[tuple[Any, int]]]:
    """The unknown partitions the session does not hold, and the (topic id,
    partition) of those it holds (its topic was deleted) that carried
    acknowledgements: the session answers for those (``_gone``)."""
    held = {(tid, tp[1]) for tp, tid in session.partitions.items()}
    rest = [u for u in unknown if (u[0], u[1]) not in held]
    acked = {(u[0], u[1]) for u in unknown if (u[0], u[1]) in held and u[3]}
    return rest, acked


def _gone(ctx: RequestContext, session: Session,
          results: dict[tuple[str, int], PartitionResult],
          acked: set[tuple[Any, int]]) -> set[tuple[str, int]]:
    """The session's partitions whose topic is no longer the one named
    (deleted, or re-created with a new id): UNKNOWN_TOPIC_OR_PARTITION (their
    acknowledgements UNKNOWN_TOPIC_ID), as Kafka answers, under the id they
    were fetched by (F39: not the new incarnation's, which may have that
    partition); nothing is fetched from them."""
    gone: set[tuple[str, int]] = set()
    for (topic, index), tid in session.partitions.items():
        meta = ctx.state.topics.get(topic)
        if meta is None or (tid is not None and meta.topic_id != tid) or (
                index >= meta.partitions):
            gone.add((topic, index))
            result = results.setdefault((topic, index), PartitionResult())
            result.error = ErrorCode.unknown_topic_or_partition
            result.topic_id = tid
            if (tid, index) in acked:
                result.ack_error = ErrorCode.unknown_topic_id
    return gone


async def _acquire(ctx: RequestContext, request: Any, session: Session,
                   results: dict[tuple[str, int], PartitionResult],
                   touched: dict[tuple[str, str, int], Held], answered: bool,
                   gone: set[tuple[str, int]]) -> None:
    """Acquire for the member over the session's partitions, waiting up to
    ``max_wait`` while there is nothing to answer."""
    shares = ctx.shares
    settings = shares.settings_of(session.group_id)
    deadline = trio.current_time() + max(request.max_wait.total_seconds(), 0.0)
    budget = max(request.max_records, 0)  # 0: nothing acquired, as Kafka (acks only)
    max_bytes = request.max_bytes if request.max_bytes > 0 else None
    # ShareAcquireMode (v2, KIP-1206): 0 batch_optimized (v1's only mode), 1 record_limit
    whole_batches = getattr(request, "share_acquire_mode", 0) == 0
    order = [tp for tp in session.partitions if tp not in gone]
    if order:  # every partition gets its turn first, so none starves
        turn = session.turn % len(order)
        session.turn = turn + 1
        order = order[turn:] + order[:turn]
    while True:
        news, changed = trio.Event(), shares.changed  # taken before the first await
        watched: list[Partition] = []
        try:
            if await _acquire_once(ctx, session, settings, order, (budget, max_bytes), results,
                                   touched, news, watched, whole_batches) or answered:
                return
            if any(r.error != OK for tp, r in results.items() if tp not in gone) or (
                    trio.current_time() >= deadline):
                return
            await _wait_any((news, changed), deadline)
            if news.is_set():
                ctx.metrics.woken("ShareFetch")
        finally:
            unwatch(watched, news)


async def _acquire_once(ctx: RequestContext, session: Session, settings: Any,
                        order: list[tuple[str, int]], budget: tuple[int, int | None],
                        results: dict[tuple[str, int], PartitionResult],
                        touched: dict[tuple[str, str, int], Held], news: trio.Event,
                        watched: list[Partition], whole_batches: bool = False) -> bool:
    """One pass over the session's partitions; True if anything was acquired.
    Each partition read is watched with ``news`` from then on (new data there
    ends the wait that may follow).

    ``budget``: (max_records, max_bytes). As in Kafka, the bytes are shared
    evenly among the partitions, and the answer's first batch goes out
    whatever its size (the limit is soft). The share-partitions already
    loaded go first; the others are claimed in the background when those
    gave records, else now, in turn (Kafka answers with the share-partitions
    that are initialized and loads the others meanwhile, whatever their
    order in the request)."""
    shares = ctx.shares
    group_id = session.group_id
    pass_ = _Pass(budget[0], budget[1], None if budget[1] is None
                  else budget[1] // max(len(order), 1))
    unloaded = []
    for topic, index in order:
        if pass_.remaining <= 0:
            break
        if not shares.is_held((group_id, topic, index)):
            unloaded.append((topic, index))
            continue
        await _acquire_from(ctx, session, settings, (topic, index), pass_, results, touched,
                            news, watched, whole_batches)
    for topic, index in unloaded:
        if pass_.acquired:
            shares.claim_soon((group_id, topic, index))
        elif pass_.remaining > 0:
            await _acquire_from(ctx, session, settings, (topic, index), pass_, results,
                                touched, news, watched, whole_batches)
    return pass_.acquired


@dataclass
class _Pass:
    """What one pass over a session's partitions has left to hand out."""

    remaining: int  # records
    bytes_left: int | None
    per_partition: int | None  # bytes
    acquired: bool = False


async def _acquire_from(ctx: RequestContext, session: Session, settings: Any,
                        tp: tuple[str, int], pass_: _Pass,
                        results: dict[tuple[str, int], PartitionResult],
                        touched: dict[tuple[str, str, int], Held], news: trio.Event,
                        watched: list[Partition], whole_batches: bool) -> None:
    """Acquire from one partition of the session within what ``pass_`` has left."""
    shares = ctx.shares
    topic, index = tp
    try:
        held = await shares.held_machine((session.group_id, topic, index))
    except ShareError as e:
        result = results.setdefault(tp, PartitionResult())
        result.error, result.message = e.code, e.message
        return
    part, code = ctx.cluster.led_partition(topic, index)
    if part is None or code != OK:
        results.setdefault(tp, PartitionResult()).error = code
        return
    part.waiters.add(news)
    watched.append(part)
    held.machine.config = settings.config
    await shares.warm(held, part, settings.read_committed)  # large batches: a thread
    limit = None if pass_.bytes_left is None or pass_.per_partition is None else max(
        0, min(pass_.per_partition, pass_.bytes_left))
    ranges, data = shares.acquire(held, part, session.member_id, pass_.remaining,
                                  settings.read_committed, limit, not pass_.acquired,
                                  whole_batches)
    touched[held.key] = held
    if pass_.bytes_left is not None:
        pass_.bytes_left -= len(data)
    if ranges:
        result = results.setdefault(tp, PartitionResult())
        result.acquired, result.records = ranges, data
        pass_.remaining -= sum(r.last_offset - r.first_offset + 1 for r in ranges)
        pass_.acquired = True


async def _wait_any(events: tuple[trio.Event, ...], deadline: float) -> None:
    async with trio.open_nursery() as nursery:
        async def wait(event: trio.Event) -> None:
            await event.wait()
            nursery.cancel_scope.cancel()
        for event in events:
            nursery.start_soon(wait, event)
        nursery.cancel_scope.deadline = deadline
