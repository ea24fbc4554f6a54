"""DescribeGroups (key 15), versions 0-6.

An unknown group is described as state "Dead" with no error, as Kafka does up
to v5; so is a KIP-848 consumer group (Kafka 4.4 describes only classic groups
here; ConsumerGroupDescribe serves the others). From v6 (KIP-1043) both are
GROUP_ID_NOT_FOUND with Kafka's message, still in state "Dead". Member metadata and assignment are the selected protocol's bytes.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.context import RequestContext
from kcompat.broker.handlers._common import NO_THROTTLE, OK

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
    protocol = group.protocol_name or ""
    members = tuple(
        ctx.build("DescribedGroupMember", member_id=m.member_id,
                  group_instance_id=m.group_instance_id, client_id=m.client_id,
                  client_host=m.client_host, member_metadata=m.metadata_for(protocol),
                  member_assignment=m.assignment)
        for m in group.members.values()
    )
    return ctx.build("DescribedGroup", error_code=OK, group_id=group_id,
                     group_state=group.state.value, protocol_type=group.protocol_type or "",
                     protocol_data=protocol, members=members,
                     authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)


async def handle(ctx: RequestContext, request: Any) -> Any:
    return ctx.response(throttle_time=NO_THROTTLE,
                        groups=tuple(_describe(ctx, g) for g in request.groups))
