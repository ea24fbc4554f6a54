"""EndTxn (key 26), versions 0-4 (v5 belongs to Transactions V2).

Commit or abort: PrepareCommit/PrepareAbort is made durable, the markers are
written to every partition of the transaction, then CompleteCommit/Abort.
The answer comes after all of that, so a client's next transaction never
overlaps the markers of this one. A retried EndTxn for a transaction that
already completed the same way answers NONE.
Authorization (Kafka's): WRITE on the transactional id, else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
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
    if (gate := txns.coordinator_error(tid)) is not None:
        return ctx.response(throttle_time=NO_THROTTLE, error_code=gate)
    async with txns.lock(tid):
        decision = txns.coordinator.end_txn(tid, request.producer_id, request.producer_epoch,
                                            request.committed, now_ms())
        try:
            await txns.carry_out(decision)
        except NotCoordinatorError as e:  # leadership moved meanwhile
            return ctx.response(throttle_time=NO_THROTTLE, error_code=e.code)
    return ctx.response(throttle_time=NO_THROTTLE,
                        error_code=fenced_for_version(decision.error, ctx.version, 2))
