"""LeaveGroup (key 13), versions 0-5.

v0-2 name one member; v3+ a batch of members, each by member id and/or group
instance id (a static member may leave by instance id alone). A departure
starts a rebalance at once, so the remaining members take over its partitions
without waiting for a session timeout. Classic members of a KIP-848 consumer
group leave it the same way (``consumer_groups``).
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
        return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.group_authorization_failed, members=())
    if (gate := ctx.groups.coordinator_error(request.group_id)) is not None:
        return coordinator_error_response(ctx, gate)
    if ctx.version >= 3:
        members = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        members = [(request.member_id, None)]
    groups = ctx.groups
    mixed = await ctx.consumer_groups.classic_leave(request.group_id, members)
    if mixed is not None:  # classic members of a KIP-848 group
        error, per_member = ErrorCode.none, mixed
    else:
        error, per_member, replies = groups.coordinator.leave_group(request.group_id, members,
                                                                    now_ms())
        await groups.deliver(replies)
    if ctx.version < 3 and per_member:
        error = per_member[0]
    responses = tuple(
        ctx.build("MemberResponse", member_id=mid, group_instance_id=iid, error_code=code)
        for (mid, iid), code in zip(members, per_member, strict=False)
    ) if ctx.version >= 3 else ()
    return ctx.response(throttle_time=NO_THROTTLE, error_code=error, members=responses)
