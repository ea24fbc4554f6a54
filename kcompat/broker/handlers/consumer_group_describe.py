"""ConsumerGroupDescribe (key 69), versions 0-1 (KIP-848).

State, epochs, assignor and members of each consumer group this broker
coordinates: each member's current assignment and target assignment (topic
id and name), subscription (names and regex) and, from v1, its type (1: a
consumer-protocol member, 0: a classic member of a mixed group). As Kafka 4.4: an empty group id is INVALID_GROUP_ID,
another broker's group NOT_COORDINATOR, an unknown group GROUP_ID_NOT_FOUND
"Group <id> not found.", a classic or share group GROUP_ID_NOT_FOUND "Group
<id> is not a consumer group." (state "", epochs 0, as Kafka leaves them).
Authorized operations are not computed (kcompat has no ACLs yet):
-2147483648, Kafka's "not requested" value.
Authorization (Kafka's): a group the principal may not DESCRIBE is
GROUP_AUTHORIZATION_FAILED, before the others; one whose members subscribe to,
own or are to own a topic it may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED with
Kafka's message (measured on 4.4); include_authorized_operations fills each
described group's operations.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.handlers._group_answers import NOT_REQUESTED, assignment
from kcompat.broker.host.context import RequestContext
from kcompat.group.consumer_messages import DescribedConsumerGroup

#: Kafka 4.4's message for a group whose topics the principal may not all DESCRIBE
HIDDEN_TOPICS = ("The group has described topic(s) that the client is not authorized to "
                 "describe.")

CLASSIC_MEMBER, CONSUMER_MEMBER = 0, 1


def _missing(ctx: RequestContext, group_id: str, code: ErrorCode, message: str | None) -> Any:
    return ctx.build("DescribedGroup", error_code=code, error_message=message,
                     group_id=group_id, group_state="", group_epoch=0, assignment_epoch=0,
                     assignor_name="", members=(), authorized_operations=NOT_REQUESTED)


def _topics_describable(ctx: RequestContext, d: DescribedConsumerGroup) -> bool:
    """May the principal DESCRIBE every topic the group's members subscribe to,
    own or are to own? (Kafka 4.4 describes the group only then.)"""
    names = {t for m in d.members for t in m.subscribed_topic_names}
    names |= {t for m in d.members for t, _p in (*m.assignment, *m.target_assignment)}
    return len(_authz.topics(ctx, _authz.Op.DESCRIBE, names)) == len(names)


def _described(ctx: RequestContext, d: DescribedConsumerGroup, asked: bool) -> Any:
    members = tuple(ctx.build(
        "Member", member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
        member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
        subscribed_topic_names=tuple(m.subscribed_topic_names),
        subscribed_topic_regex=m.subscribed_topic_regex,
        assignment=assignment(ctx, m.assignment, True, d.topic_ids),
        target_assignment=assignment(ctx, m.target_assignment, True, d.topic_ids),
        **({"member_type": CLASSIC_MEMBER if m.classic else CONSUMER_MEMBER}
           if ctx.version >= 1 else {}))
        for m in d.members)
    return ctx.build("DescribedGroup", error_code=OK, error_message=None, group_id=d.group_id,
                     group_state=d.group_state, group_epoch=d.group_epoch,
                     assignment_epoch=d.assignment_epoch, assignor_name=d.assignor_name,
                     members=members,
                     authorized_operations=_authz.operations(ctx, _authz.GROUP, d.group_id, asked))


async def handle(ctx: RequestContext, request: Any) -> Any:
    service = ctx.consumer_groups
    out, denied = [], []
    asked = bool(request.include_authorized_operations)
    for group_id in request.group_ids:
        if not _authz.group(ctx, _authz.Op.DESCRIBE, group_id):
            denied.append(_missing(ctx, group_id, ErrorCode.group_authorization_failed, None))
        elif not group_id:
            out.append(_missing(ctx, group_id, ErrorCode.invalid_group_id, None))
        elif (gate := service.coordinator_error(group_id)) is not None:
            out.append(_missing(ctx, group_id, gate, None))
        elif (group := service.group(group_id)) is not None:
            d = group.describe()
            out.append(_described(ctx, d, asked) if _topics_describable(ctx, d) else _missing(
                ctx, group_id, ErrorCode.topic_authorization_failed, HIDDEN_TOPICS))
        elif service.classic_group_state(group_id) is not None \
                or service.classic.store.share_groups.get(group_id) is not None:
            out.append(_missing(ctx, group_id, ErrorCode.group_id_not_found,
                                f"Group {group_id} is not a consumer group."))
        else:
            out.append(_missing(ctx, group_id, ErrorCode.group_id_not_found,
                                f"Group {group_id} not found."))
    # Kafka 4.4 answers the groups denied first (measured)
    return ctx.response(throttle_time=NO_THROTTLE, groups=tuple(denied + out))
