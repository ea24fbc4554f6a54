"""DescribeTransactions (key 65), version 0.

State, timeout, start time, producer id/epoch and partitions of each
transactional id; an unknown id answers TRANSACTIONAL_ID_NOT_FOUND.
Authorization (Kafka's): DESCRIBE on each transactional id, else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED; a described transaction lists only the
topics the principal may DESCRIBE.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, OK, ms_to_datetime
from kcompat.broker.host.context import RequestContext


def _describe(ctx: RequestContext, tid: str) -> Any:
    if not _authz.txn_id(ctx, _authz.Op.DESCRIBE, tid):
        return ctx.build("TransactionState",
                         error_code=ErrorCode.transactional_id_authorization_failed,
                         transactional_id=tid, transaction_state="",
                         transaction_timeout=datetime.timedelta(0),
                         transaction_start_time=ms_to_datetime(0),
                         producer_id=0, producer_epoch=0, topics=())
    gate = ctx.txns.coordinator_error(tid)  # only the coordinator answers
    meta = ctx.txns.coordinator.txns.get(tid) if gate is None else None
    if gate is not None:
        return ctx.build("TransactionState", error_code=gate,
                         transactional_id=tid, transaction_state="",
                         transaction_timeout=datetime.timedelta(0),
                         transaction_start_time=ms_to_datetime(0),
                         producer_id=-1, producer_epoch=-1, topics=())
    if meta is None:
        return ctx.build("TransactionState", error_code=ErrorCode.transactional_id_not_found,
                         transactional_id=tid, transaction_state="",
                         transaction_timeout=datetime.timedelta(0),
                         transaction_start_time=ms_to_datetime(0),
                         producer_id=-1, producer_epoch=-1, topics=())
    by_topic: dict[str, list[int]] = {}
    allowed = _authz.topics(ctx, _authz.Op.DESCRIBE, (topic for topic, _p in meta.partitions))
    for topic, partition in sorted(meta.partitions):
        if topic in allowed:  # Kafka shows only the topics the principal may DESCRIBE
            by_topic.setdefault(topic, []).append(partition)
    return ctx.build(
        "TransactionState", error_code=OK, transactional_id=tid,
        transaction_state=meta.state.value, transaction_timeout=datetime.timedelta(milliseconds=meta.timeout_ms),
        transaction_start_time=ms_to_datetime(max(meta.start_ms, 0)),
        producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
        topics=tuple(ctx.build("TopicData", topic=t, partitions=tuple(ps))
                     for t, ps in by_topic.items()))


async def handle(ctx: RequestContext, request: Any) -> Any:
    return ctx.response(throttle_time=NO_THROTTLE, transaction_states=tuple(
        _describe(ctx, tid) for tid in request.transactional_ids))
