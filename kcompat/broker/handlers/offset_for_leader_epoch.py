"""OffsetForLeaderEpoch (key 23), versions 2-4.

Consumers use it to validate their position after a leader change (Java needs
v3+; kafka-python uses it when leader epochs increase). The answer is the
largest epoch <= the requested one and the end offset of that epoch, from the
log's leader-epoch cache; unknown -> (-1, -1).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.context import RequestContext
from kcompat.broker.handlers._common import NO_THROTTLE


def _partition(ctx: RequestContext, topic: str, req: Any) -> Any:
    part, code = ctx.cluster.led_partition(topic, req.partition)
    epoch, end = -1, -1
    if part is None:
        pass
    elif req.current_leader_epoch >= 0 and req.current_leader_epoch != part.leader_epoch:
        code = (ErrorCode.unknown_leader_epoch if req.current_leader_epoch > part.leader_epoch
                else ErrorCode.fenced_leader_epoch)
    else:
        epoch, end = part.log.end_offset_for_epoch(req.leader_epoch)
    return ctx.build("EpochEndOffset", error_code=code, partition=req.partition,
                     leader_epoch=epoch, end_offset=end)


async def handle(ctx: RequestContext, request: Any) -> Any:
    topics = tuple(
        ctx.build("OffsetForLeaderTopicResult", topic=t.topic,
                  partitions=tuple(_partition(ctx, t.topic, p) for p in t.partitions))
        for t in request.topics
    )
    return ctx.response(throttle_time=NO_THROTTLE, topics=topics)
