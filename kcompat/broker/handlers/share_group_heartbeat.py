"""ShareGroupHeartbeat (key 76), version 1 (KIP-932).

Join (epoch 0, with the subscribed topics), heartbeat, or leave (epoch -1) a
share group at its coordinator (``share_groups``): the answer carries the
member epoch, the heartbeat interval and, when it changed, the member's
assignment by topic id. Request checks and errors as Kafka 4.4
(``group.share_group``); an empty group id is INVALID_REQUEST before the
coordinator is looked up. A change of membership or assignment is written to
``__consumer_offsets`` before it is answered (``share_groups``).
Authorization (Kafka's): READ on the group, else GROUP_AUTHORIZATION_FAILED;
subscribed topics the principal may not all DESCRIBE: TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._group_answers import heartbeat_response
from kcompat.broker.host.context import RequestContext
from kcompat.group.epoch_group import HeartbeatResult


async def handle(ctx: RequestContext, request: Any) -> Any:
    service = ctx.share_groups
    names = request.subscribed_topic_names
    if not _authz.group(ctx, _authz.Op.READ, request.group_id):
        return heartbeat_response(ctx, HeartbeatResult(ErrorCode.group_authorization_failed))
    if names and len(_authz.topics(ctx, _authz.Op.DESCRIBE, names)) < len(set(names)):
        return heartbeat_response(ctx, HeartbeatResult(ErrorCode.topic_authorization_failed))
    gate = (ErrorCode.invalid_request if not request.group_id
            else service.coordinator_error(request.group_id))
    if gate is not None:
        message = "GroupId can't be empty." if not request.group_id else None
        return heartbeat_response(ctx, HeartbeatResult(gate, error_message=message))
    subscribed = request.subscribed_topic_names
    result = await service.heartbeat(
        request.group_id, request.member_id, request.member_epoch,
        None if subscribed is None else list(subscribed), request.rack_id,
        ctx.client_id or "", ctx.client_host)
    return heartbeat_response(ctx, result)
