"""ListGroups (key 16), versions 0-5.

v4 adds a state filter (case-insensitive, as in Kafka), v5 a type filter:
"classic" groups, "consumer" groups (KIP-848, protocol type "consumer") and
"share" groups (KIP-932, protocol type "share").
Authorization (Kafka's): with DESCRIBE on the cluster every group is listed,
else only the groups the principal may DESCRIBE.
"""

from __future__ import annotations

from typing import Any

from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.host.context import RequestContext


async def handle(ctx: RequestContext, request: Any) -> Any:
    states = {s.lower() for s in getattr(request, "states_filter", ())}
    types = {t.lower() for t in getattr(request, "types_filter", ())}
    listed = []
    consumer = ctx.consumer_groups
    for group in list(ctx.groups.coordinator.groups.values()):
        if group.group_id in ctx.groups.store.consumer_groups:
            continue  # its offsets' placeholder: the id is a consumer group's
        if states and group.state.value.lower() not in states:
            continue
        if types and "classic" not in types:
            continue
        if ctx.groups.coordinator_error(group.group_id) is not None:
            continue  # a group another broker coordinates now
        listed.append(ctx.build("ListedGroup", group_id=group.group_id,
                                protocol_type=group.protocol_type or "",
                                group_state=group.state.value, group_type="classic"))
    if not types or "share" in types:
        for group_id in sorted(ctx.share_groups.groups):
            share = ctx.share_groups.group(group_id)
            if share is None or ctx.share_groups.coordinator_error(group_id) is not None:
                continue
            if states and share.state.lower() not in states:
                continue
            listed.append(ctx.build("ListedGroup", group_id=group_id, protocol_type="share",
                                    group_state=share.state, group_type="share"))
    if not types or "consumer" in types:
        for group_id in sorted(ctx.groups.store.consumer_groups):
            if consumer.coordinator_error(group_id) is not None:
                continue  # a group another broker coordinates now
            found = consumer.group(group_id)
            if found is None:
                continue
            if states and found.state.lower() not in states:
                continue
            listed.append(ctx.build("ListedGroup", group_id=group_id, protocol_type="consumer",
                                    group_state=found.state, group_type="consumer"))
    if not _authz.cluster(ctx, _authz.Op.DESCRIBE):  # else only the groups it may DESCRIBE
        listed = [g for g in listed if _authz.group(ctx, _authz.Op.DESCRIBE, g.group_id)]
    return ctx.response(throttle_time=NO_THROTTLE, error_code=OK, groups=tuple(listed))
