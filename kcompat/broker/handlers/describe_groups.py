"""DescribeGroups (key 15), versions 0-6.

An unknown group is described as state "Dead" with no error, as Kafka does up
to v5; so is a KIP-848 consumer group (Kafka 4.4 describes only classic groups
here; ConsumerGroupDescribe serves the others). From v6 (KIP-1043) both are
GROUP_ID_NOT_FOUND with Kafka's message, still in state "Dead". A Stable
group shows its protocol and each member's metadata for it; in any other
state, as Kafka does, no protocol and no member metadata, while each member's
assignment is still the last one handed out.
Authorization (Kafka's): a group the principal may not DESCRIBE is answered
GROUP_AUTHORIZATION_FAILED, before the others; include_authorized_operations
fills each described group's operations (its group ACLs allow).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.host.context import RequestContext
from kcompat.group.group import GroupState

AUTHORIZED_OPERATIONS_OMITTED = -2147483648


def _describe(ctx: RequestContext, group_id: str) -> Any:
    if (code := ctx.groups.coordinator_error(group_id)) is not None:
        return ctx.build("DescribedGroup", error_code=code, group_id=group_id, group_state="",
                         protocol_type="", protocol_data="", members=(),
                         authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
    group = ctx.groups.coordinator.groups.get(group_id)
    consumer = ctx.consumer_groups.group(group_id) is not None
    if group is None or consumer:
        code, message = OK, None
        if ctx.version >= 6:
            code = ErrorCode.group_id_not_found
            message = (f"Group {group_id} is not a classic group." if consumer
                       else f"Group {group_id} not found.")
        return ctx.build("DescribedGroup", error_code=code, error_message=message,
                         group_id=group_id, group_state="Dead",
                         protocol_type="", protocol_data="", members=(),
                         authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
    stable = group.state is GroupState.STABLE
    protocol = (group.protocol_name or "") if stable else ""
    members = tuple(
        ctx.build("DescribedGroupMember", member_id=m.member_id,
                  group_instance_id=m.group_instance_id, client_id=m.client_id,
                  client_host=m.client_host,
                  member_metadata=m.metadata_for(protocol) if stable else b"",
                  member_assignment=m.assignment)
        for m in group.members.values()
    )
    return ctx.build("DescribedGroup", error_code=OK, group_id=group_id,
                     group_state=group.state.value, protocol_type=group.protocol_type or "",
                     protocol_data=protocol, members=members,
                     authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)


def _denied(ctx: RequestContext, group_id: str) -> Any:
    return ctx.build("DescribedGroup", error_code=ErrorCode.group_authorization_failed,
                     group_id=group_id, group_state="", protocol_type="", protocol_data="",
                     members=(), authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)


async def handle(ctx: RequestContext, request: Any) -> Any:
    asked = bool(getattr(request, "include_authorized_operations", False))
    described, denied = [], []
    for group_id in request.groups:
        if not _authz.group(ctx, _authz.Op.DESCRIBE, group_id):
            denied.append(_denied(ctx, group_id))
            continue
        found = _describe(ctx, group_id)
        if asked:  # without an authorizer every group operation, as Kafka answers
            found = dataclasses.replace(found, authorized_operations=ctx.authorized_operations(
                _authz.GROUP, group_id))
        described.append(found)
    # Kafka 4.4 answers the groups denied first (measured)
    return ctx.response(throttle_time=NO_THROTTLE, groups=tuple(denied + described))
