"""ListPartitionReassignments (key 46), version 0 (KIP-455).

Quirks: any broker answers with the controller's view (asked over the
inter-broker link, as Kafka's brokers forward it): a reassignment just
started through another broker is listed even if this broker has not applied
it yet; this broker's own image only when no controller answers. Each
partition being reassigned with Kafka's replica list while it moves — the
target, then the replicas being removed — and the adding and removing
replicas. Null topics lists every reassignment; topics
or partitions that are unknown or not moving are left out, as Kafka does.
Authorization (Kafka's controller): DESCRIBE on the cluster, else
CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.metadata import Reassignment


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not _authz.cluster(ctx, _authz.Op.DESCRIBE):
        code = ErrorCode.cluster_authorization_failed
        return ctx.response(throttle_time=NO_THROTTLE, error_code=code,
                            error_message=_authz.MESSAGES[code], topics=())
    await ctx.controller.lifecycle.wait_serving(timeout_s=5.0)
    found = await ctx.broker.quorum_admin.reassignments(timeout_s=5.0)
    moving = ctx.cluster.image.reassignments if found is None else {
        key: Reassignment(tuple(target), tuple(original), tuple(leaving))
        for key, (target, original, leaving) in found.items()}
    if request.topics is None:
        asked = sorted(moving)
    else:
        asked = [(t.name, int(i)) for t in request.topics for i in t.partition_indexes]
    by_topic: dict[str, list[Any]] = {}
    for name, index in asked:
        move = moving.get((name, index))
        if move is not None:
            by_topic.setdefault(name, []).append(ctx.build(
                "OngoingPartitionReassignment", partition_index=index,
                replicas=move.replicas, adding_replicas=move.adding,
                removing_replicas=move.removing))
    topics = tuple(ctx.build("OngoingTopicReassignment", name=name, partitions=tuple(parts))
                   for name, parts in by_topic.items())
    return ctx.response(throttle_time=NO_THROTTLE, error_code=OK, error_message=None,
                        topics=topics)
