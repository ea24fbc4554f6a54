"""OffsetDelete (key 47), version 0.

Deletes committed offsets of a group for some partitions. Refused per partition
with GROUP_SUBSCRIBED_TO_TOPIC while an active consumer group subscribes to
the topic: a classic group's members by their protocol metadata, a KIP-848
group's by name or by a regex that matches it (Kafka's
``subscribedTopicNames``), in any state — after the partitions the metadata
lacks, which are UNKNOWN_TOPIC_OR_PARTITION first (Kafka's request handler
checks them before the coordinator sees the request). An unknown group, or a
share group (Kafka: "not a consumer group"), answers GROUP_ID_NOT_FOUND.
Authorization (Kafka's): without DELETE on the group the answer is
GROUP_AUTHORIZATION_FAILED; a topic without READ is TOPIC_AUTHORIZATION_FAILED
for each of its partitions.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.groups.groups import NotCoordinatorError
from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import (
    NO_THROTTLE,
    OK,
    coordinator_error_response,
    unknown_partition_error,
)
from kcompat.broker.host.context import RequestContext
from kcompat.group.group import GroupState


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not _authz.group(ctx, _authz.Op.DELETE, request.group_id):
        return ctx.response(throttle_time=NO_THROTTLE,
                            error_code=ErrorCode.group_authorization_failed, topics=())
    if (gate := ctx.groups.coordinator_error(request.group_id)) is not None:
        return coordinator_error_response(ctx, gate)
    groups = ctx.groups
    if (consumer := ctx.consumer_groups.group(request.group_id)) is not None:  # KIP-848
        subscribed = consumer.subscribed_topic_names()
    else:
        group = groups.coordinator.groups.get(request.group_id)
        if group is None or group.is_(GroupState.DEAD):
            return ctx.response(throttle_time=NO_THROTTLE,
                                error_code=ErrorCode.group_id_not_found, topics=())
        subscribed = (set() if group.is_(GroupState.EMPTY)
                      else (group.subscribed_topics() or set()))
    errors: dict[tuple[str, int], ErrorCode] = {}
    allowed = _authz.topics(ctx, _authz.Op.READ, (t.name for t in request.topics))
    for t in request.topics:
        for p in t.partitions:
            if t.name not in allowed:
                code = ErrorCode.topic_authorization_failed
            else:  # a partition the metadata lacks first, as Kafka's request handler
                code = unknown_partition_error(ctx.state, t.name, p.partition_index)
                if code == OK and t.name in subscribed:
                    code = ErrorCode.group_subscribed_to_topic
            errors[(t.name, p.partition_index)] = code
    try:
        await groups.delete_offsets(request.group_id, [tp for tp, e in errors.items() if e == OK])
    except NotCoordinatorError as e:  # leadership moved meanwhile
        return ctx.response(throttle_time=NO_THROTTLE, error_code=e.code, topics=())
    topics = tuple(
        ctx.build("OffsetDeleteResponseTopic", name=t.name, partitions=tuple(
            ctx.build("OffsetDeleteResponsePartition", partition_index=p.partition_index,
                      error_code=errors[(t.name, p.partition_index)])
            for p in t.partitions))
        for t in request.topics
    )
    return ctx.response(throttle_time=NO_THROTTLE, error_code=OK, topics=topics)
