"""InitProducerId (key 22), versions 0-5.

Idempotent producers (no transactional id) always get a fresh producer id with
epoch 0 — as in Kafka, also when (v3+, KIP-360) they pass their old id and
epoch to reset after a sequence error. Producer ids come from durable blocks in the
metadata log, so no id is ever handed out twice, even across restarts.
Transactional ids arrive with the transactions issue; until then such a request
answers COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.context import RequestContext
from kcompat.broker.handlers._common import NO_THROTTLE, OK


async def handle(ctx: RequestContext, request: Any) -> Any:
    if request.transactional_id is not None:
        return ctx.response(throttle_time=NO_THROTTLE,
                            error_code=ErrorCode.coordinator_not_available,
                            producer_id=-1, producer_epoch=-1)
    return ctx.response(throttle_time=NO_THROTTLE, error_code=OK,
                        producer_id=ctx.state.allocate_producer_id(), producer_epoch=0)
