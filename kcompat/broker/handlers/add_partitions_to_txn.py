"""AddPartitionsToTxn (key 24), versions 0-3 (v4+ is the broker-to-broker
batched form of Transactions V2, not advertised).

Unknown partitions answer UNKNOWN_TOPIC_OR_PARTITION and the rest of the
request OPERATION_NOT_ATTEMPTED, as in Kafka. Only partitions added here may
receive this producer's transactional batches (KIP-890 part 1).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.context import RequestContext
from kcompat.broker.groups import NotCoordinatorError
from kcompat.broker.handlers._common import (
    NO_THROTTLE,
    OK,
    fenced_for_version,
    unknown_partition_error,
)
from kcompat.broker.state import now_ms


async def handle(ctx: RequestContext, request: Any) -> Any:
    tid = request.v3_and_below_transactional_id
    wanted = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    unknown = {tp for tp in wanted if unknown_partition_error(ctx.state, *tp) != OK}
    gate = ctx.txns.coordinator_error(tid)
    if gate is not None:  # not (yet) this id's coordinator
        errors = dict.fromkeys(wanted, gate)
    elif unknown:
        errors = {tp: ErrorCode.unknown_topic_or_partition if tp in unknown
                  else ErrorCode.operation_not_attempted for tp in wanted}
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



