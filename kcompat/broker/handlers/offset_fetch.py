"""OffsetFetch (key 9), versions 1-10.

v1-7 ask for one group, v8+ for several (``groups``); v10 names topics by id
only (KIP-848 consumers): an id this broker does not know answers
UNKNOWN_TOPIC_ID for each partition asked, and the whole-group answer lists
only topics that still exist (those have an id). A null topic list (v2+)
means every partition the group has an offset for. A partition without a
committed offset answers offset -1 and empty metadata with no error. With
require_stable (v7+, read_committed consumers) a partition whose offset awaits a
transaction's marker answers UNSTABLE_OFFSET_COMMIT with offset -1 (not its last
stable offset), and the client retries.
Authorization (Kafka's): a group the principal may not DESCRIBE is
GROUP_AUTHORIZATION_FAILED (v1: on each partition asked); of the topics asked, those it may not DESCRIBE are
TOPIC_AUTHORIZATION_FAILED (after the others); all offsets asked leaves them out.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.handlers._leader_hints import topic_name
from kcompat.broker.host.context import RequestContext


def _wanted(ctx: RequestContext, committed: dict[tuple[str, int], Any], requested: Any
            ) -> list[tuple[str | None, Any, list[int]]]:
    """(topic name, topic id, partitions) asked; a name None is an unknown id."""
    by_id = ctx.version >= 10
    wanted: dict[Any, tuple[str | None, Any, list[int]]] = {}
    if requested is None:
        for topic, partition in sorted(committed):
            meta = ctx.state.topics.get(topic)
            if by_id and meta is None:
                continue  # deleted: no id to answer with
            entry = wanted.setdefault(topic, (topic, meta.topic_id if meta else None, []))
            entry[2].append(partition)
    else:
        for t in requested:
            if by_id:
                wanted[t.topic_id] = (topic_name(ctx, t.topic_id), t.topic_id,
                                      list(t.partition_indexes))
            else:
                wanted[t.name] = (t.name, None, list(t.partition_indexes))
    return list(wanted.values())


def _topics(ctx: RequestContext, group_id: str, requested: Any, prefix: str,
            require_stable: bool) -> tuple[Any, ...]:
    # a deleted topic's offsets are deleted with it (``GroupService.topic_deleted``):
    # none is answered for a topic the metadata no longer holds meanwhile
    topics = ctx.state.topics
    committed = {tp: c for tp, c in ctx.groups.store.committed(group_id).items()
                 if tp[0] in topics}
    out, denied = [], []
    wanted = _wanted(ctx, committed, requested)
    allowed = _authz.topics(ctx, _authz.Op.DESCRIBE, (topic for topic, _i, _p in wanted))
    for topic, topic_id, partitions in wanted:
        if topic is not None and topic not in allowed:
            if requested is not None:  # all offsets asked: left out, as Kafka does
                denied.append(_denied(ctx, topic, topic_id, partitions, prefix))
            continue
        rows = []
        for index in partitions:
            c = committed.get((topic, index)) if topic is not None else None
            code = OK
            if topic is None:
                code = ErrorCode.unknown_topic_id
            elif require_stable and ctx.groups.is_pending(group_id, topic, index):
                code = ErrorCode.unstable_offset_commit
                c = None  # as Kafka: no offset (-1) beside the error, not the stable one
            rows.append(ctx.build(
                f"OffsetFetchResponsePartition{prefix}", partition_index=index,
                committed_offset=c.offset if c else -1,
                committed_leader_epoch=c.leader_epoch if c else -1,
                metadata=c.metadata if c else "", error_code=code))
        out.append(ctx.build(f"OffsetFetchResponseTopic{prefix}", name=topic, topic_id=topic_id,
                             partitions=tuple(rows)))
    return tuple(out + denied)  # Kafka answers the topics denied after the others


def _denied(ctx: RequestContext, topic: str, topic_id: Any, partitions: list[int],
            prefix: str) -> Any:
    rows = tuple(ctx.build(f"OffsetFetchResponsePartition{prefix}", partition_index=index,
                           committed_offset=-1, committed_leader_epoch=-1, metadata="",
                           error_code=ErrorCode.topic_authorization_failed)
                 for index in partitions)
    return ctx.build(f"OffsetFetchResponseTopic{prefix}", name=topic, topic_id=topic_id,
                     partitions=rows)


def _group_error(ctx: RequestContext, g: Any) -> ErrorCode | None:
    """Only the coordinator answers; a KIP-848 group checks the member (v9+)."""
    if not _authz.group(ctx, _authz.Op.DESCRIBE, g.group_id):
        return ErrorCode.group_authorization_failed
    if (code := ctx.groups.coordinator_error(g.group_id)) is not None:
        return code
    consumer = ctx.consumer_groups.group(g.group_id)
    if consumer is None:
        return None
    return ctx.consumer_groups.fetch_error(consumer, getattr(g, "member_id", None),
                                           getattr(g, "member_epoch", -1))


async def handle(ctx: RequestContext, request: Any) -> Any:
    stable = bool(getattr(request, "require_stable", False))
    gate = ctx.groups.coordinator_error  # only the coordinator answers
    if ctx.version >= 8:
        groups = tuple(
            ctx.build("OffsetFetchResponseGroup", group_id=g.group_id,
                      topics=_topics(ctx, g.group_id, g.topics, "s", stable), error_code=OK)
            if (code := _group_error(ctx, g)) is None else
            ctx.build("OffsetFetchResponseGroup", group_id=g.group_id, topics=(),
                      error_code=code)
            for g in request.groups
        )
        return ctx.response(throttle_time=NO_THROTTLE, groups=groups)
    if not _authz.group(ctx, _authz.Op.DESCRIBE, request.group_id):
        # v1 has no top-level error: Kafka answers it on every partition asked
        denied = ErrorCode.group_authorization_failed
        topics = tuple(ctx.build("OffsetFetchResponseTopic", name=t.name, partitions=tuple(
            ctx.build("OffsetFetchResponsePartition", partition_index=i, committed_offset=-1,
                      committed_leader_epoch=-1, metadata="", error_code=denied)
            for i in t.partition_indexes)) for t in request.topics or ()
        ) if ctx.version < 2 else ()
        return ctx.response(throttle_time=NO_THROTTLE, error_code=denied, topics=topics)
    if (code := gate(request.group_id)) is not None:
        return ctx.response(throttle_time=NO_THROTTLE, error_code=code, topics=())
    return ctx.response(throttle_time=NO_THROTTLE, error_code=OK,
                        topics=_topics(ctx, request.group_id, request.topics, "", stable))
