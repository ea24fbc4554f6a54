"""FindCoordinator (key 10), versions 0-6.

Quirks: single node, so this broker coordinates every group and every
transactional id (key_type 0 and 1). v0-3 ask for one ``key`` and answer in
top-level fields; v4+ batch ``coordinator_keys`` and answer one entry per key.
librdkafka < 2.11 enables LZ4 and its group coordinator only when v0 is
advertised, so v0 stays served. Other key types (2, share groups, which v6 can
name) are INVALID_REQUEST: kcompat has no share groups.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.context import RequestContext
from kcompat.broker.handlers._common import NO_THROTTLE, OK, advertised_host

GROUP, TRANSACTION = 0, 1


def _answer(ctx: RequestContext, key_type: int) -> dict[str, Any]:
    state = ctx.state
    if state.cluster is not None and key_type in (GROUP, TRANSACTION):
        # Cluster mode: the coordinators are not replicated yet (kcompat.broker.cluster).
        return {"error_code": ErrorCode.coordinator_not_available,
                "error_message": "coordinators are not available in cluster mode yet",
                "node_id": -1, "host": "", "port": -1}
    if key_type in (GROUP, TRANSACTION):
        return {"error_code": OK, "error_message": None, "node_id": state.node_id,
                "host": advertised_host(state), "port": state.advertised_port}
    return {"error_code": ErrorCode.invalid_request,
            "error_message": f"Unknown coordinator type received: {key_type}",
            "node_id": -1, "host": "", "port": -1}


async def handle(ctx: RequestContext, request: Any) -> Any:
    key_type = getattr(request, "key_type", GROUP)
    answer = _answer(ctx, key_type)
    if not hasattr(request, "coordinator_keys"):
        return ctx.response(throttle_time=NO_THROTTLE, **answer)
    coordinators = tuple(ctx.build("Coordinator", key=key, **answer)
                         for key in request.coordinator_keys)
    return ctx.response(throttle_time=NO_THROTTLE, coordinators=coordinators)
