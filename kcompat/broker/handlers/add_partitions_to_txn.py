"""AddPartitionsToTxn (key 24), versions 0-3 (v4+ is the broker-to-broker
batched form of Transactions V2, not advertised).

Unknown partitions answer UNKNOWN_TOPIC_OR_PARTITION and the rest of the
request OPERATION_NOT_ATTEMPTED, as in Kafka. Only partitions added here may
receive this producer's transactional batches (KIP-890 part 1).
Authorization (Kafka's): without WRITE on the transactional id every partition is
TRANSACTIONAL_ID_AUTHORIZATION_FAILED; a topic without WRITE (an internal one
always) is TOPIC_AUTHORIZATION_FAILED and the others OPERATION_NOT_ATTEMPTED.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.groups.groups import NotCoordinatorError
from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import (
    NO_THROTTLE,
    OK,
    fenced_for_version,
    unknown_partition_error,
)
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.metadata import TopicMeta
from kcompat.broker.storage.state import now_ms


def _internal(meta: TopicMeta | None) -> bool:
    return meta is not None and meta.internal


async def handle(ctx: RequestContext, request: Any) -> Any:
    tid = request.v3_and_below_transactional_id
    wanted = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    # Kafka: WRITE on the id, then on each topic (never an internal one)
    allowed = _authz.topics(ctx, _authz.Op.WRITE, (name for name, _p in wanted
                                                   if not _internal(ctx.state.topics.get(name))))
    failed = {tp: ErrorCode.topic_authorization_failed if tp[0] not in allowed
              else ErrorCode.unknown_topic_or_partition for tp in wanted
              if tp[0] not in allowed or unknown_partition_error(ctx.state, *tp) != OK}
    gate = ctx.txns.coordinator_error(tid)
    if not _authz.txn_id(ctx, _authz.Op.WRITE, tid):
        errors = dict.fromkeys(wanted, ErrorCode.transactional_id_authorization_failed)
    elif failed and any(code == ErrorCode.topic_authorization_failed
                        for code in failed.values()):
        errors = {tp: failed.get(tp, ErrorCode.operation_not_attempted) for tp in wanted}
    elif gate is not None:  # not (yet) this id's coordinator
        errors = dict.fromkeys(wanted, gate)
    elif failed:
        errors = {tp: failed.get(tp, ErrorCode.operation_not_attempted) for tp in wanted}
    else:
        txns = ctx.txns
        async with txns.lock(tid):
            decision = txns.coordinator.add_partitions(
                tid, request.v3_and_below_producer_id, request.v3_and_below_producer_epoch,
                set(wanted), now_ms())
            try:
                await txns.carry_out(decision)
                code = fenced_for_version(decision.error, ctx.version, 2)
            except NotCoordinatorError as e:
                code = e.code
        errors = dict.fromkeys(wanted, code)
    topics = tuple(
        ctx.build("AddPartitionsToTxnTopicResult", name=t.name, results_by_partition=tuple(
            ctx.build("AddPartitionsToTxnPartitionResult", partition_index=p,
                      partition_error_code=errors[(t.name, p)]) for p in t.partitions))
        for t in request.v3_and_below_topics
    )
    return ctx.response(throttle_time=NO_THROTTLE, results_by_topic_v3_and_below=topics)



