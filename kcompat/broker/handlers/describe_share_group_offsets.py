"""DescribeShareGroupOffsets (key 90), versions 0-1 (KIP-932; v1 adds lag, KIP-1226).

At the group coordinator: each share-partition's start offset, read from its
state in ``__share_group_state`` (at that partition's leader, here or on
another broker); -1 where the group has no state for it yet. Null topics: every
topic the group has read. Lag: records neither acknowledged nor archived, -1
where this broker has no replica of the partition. A missing group has no
offsets; a classic group's id is GROUP_ID_NOT_FOUND, as in Kafka.
Authorization (Kafka's): DESCRIBE on the group, else GROUP_AUTHORIZATION_FAILED;
topics the principal may not DESCRIBE are left out.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.host.context import RequestContext


async def _group(ctx: RequestContext, g: Any) -> Any:
    service = ctx.share_groups
    code, message = service.offsets_error(g.group_id, altering=False)
    if not _authz.group(ctx, _authz.Op.DESCRIBE, g.group_id):
        code, message = ErrorCode.group_authorization_failed, None
    if code != OK:
        return ctx.build("DescribeShareGroupOffsetsResponseGroup", group_id=g.group_id,
                         topics=(), error_code=code, error_message=message)
    wanted: list[tuple[str, tuple[int, ...] | None]]
    if g.topics is None:
        wanted = [(t, None) for t in service.topics_seen(g.group_id)]
    else:
        wanted = [(t.topic_name, tuple(t.partitions)) for t in g.topics]
    topics = []
    allowed = _authz.topics(ctx, _authz.Op.DESCRIBE, (name for name, _a in wanted))
    for name, asked in wanted:
        if name not in allowed:  # Kafka leaves out the topics it may not DESCRIBE
            continue
        meta = ctx.state.topics.get(name)
        indexes = asked if asked is not None else tuple(range(meta.partitions if meta else 0))
        parts = []
        for index in indexes:
            start, lag, epoch, code, message = await service.describe_offset(
                g.group_id, name, index)
            parts.append(ctx.build("DescribeShareGroupOffsetsResponsePartition",
                                   partition_index=index, start_offset=start,
                                   leader_epoch=epoch,
                                   lag=lag, error_code=code, error_message=message))
        topics.append(ctx.build("DescribeShareGroupOffsetsResponseTopic", topic_name=name,
                                topic_id=meta.topic_id if meta else None,
                                partitions=tuple(parts)))
    return ctx.build("DescribeShareGroupOffsetsResponseGroup", group_id=g.group_id,
                     topics=tuple(topics), error_code=OK, error_message=None)


async def handle(ctx: RequestContext, request: Any) -> Any:
    groups = [await _group(ctx, g) for g in request.groups]
    return ctx.response(throttle_time=NO_THROTTLE, groups=tuple(groups))
