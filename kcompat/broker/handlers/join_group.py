"""JoinGroup (key 11), versions 0-9.

Quirks: librdkafka 2.0.2 enables consumer groups only if v0 is advertised, so
0-9 are advertised and parsed. From v4 an unknown member first gets
MEMBER_ID_REQUIRED with its new id (KIP-394) and must join again with it. v0
has no rebalance timeout: the session timeout serves as one, as in Kafka.
The response is parked until the rebalance completes (all members re-joined,
the rebalance timeout passed, or — for a new group — the initial delay).
A KIP-848 consumer group with members takes the joining consumer as a classic
member of the group (Kafka 4.4's mixed groups, ``consumer_groups``): answered at
once, its member epoch as generation, never as leader; an empty one gives its id
up to the classic group.
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
from kcompat.group.consumer_classic import CONSUMER_PROTOCOL_TYPE, ClassicJoin
from kcompat.group.coordinator import JoinRequest, JoinResult


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not _authz.group(ctx, _authz.Op.READ, request.group_id):  # Kafka's error response
        return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.group_authorization_failed,
                            generation_id=-1, protocol_type=None,
                            protocol_name=None if ctx.version >= 7 else "", leader="",
                            skip_assignment=False, member_id="", members=())
    if (gate := ctx.groups.coordinator_error(request.group_id)) is not None:
        return coordinator_error_response(ctx, gate)
    session_ms = int(request.session_timeout.total_seconds() * 1000)
    rebalance = getattr(request, "rebalance_timeout", None)
    rebalance_ms = int(rebalance.total_seconds() * 1000) if rebalance is not None else session_ms
    mixed = await ctx.consumer_groups.classic_join(request.group_id, ClassicJoin(
        member_id=request.member_id, new_member_id=ctx.groups.new_member_suffix(),
        instance_id=getattr(request, "group_instance_id", None),
        session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms,
        protocol_type=request.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in request.protocols),
        require_known_member_id=ctx.version >= 4, client_id=ctx.client_id or "",
        client_host=ctx.client_host))
    if mixed is not None:  # a classic member of a KIP-848 group: answered at once
        ok = mixed.error == ErrorCode.none
        return ctx.response(
            throttle_time=NO_THROTTLE, error_code=mixed.error, generation_id=mixed.generation_id,
            protocol_type=CONSUMER_PROTOCOL_TYPE if ok else None,
            protocol_name=mixed.protocol_name or "", leader="", skip_assignment=False,
            member_id=mixed.member_id, members=())
    if (taken := await ctx.consumer_groups.drop_if_empty(request.group_id)) is not None:
        return coordinator_error_response(ctx, taken)
    join = JoinRequest(
        group_id=request.group_id, member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=ctx.client_id or "", client_host=ctx.client_host,
        session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms,
        protocol_type=request.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
        require_known_member_id=ctx.version >= 4,
    )
    groups = ctx.groups
    token, waiter = groups.new_token()
    replies = groups.coordinator.join_group(token, join, now_ms(), groups.new_member_suffix())
    result: JoinResult = await groups.wait(token, waiter, replies)
    members = tuple(
        ctx.build("JoinGroupResponseMember", member_id=mid, group_instance_id=iid, metadata=meta)
        for mid, iid, meta in result.members
    )
    return ctx.response(
        throttle_time=NO_THROTTLE, error_code=result.error, generation_id=result.generation_id,
        protocol_type=result.protocol_type, protocol_name=result.protocol_name or "",
        leader=result.leader, skip_assignment=result.skip_assignment,
        member_id=result.member_id, members=members,
    )
