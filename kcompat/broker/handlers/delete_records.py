"""DeleteRecords (key 21), versions 0-2.

Quirks: ``offset`` -1 means "up to the high watermark". An offset above the
high watermark, or negative other than -1, is OFFSET_OUT_OF_RANGE; one at or
below the log start changes nothing. Every partition answers its (new)
low watermark, the log start offset; an unknown topic or partition answers
UNKNOWN_TOPIC_OR_PARTITION with low watermark -1. A topic whose
cleanup.policy lacks ``delete`` (compact only) answers POLICY_VIOLATION, low
watermark -1, and deletes nothing, as Kafka does (its message goes to the
broker log: the response has no message field); so do ``__kc_schedule`` and
``__share_group_state``, whose log starts move with their snapshots
(``broker.delays``, ``broker.share_compaction``). Segment deletion runs
without an await, so no append can interleave with it; its file work (the new
log start on disk, the unlinks) runs in the flusher's worker thread
(``Flusher.settle``), and the answer waits for it: a failure there answers
KAFKA_STORAGE_ERROR. Only the leader accepts it
(else NOT_LEADER_OR_FOLLOWER); followers follow the leader's log start
(``replication.log_starts``).
Authorization (Kafka's): DELETE on each topic, else TOPIC_AUTHORIZATION_FAILED
for its partitions (low watermark -1).
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.state import now_ms
from kcompat.ext.schedule_log import SCHEDULE_TOPIC
from kcompat.group.share_state import SHARE_STATE_TOPIC

HIGH_WATERMARK = -1
# internal logs whose leader moves the log start past what no state needs
SELF_PRUNED = frozenset({SCHEDULE_TOPIC, SHARE_STATE_TOPIC})
log = logging.getLogger("kcompat.broker")


async def _partition(ctx: RequestContext, topic: str, req: Any) -> Any:
    cluster = ctx.cluster
    part, code = cluster.led_partition(topic, req.partition_index)  # followers follow it
    meta = ctx.state.topics.get(topic)
    if meta is not None and meta.view_of is not None:  # read-only: the source's records
        part, code = None, ErrorCode.invalid_topic_exception
    low = -1
    if part is not None and topic in SELF_PRUNED:  # its log start follows its snapshots
        log.info("DeleteRecords: the records of %s-%d can not be deleted: the log drops "
                 "what it no longer needs itself", topic, req.partition_index)
        return ctx.build("DeleteRecordsPartitionResult", partition_index=req.partition_index,
                         low_watermark=-1, error_code=ErrorCode.policy_violation)
    if part is not None and not part.log.config.delete:
        log.info("DeleteRecords: Records of partition %s-%d can not be deleted due to the "
                 "configured policy", topic, req.partition_index)
        return ctx.build("DeleteRecordsPartitionResult", partition_index=req.partition_index,
                         low_watermark=-1, error_code=ErrorCode.policy_violation)
    if part is not None:
        offset = part.high_watermark if req.offset == HIGH_WATERMARK else req.offset
        if offset < 0 or offset > part.high_watermark:
            code = ErrorCode.offset_out_of_range
        else:
            try:
                part.log.delete_records_before(offset, now_ms())
                cluster.log_starts_moved(topic, req.partition_index)
                await ctx.state.flusher.settle(part.log)  # the new start is on disk
            except OSError as e:
                log.warning("DeleteRecords on %s-%d: %s", topic, req.partition_index, e)
                code = ErrorCode.kafka_storage_error
        low = part.log.log_start_offset
    return ctx.build("DeleteRecordsPartitionResult", partition_index=req.partition_index,
                     low_watermark=low, error_code=code)


async def handle(ctx: RequestContext, request: Any) -> Any:
    topics = []
    allowed = _authz.topics(ctx, _authz.Op.DELETE, (t.name for t in request.topics))
    for t in request.topics:
        partitions = [await _partition(ctx, t.name, p) if t.name in allowed else ctx.build(
            "DeleteRecordsPartitionResult", partition_index=p.partition_index, low_watermark=-1,
            error_code=ErrorCode.topic_authorization_failed) for p in t.partitions]
        topics.append(ctx.build("DeleteRecordsTopicResult", name=t.name,
                                partitions=tuple(partitions)))
    return ctx.response(throttle_time=NO_THROTTLE, topics=tuple(topics))
