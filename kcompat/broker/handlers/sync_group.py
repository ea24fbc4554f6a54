"""SyncGroup (key 14), versions 0-5.

The leader sends every member's assignment; each member's response is parked
until the leader's arrives. v5 checks protocol type and name
(INCONSISTENT_GROUP_PROTOCOL on mismatch).
"""

from __future__ import annotations

from typing import Any

from kcompat.broker.context import RequestContext
from kcompat.broker.handlers._common import NO_THROTTLE, coordinator_error_response
from kcompat.broker.state import now_ms
from kcompat.group.coordinator import SyncResult


async def handle(ctx: RequestContext, request: Any) -> Any:
    if (gate := ctx.groups.coordinator_error(request.group_id)) is not None:
        return coordinator_error_response(ctx, gate)
    groups = ctx.groups
    token, waiter = groups.new_token()
    replies = groups.coordinator.sync_group(
        token, request.group_id, request.generation_id, request.member_id,
        getattr(request, "group_instance_id", None), getattr(request, "protocol_type", None),
        getattr(request, "protocol_name", None),
        {a.member_id: bytes(a.assignment) for a in request.assignments}, now_ms(),
    )
    result: SyncResult = await groups.wait(token, waiter, replies)
    return ctx.response(throttle_time=NO_THROTTLE, error_code=result.error,
                        protocol_type=result.protocol_type, protocol_name=result.protocol_name,
                        assignment=result.assignment)
