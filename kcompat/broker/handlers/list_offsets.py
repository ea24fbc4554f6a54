"""ListOffsets (key 2), versions 1-11.

Quirks: librdkafka <= 2.0 parses from v2, aiokafka v5, librdkafka 2.x v7 (max
timestamp, -3), Java 4.4 v11. v8-v11 add timestamps of tiered storage (-4
earliest local: the log start here; -5 latest tiered, -6 earliest pending
upload: none, offset -1 as Kafka answers without a remote log) and v10 a timeout
for remote look-ups, which never wait here. Spark calls it with -2/-1 very
often, so those stay O(1).
A timestamp with no record at or after it answers offset -1, timestamp -1,
leader epoch -1 (as Kafka does).
read_committed (v2+) answers LATEST with the last stable offset.
A topic the principal may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED for each
of its partitions (offset and timestamp -1), as Kafka answers.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.list_offsets_lookup import offset_for_time
from kcompat.wire.records import RecordError


def _partition(ctx: RequestContext, topic: str, req: Any, committed: bool) -> Any:
    part, code = ctx.cluster.led_partition(topic, req.partition_index)
    offset, ts, epoch = -1, -1, -1
    if part is not None:
        epoch = part.leader_epoch
        current = getattr(req, "current_leader_epoch", -1)
        if current >= 0 and current != part.leader_epoch:
            code = (ErrorCode.unknown_leader_epoch if current > part.leader_epoch
                    else ErrorCode.fenced_leader_epoch)
        else:
            try:
                offset, ts = offset_for_time(part, req.timestamp, committed)
            except RecordError:
                code = ErrorCode.corrupt_message
            if offset < 0:
                # Nothing found (a timestamp after every record, or max-timestamp on an
                # empty log): Kafka answers leader_epoch -1 with offset/timestamp -1, and
                # the Java client then reports an empty leaderEpoch. Found by
                # compat_tests/java/test_differential.py (FINDINGS.md, D2).
                epoch = -1
    return ctx.build("ListOffsetsPartitionResponse", partition_index=req.partition_index,
                     error_code=code, timestamp=ts, offset=offset, leader_epoch=epoch)


def _denied(ctx: RequestContext, req: Any) -> Any:
    return ctx.build("ListOffsetsPartitionResponse", partition_index=req.partition_index,
                     error_code=ErrorCode.topic_authorization_failed, timestamp=-1, offset=-1,
                     leader_epoch=-1)


async def handle(ctx: RequestContext, request: Any) -> Any:
    committed = getattr(request, "isolation_level", 0) == 1
    allowed = _authz.topics(ctx, _authz.Op.DESCRIBE, (t.name for t in request.topics))
    topics = tuple(
        ctx.build("ListOffsetsTopicResponse", name=t.name,
                  partitions=tuple(_partition(ctx, t.name, p, committed) if t.name in allowed
                                   else _denied(ctx, p) for p in t.partitions))
        for t in request.topics
    )
    return ctx.response(throttle_time=NO_THROTTLE, topics=topics)
