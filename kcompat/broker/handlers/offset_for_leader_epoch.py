"""OffsetForLeaderEpoch (key 23), versions 2-4.

Consumers use it to validate their position after a leader change (Java needs
v3+; kafka-python uses it when leader epochs increase). The answer is the
largest epoch <= the requested one and the end offset of that epoch, from the
log's leader-epoch cache; unknown -> (-1, -1). Without CLUSTER_ACTION on the
cluster a topic needs DESCRIBE, else TOPIC_AUTHORIZATION_FAILED (KIP-320's rule).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE
from kcompat.broker.host.context import RequestContext


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


def _denied(ctx: RequestContext, req: Any) -> Any:
    return ctx.build("EpochEndOffset", error_code=ErrorCode.topic_authorization_failed,
                     partition=req.partition, leader_epoch=-1, end_offset=-1)


async def handle(ctx: RequestContext, request: Any) -> Any:
    # Kafka: CLUSTER_ACTION (a replica's) answers every topic, else DESCRIBE on each
    names = [t.topic for t in request.topics]
    allowed = (set(names) if _authz.cluster(ctx, _authz.Op.CLUSTER_ACTION)
               else _authz.topics(ctx, _authz.Op.DESCRIBE, names))
    topics = tuple(
        ctx.build("OffsetForLeaderTopicResult", topic=t.topic,
                  partitions=tuple(_partition(ctx, t.topic, p) if t.topic in allowed
                                   else _denied(ctx, p) for p in t.partitions))
        for t in request.topics
    )
    return ctx.response(throttle_time=NO_THROTTLE, topics=topics)
