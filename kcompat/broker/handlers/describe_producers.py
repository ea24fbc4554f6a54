"""DescribeProducers (key 61), version 0.

The active idempotent/transactional producers of each partition, from the
partition's producer-state table: epoch, last sequence and timestamp, and the
first offset of an open transaction (-1 if none). Only the partition's leader
answers (NOT_LEADER_OR_FOLLOWER elsewhere), as in Kafka.
Authorization (Kafka's): READ on each topic, else TOPIC_AUTHORIZATION_FAILED
with Kafka's message for its partitions.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.host.context import RequestContext


def _partition(ctx: RequestContext, topic: str, index: int) -> Any:
    part, code = ctx.cluster.led_partition(topic, index)  # the leader's state only
    if part is None:
        return ctx.build("PartitionResponse", partition_index=index, error_code=code,
                         error_message=None, active_producers=())
    producers = tuple(
        ctx.build("ProducerState", producer_id=pid, producer_epoch=entry.epoch,
                  last_sequence=entry.last_seq, last_timestamp=entry.last_timestamp,
                  coordinator_epoch=0, current_txn_start_offset=entry.txn_first_offset)
        for pid, entry in sorted(part.log.producers.producers.items())
    )
    return ctx.build("PartitionResponse", partition_index=index, error_code=OK,
                     error_message=None, active_producers=producers)


def _denied(ctx: RequestContext, index: int) -> Any:
    code = ErrorCode.topic_authorization_failed
    return ctx.build("PartitionResponse", partition_index=index, error_code=code,
                     error_message=_authz.MESSAGES[code], active_producers=())


async def handle(ctx: RequestContext, request: Any) -> Any:
    allowed = _authz.topics(ctx, _authz.Op.READ, (t.name for t in request.topics))
    topics = tuple(
        ctx.build("TopicResponse", name=t.name, partitions=tuple(
            _partition(ctx, t.name, i) if t.name in allowed else _denied(ctx, i)
            for i in t.partition_indexes))
        for t in request.topics
    )
    return ctx.response(throttle_time=NO_THROTTLE, topics=topics)
