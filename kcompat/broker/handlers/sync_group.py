"""SyncGroup (key 14), versions 0-5.

The leader sends every member's assignment; each member's response is parked
until the leader's arrives, and answered once the generation and its
assignments are written to ``__consumer_offsets`` (a member syncing while that
write is on its way waits for it; a failed write answers its error, and the
group rebalances: ``GroupService.deliver``). v5 checks protocol type and name
(INCONSISTENT_GROUP_PROTOCOL on mismatch). A classic member of a KIP-848
consumer group gets its current assignment at once (``consumer_groups``).
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
from kcompat.group.consumer_classic import CONSUMER_PROTOCOL_TYPE
from kcompat.group.consumer_protocol import encode_assignment
from kcompat.group.coordinator import SyncResult


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not _authz.group(ctx, _authz.Op.READ, request.group_id):
        return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.group_authorization_failed,
                            protocol_type=None, protocol_name=None, assignment=b"")
    if (gate := ctx.groups.coordinator_error(request.group_id)) is not None:
        return coordinator_error_response(ctx, gate)
    mixed = await ctx.consumer_groups.classic_sync(
        request.group_id, request.member_id, getattr(request, "group_instance_id", None),
        request.generation_id, getattr(request, "protocol_type", None),
        getattr(request, "protocol_name", None))
    if mixed is not None:  # a classic member of a KIP-848 group: its current assignment
        ok = mixed.error == ErrorCode.none
        return ctx.response(throttle_time=NO_THROTTLE, error_code=mixed.error,
                            protocol_type=CONSUMER_PROTOCOL_TYPE if ok else None,
                            protocol_name=mixed.protocol_name,
                            assignment=encode_assignment(mixed.assignment) if ok else b"")
    groups = ctx.groups
    token, waiter = groups.new_token()
    replies = groups.coordinator.sync_group(
        token, request.group_id, request.generation_id, request.member_id,
        getattr(request, "group_instance_id", None), getattr(request, "protocol_type", None),
        getattr(request, "protocol_name", None),
        {a.member_id: bytes(a.assignment) for a in request.assignments}, now_ms(),
    )
    result: SyncResult = await groups.wait(token, waiter, replies, request.group_id)
    return ctx.response(throttle_time=NO_THROTTLE, error_code=result.error,
                        protocol_type=result.protocol_type, protocol_name=result.protocol_name,
                        assignment=result.assignment)
