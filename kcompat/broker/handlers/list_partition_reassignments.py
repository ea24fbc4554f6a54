"""ListPartitionReassignments (key 46), version 0 (KIP-455).

Quirks: any broker answers from its metadata image (the controller's after
it caught up): each partition being reassigned with Kafka's replica list
while it moves — the target, then the replicas being removed — and the
adding and removing replicas. Null topics lists every reassignment; topics
or partitions that are unknown or not moving are left out, as Kafka does.
"""

from __future__ import annotations

from typing import Any

from kcompat.broker.context import RequestContext
from kcompat.broker.handlers._common import NO_THROTTLE, OK


async def handle(ctx: RequestContext, request: Any) -> Any:
    await ctx.controller.lifecycle.wait_serving(timeout_s=5.0)
    moving = ctx.cluster.image.reassignments
    if request.topics is None:
        asked = sorted(moving)
    else:
        asked = [(t.name, int(i)) for t in request.topics for i in t.partition_indexes]
    by_topic: dict[str, list[Any]] = {}
    for name, index in asked:
        found = moving.get((name, index))
        if found is not None:
            by_topic.setdefault(name, []).append(ctx.build(
                "OngoingPartitionReassignment", partition_index=index,
                replicas=found.replicas, adding_replicas=found.adding,
                removing_replicas=found.removing))
    topics = tuple(ctx.build("OngoingTopicReassignment", name=name, partitions=tuple(parts))
                   for name, parts in by_topic.items())
    return ctx.response(throttle_time=NO_THROTTLE, error_code=OK, error_message=None,
                        topics=topics)
