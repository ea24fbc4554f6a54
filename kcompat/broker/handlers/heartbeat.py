"""Heartbeat (key 12), versions 0-4.

Keeps a member's session alive; answers REBALANCE_IN_PROGRESS while the group
prepares a rebalance (the member should re-join), ILLEGAL_GENERATION or
UNKNOWN_MEMBER_ID when the member is out of date, FENCED_INSTANCE_ID for a
replaced static member. A classic member of a KIP-848 consumer group is
told REBALANCE_IN_PROGRESS when it must rejoin to give up or take partitions
(``consumer_groups``).
Without READ on the group the answer is GROUP_AUTHORIZATION_FAILED (Kafka's
check, made before the coordinator is asked).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, coordinator_error_response
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.state import now_ms


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not _authz.group(ctx, _authz.Op.READ, request.group_id):
        return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.group_authorization_failed)
    if (gate := ctx.groups.coordinator_error(request.group_id)) is not None:
        return coordinator_error_response(ctx, gate)
    mixed = await ctx.consumer_groups.classic_heartbeat(
        request.group_id, request.member_id, getattr(request, "group_instance_id", None),
        request.generation_id)
    if mixed is not None:  # a classic member of a KIP-848 group
        return ctx.response(throttle_time=NO_THROTTLE, error_code=mixed)
    error = ctx.groups.coordinator.heartbeat(
        request.group_id, request.generation_id, request.member_id,
        getattr(request, "group_instance_id", None), now_ms())
    return ctx.response(throttle_time=NO_THROTTLE, error_code=error)
