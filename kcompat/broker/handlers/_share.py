"""What ShareFetch and ShareAcknowledge share: sessions, acknowledgements, answers.

Acknowledgements are applied per partition all or nothing
(``SharePartition.acknowledge``); the partition's ``acknowledge_error_code`` says
how it went. A partition this broker does not lead is NOT_LEADER_OR_FOLLOWER
with the current leader and its endpoint, so the consumer moves there.
RENEW (type 4) needs version 2 and ``share.renew.acknowledge.enable`` (true by
default), as in Kafka. Authorization (Kafka's): READ on the group, else the
whole answer is GROUP_AUTHORIZATION_FAILED; a topic without READ is
TOPIC_AUTHORIZATION_FAILED for each of its partitions, which are left alone.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.groups.share_sessions import Session
from kcompat.broker.groups.shares import RETRIABLE, Held, NotLoaded, ShareError
from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.host.context import RequestContext
from kcompat.group.share_partition import AckBatch, AckType, AcquiredRecords

Key = tuple[str, int]


@dataclass
class PartitionResult:
    error: ErrorCode = OK
    message: str | None = None
    ack_error: ErrorCode | None = None
    ack_message: str | None = None
    records: bytes = b""
    acquired: list[AcquiredRecords] = field(default_factory=list)
    # answered under this id, not the one the request or session names the topic by
    # now: a session's partition fetched under an older incarnation of the topic
    topic_id: uuid.UUID | None = None


Unknown = tuple[Any, int, ErrorCode, bool]  # topic id, partition, error, had acks


def named_partitions(ctx: RequestContext, topics: Iterable[Any], attr: str
                     ) -> tuple[dict[Key, Any], dict[uuid.UUID, str], list[Unknown]]:
    """(topic-partition -> its request entry, topic id -> name, the unknown
    ones: UNKNOWN_TOPIC_ID, or UNKNOWN_TOPIC_OR_PARTITION for a known topic)."""
    found: dict[Key, Any] = {}
    names: dict[uuid.UUID, str] = {}
    unknown: list[Unknown] = []
    for t in topics:
        meta = ctx.state.topic_by_id(t.topic_id) if t.topic_id is not None else None
        for p in getattr(t, attr):
            index = p if isinstance(p, int) else p.partition_index
            if meta is None or not 0 <= index < meta.partitions:
                code = (ErrorCode.unknown_topic_id if meta is None
                        else ErrorCode.unknown_topic_or_partition)
                acked = bool(getattr(p, "acknowledgement_batches", ()))
                unknown.append((t.topic_id, index, code, acked))
                continue
            names[t.topic_id] = meta.name
            found[(meta.name, index)] = p
    return found, names, unknown


@dataclass
class Parsed:
    """What ShareFetch and ShareAcknowledge requests have in common."""

    group_id: str
    member_id: str
    entries: dict[Key, Any]  # known partitions -> their request entries
    names: dict[uuid.UUID, str]
    unknown: list[Unknown]
    acks: dict[Key, list[AckBatch]]  # every known partition, maybe empty


def parse_request(ctx: RequestContext, request: Any) -> Parsed | Any:
    """The request's ids and acknowledgements, or the error answer for it.
    An id this broker does not know is UNKNOWN_TOPIC_ID, which librdkafka's
    share consumer takes as final: it drops the partition from its session
    for good. So a broker just (re)started, its metadata not replayed yet,
    must not answer at all — ``connection`` holds client requests until the
    broker first serves, as Kafka opens its listeners only once caught up."""
    group_id, member_id = request.group_id or "", request.member_id or ""
    if not _authz.group(ctx, _authz.Op.READ, group_id):
        return error_answer(ctx, ErrorCode.group_authorization_failed)
    if not group_id:
        return error_answer(ctx, ErrorCode.invalid_group_id, "The group id is empty.")
    if not member_id:
        return error_answer(ctx, ErrorCode.invalid_request, "The member id is empty.")
    entries, names, unknown = named_partitions(ctx, request.topics, "partitions")
    allowed = _authz.topics(ctx, _authz.Op.READ, names.values())
    ids = {name: tid for tid, name in names.items()}
    for tp in [tp for tp in entries if tp[0] not in allowed]:
        acked = bool(getattr(entries.pop(tp), "acknowledgement_batches", ()))
        unknown.append((ids[tp[0]], tp[1], ErrorCode.topic_authorization_failed, acked))
    acks: dict[Key, list[AckBatch]] = {}
    for tp, entry in entries.items():
        batches, problem = ack_batches(ctx, entry)
        if problem:
            return error_answer(ctx, ErrorCode.invalid_request, problem)
        acks[tp] = batches
    return Parsed(group_id, member_id, entries, names, unknown, acks)


def ack_batches(ctx: RequestContext, entry: Any) -> tuple[list[AckBatch], str | None]:
    batches: list[AckBatch] = []
    for b in entry.acknowledgement_batches:
        types = tuple(int(t) for t in b.acknowledge_types)
        if ctx.version < 2 and AckType.RENEW in types:
            return [], "RENEW acknowledgements need version 2"
        batches.append((b.first_offset, b.last_offset, types))
    return batches, None


async def apply_acks(ctx: RequestContext, group_id: str, member_id: str,
                     acks: dict[Key, list[AckBatch]], results: dict[Key, PartitionResult],
                     touched: dict[tuple[str, str, int], Held]) -> None:
    for (topic, index), batches in acks.items():
        result = results.setdefault((topic, index), PartitionResult())
        try:
            held = await ctx.shares.held_machine((group_id, topic, index), claim=False)
        except NotLoaded as e:  # the acknowledgements fail; a fetch beside them loads it
            result.ack_error, result.ack_message = e.code, e.message
            continue
        except ShareError as e:
            result.error, result.message = e.code, e.message
            result.ack_error = e.code
            continue
        if not ctx.shares.settings_of(group_id).renew_enabled and any(
                AckType.RENEW in types for _first, _last, types in batches):
            result.ack_error = ErrorCode.invalid_request  # Kafka's words:
            result.ack_message = "Renewing acquisition locks is not enabled for the group."
            continue
        code = ctx.shares.acknowledge(held, member_id, batches)
        result.ack_error = code
        if code != OK:
            result.ack_message = ("The record state is invalid: the records are not "
                                  "acquired by this member" if code ==
                                  ErrorCode.invalid_record_state else None)
        touched[held.key] = held


def release_session(ctx: RequestContext, session: Session,
                    touched: dict[tuple[str, str, int], Held],
                    keep: Iterable[Key] = ()) -> None:
    """The member's records still acquired in the session's partitions (but
    ``keep``) go back to AVAILABLE."""
    kept = set(keep)
    for topic, index in session.partitions:
        if (topic, index) in kept:
            continue
        held = ctx.shares.release_member((session.group_id, topic, index), session.member_id)
        if held is not None:
            touched[held.key] = held


async def persist(ctx: RequestContext, touched: dict[tuple[str, str, int], Held],
                  results: dict[Key, PartitionResult]) -> None:
    """Make the changes durable before answering; a partition whose write
    failed answers an error instead of records or acknowledgement success."""
    await ctx.shares.send_dead_letters(list(touched.values()))
    failed = await ctx.shares.write([(h, False) for h in touched.values()])
    for _group_id, topic, index in failed:
        result = results.setdefault((topic, index), PartitionResult())
        result.error = RETRIABLE
        result.message = "the share-partition state could not be written; retry"
        result.records, result.acquired = b"", []
        if result.ack_error is not None:
            result.ack_error = RETRIABLE


def topic_responses(ctx: RequestContext, results: dict[Key, PartitionResult],
                    ids: dict[str, uuid.UUID], unknown: list[Unknown], fetch: bool
                    ) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The ``responses`` and ``node_endpoints`` of the answer."""
    by_topic: dict[Any, list[Any]] = {}
    leaders: set[int] = set()
    for (topic, index), r in results.items():
        topic_id = r.topic_id or ids.get(topic)
        if topic_id is None:  # not named by the request or the session: by its name now
            meta = ctx.state.topics.get(topic)
            if meta is None:
                continue  # no id to answer under: nothing the consumer asked about
            topic_id = meta.topic_id
        leader, epoch = -1, -1
        if (topic, index) in ctx.cluster.assignments:
            leader, epoch = ctx.cluster.partition_view(topic, index)[:2]
        if r.error == ErrorCode.not_leader_or_follower and leader >= 0:
            leaders.add(leader)
        fields: dict[str, Any] = dict(
            partition_index=index, error_code=r.error, error_message=r.message,
            current_leader=ctx.build("LeaderIdAndEpoch", leader_id=leader,
                                     leader_epoch=epoch))
        if fetch:
            fields.update(acknowledge_error_code=int(r.ack_error or OK),
                          acknowledge_error_message=r.ack_message, records=r.records,
                          acquired_records=tuple(
                              ctx.build("AcquiredRecords", first_offset=a.first_offset,
                                        last_offset=a.last_offset,
                                        delivery_count=a.delivery_count)
                              for a in r.acquired))
        elif r.ack_error is not None and r.error == OK:
            fields.update(error_code=r.ack_error, error_message=r.ack_message)
        by_topic.setdefault(topic_id, []).append(ctx.build("PartitionData", **fields))
    for topic_id, index, code, acked in unknown:
        fields = dict(partition_index=index, error_code=code, error_message=None,
                      current_leader=ctx.build("LeaderIdAndEpoch", leader_id=-1,
                                               leader_epoch=-1))
        if fetch:
            fields.update(acknowledge_error_code=int(code if acked else OK),
                          acknowledge_error_message=None, records=b"", acquired_records=())
        by_topic.setdefault(topic_id, []).append(ctx.build("PartitionData", **fields))
    cls = "ShareFetchableTopicResponse" if fetch else "ShareAcknowledgeTopicResponse"
    responses = tuple(ctx.build(cls, topic_id=tid, partitions=tuple(parts))
                      for tid, parts in by_topic.items())
    endpoints = tuple(
        ctx.build("NodeEndpoint", node_id=node, host=host, port=port, rack=rack)
        for node, host, port, rack in ctx.controller.lifecycle.broker_endpoints(leaders, ctx.listener)
        if node in leaders)
    return responses, endpoints


def error_answer(ctx: RequestContext, code: ErrorCode, message: str | None = None) -> Any:
    return ctx.response(throttle_time=NO_THROTTLE, error_code=code, error_message=message,
                        acquisition_lock_timeout=NO_THROTTLE, responses=(),
                        node_endpoints=())


def offsets_refusal(ctx: RequestContext, group_id: str, create: bool = False) -> Any | None:
    """AlterShareGroupOffsets / DeleteShareGroupOffsets: the whole answer when
    the group cannot be changed (not here, missing, not empty), else None."""
    code, message = ctx.share_groups.offsets_error(group_id, altering=True, create=create)
    if code == OK:
        return None
    return ctx.response(throttle_time=NO_THROTTLE, error_code=code, error_message=message,
                        responses=())
