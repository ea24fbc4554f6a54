"""AlterShareGroupOffsets (key 91), version 0 (KIP-932).

Moves an empty share group's start offset on the partitions named: their
state in ``__share_group_state`` is replaced by one starting there with
nothing in flight (the holder at the partition's leader is fenced and reads
it when it next claims the partition). A group with members is
NON_EMPTY_GROUP; a missing one is created empty (as Kafka does); a missing
partition is UNKNOWN_TOPIC_OR_PARTITION; offset -1 leaves the partition with
no start offset (its state deleted).
Authorization (Kafka's): READ on the group, else GROUP_AUTHORIZATION_FAILED; READ
on each topic, else TOPIC_AUTHORIZATION_FAILED for its partitions.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.handlers._share import offsets_refusal
from kcompat.broker.host.context import RequestContext


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not _authz.group(ctx, _authz.Op.READ, request.group_id):
        return ctx.response(throttle_time=NO_THROTTLE,
                            error_code=ErrorCode.group_authorization_failed,
                            error_message=None, responses=())
    if (refusal := offsets_refusal(ctx, request.group_id, create=True)) is not None:
        return refusal
    service = ctx.share_groups
    responses = []
    allowed = _authz.topics(ctx, _authz.Op.READ, (t.topic_name for t in request.topics))
    for t in request.topics:
        parts = []
        for p in t.partitions:
            code, message = (ErrorCode.topic_authorization_failed, None) if (
                t.topic_name not in allowed) else await service.alter_offset(
                    request.group_id, t.topic_name, p.partition_index, p.start_offset)
            parts.append(ctx.build("AlterShareGroupOffsetsResponsePartition",
                                   partition_index=p.partition_index, error_code=code,
                                   error_message=message))
        meta = ctx.state.topics.get(t.topic_name)
        responses.append(ctx.build("AlterShareGroupOffsetsResponseTopic",
                                   topic_name=t.topic_name,
                                   topic_id=meta.topic_id if meta else None,
                                   partitions=tuple(parts)))
    await service.note_topics(request.group_id, (t.topic_name for t in request.topics
                                                 if t.topic_name in ctx.state.topics
                                                 and t.topic_name in allowed))
    return ctx.response(throttle_time=NO_THROTTLE, error_code=OK, error_message=None,
                        responses=tuple(responses))
