"""ShareGroupDescribe (key 77), version 1 (KIP-932).

Members, epochs, assignments (topic id and name) and state of each share
group this broker coordinates; another broker's group is NOT_COORDINATOR, an
unknown one or a classic group GROUP_ID_NOT_FOUND, as in Kafka. Authorized operations are not computed (kcompat has no ACLs yet):
-2147483648, Kafka's "not requested" value.
Authorization (Kafka's): a group the principal may not DESCRIBE is
GROUP_AUTHORIZATION_FAILED, before the others; include_authorized_operations fills
each described group's operations. A group answered with an error has no
state, epochs 0 and no assignor, as Kafka leaves them (not "Dead").
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.handlers._group_answers import NOT_REQUESTED, assignment
from kcompat.broker.host.context import RequestContext


def _missing(ctx: RequestContext, group_id: str, code: ErrorCode, message: str | None) -> Any:
    return ctx.build("DescribedGroup", error_code=code, error_message=message,
                     group_id=group_id, group_state="", group_epoch=0,
                     assignment_epoch=0, assignor_name="", members=(),
                     authorized_operations=NOT_REQUESTED)


async def handle(ctx: RequestContext, request: Any) -> Any:
    service = ctx.share_groups
    out, denied = [], []
    asked = bool(request.include_authorized_operations)
    for group_id in request.group_ids:
        if not _authz.group(ctx, _authz.Op.DESCRIBE, group_id):
            denied.append(_missing(ctx, group_id, ErrorCode.group_authorization_failed, None))
            continue
        if not group_id:
            out.append(_missing(ctx, group_id, ErrorCode.invalid_group_id,
                                "The group id is empty."))
            continue
        if (gate := service.coordinator_error(group_id)) is not None:
            out.append(_missing(ctx, group_id, gate, None))
            continue
        if service.is_classic(group_id):
            out.append(_missing(ctx, group_id, ErrorCode.group_id_not_found,
                                f"Group {group_id} is not a share group."))
            continue
        group = service.group(group_id)
        if group is None:
            out.append(_missing(ctx, group_id, ErrorCode.group_id_not_found,
                                f"Group {group_id} not found."))
            continue
        d = group.describe()
        members = tuple(ctx.build(
            "Member", member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
            client_id=m.client_id, client_host=m.client_host,
            subscribed_topic_names=tuple(m.subscribed_topic_names),
            assignment=assignment(ctx, m.assignment, True, d.topic_ids)) for m in d.members)
        out.append(ctx.build(
            "DescribedGroup", error_code=OK, error_message=None, group_id=group_id,
            group_state=d.group_state, group_epoch=d.group_epoch,
            assignment_epoch=d.assignment_epoch, assignor_name=d.assignor_name,
            members=members,
            authorized_operations=_authz.operations(ctx, _authz.GROUP, group_id, asked)))
    # Kafka 4.4 answers the groups denied first (as ConsumerGroupDescribe, measured)
    return ctx.response(throttle_time=NO_THROTTLE, groups=tuple(denied + out))
