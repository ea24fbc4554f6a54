"""InitProducerId (key 22), versions 0-5.

Without a transactional id (idempotent producers) every call gets a fresh
producer id with epoch 0 — as in Kafka, also when (v3+, KIP-360) the producer
passes its old id and epoch after a sequence error. With a transactional id the
transaction coordinator bumps the epoch (fencing any older producer with the
same id); an ongoing transaction of that id is first aborted and the caller
told CONCURRENT_TRANSACTIONS, so it retries. PRODUCER_FENCED is answered as
INVALID_PRODUCER_EPOCH below v4. Producer ids come from durable blocks in the
metadata log, so no id is ever handed out twice; when a new block cannot be
written (a full disk, EIO) the answer is COORDINATOR_NOT_AVAILABLE, which
clients retry, and nothing is handed out.
Authorization (Kafka's): a transactional id needs WRITE on it, else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED; an idempotent producer IDEMPOTENT_WRITE on
the cluster or WRITE on some topic (KIP-679), else CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.groups.groups import NotCoordinatorError
from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, OK, fenced_for_version
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.state import now_ms


def _denied(ctx: RequestContext, tid: str | None) -> ErrorCode | None:
    """Kafka's rule: WRITE on the transactional id; an idempotent producer needs
    IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679)."""
    if tid is not None:
        return None if _authz.txn_id(ctx, _authz.Op.WRITE, tid) else ErrorCode.transactional_id_authorization_failed
    if _authz.cluster(ctx, _authz.Op.IDEMPOTENT_WRITE) or _authz.any_topic_write(ctx):
        return None
    return ErrorCode.cluster_authorization_failed


async def handle(ctx: RequestContext, request: Any) -> Any:
    tid = request.transactional_id
    if (denied := _denied(ctx, tid)) is not None:
        return ctx.response(throttle_time=NO_THROTTLE, producer_id=-1, producer_epoch=-1,
                            error_code=denied)
    try:  # a new block of ids is written first: a full disk or EIO refuses it
        ctx.cluster.reserve_producer_ids()
    except OSError:
        return ctx.response(throttle_time=NO_THROTTLE, producer_id=-1, producer_epoch=-1,
                            error_code=ErrorCode.coordinator_not_available)
    if tid is None:
        return ctx.response(throttle_time=NO_THROTTLE, error_code=OK,
                            producer_id=ctx.cluster.allocate_producer_id(), producer_epoch=0)
    txns = ctx.txns
    if (gate := txns.coordinator_error(tid)) is not None:
        return ctx.response(throttle_time=NO_THROTTLE, producer_id=-1, producer_epoch=-1,
                            error_code=gate)
    timeout_ms = int(request.transaction_timeout.total_seconds() * 1000)
    async with txns.lock(tid):
        decision = txns.coordinator.init_producer_id(
            tid, timeout_ms, getattr(request, "producer_id", -1),
            getattr(request, "producer_epoch", -1), now_ms(), ctx.cluster.allocate_producer_id)
        try:
            await txns.carry_out(decision)
        except NotCoordinatorError as e:  # leadership moved meanwhile
            return ctx.response(throttle_time=NO_THROTTLE, producer_id=-1, producer_epoch=-1,
                                error_code=e.code)
    if decision.error != OK:
        return ctx.response(throttle_time=NO_THROTTLE, producer_id=-1, producer_epoch=-1,
                            error_code=fenced_for_version(decision.error, ctx.version, 4))
    meta = txns.coordinator.txns[tid]
    return ctx.response(throttle_time=NO_THROTTLE, error_code=OK,
                        producer_id=meta.producer_id, producer_epoch=meta.producer_epoch)
