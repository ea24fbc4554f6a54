"""AddOffsetsToTxn (key 25), versions 0-4.

Adds the group's ``__consumer_offsets`` partition to the transaction, so that
the following TxnOffsetCommit is covered by its commit or abort marker. As in
Kafka the partition is the group's by ``offsets.topic.num.partitions`` whether
or not the offsets topic exists yet: the TxnOffsetCommit that follows finds
the group coordinator first, which creates it (FindCoordinator). Refusing with
COORDINATOR_NOT_AVAILABLE instead left a producer whose group was never looked
up retrying forever (clients then look up the transaction coordinator, which
creates nothing).
Authorization (Kafka's): WRITE on the transactional id, else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED; then READ on the group, else
GROUP_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.groups.groups import NotCoordinatorError
from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, fenced_for_version
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.state import now_ms


async def handle(ctx: RequestContext, request: Any) -> Any:
    txns = ctx.txns
    tid = request.transactional_id
    if not _authz.txn_id(ctx, _authz.Op.WRITE, tid):
        return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.transactional_id_authorization_failed)
    if not _authz.group(ctx, _authz.Op.READ, request.group_id):
        return ctx.response(throttle_time=NO_THROTTLE,
                            error_code=ErrorCode.group_authorization_failed)
    if (gate := txns.coordinator_error(tid)) is not None:
        return ctx.response(throttle_time=NO_THROTTLE, error_code=gate)
    async with txns.lock(tid):
        try:
            partition = txns.offsets_partition(request.group_id)
            decision = txns.coordinator.add_partitions(
                tid, request.producer_id, request.producer_epoch, {partition}, now_ms())
            await txns.carry_out(decision)
        except NotCoordinatorError as e:  # leadership moved meanwhile
            return ctx.response(throttle_time=NO_THROTTLE, error_code=e.code)
    return ctx.response(throttle_time=NO_THROTTLE,
                        error_code=fenced_for_version(decision.error, ctx.version, 2))
