"""ConsumerGroupHeartbeat (key 68), versions 0-1 (KIP-848).

Join (epoch 0, with the subscribed topic names or a regex), heartbeat, or leave
(epoch -1; -2 for a static member that will come back) a consumer group at its
coordinator (``consumer_groups``). The answer carries the member epoch, the
heartbeat interval and, when it changed or the request was a full one, the
member's assignment by topic id. v1 members choose their member id (an empty
one is INVALID_REQUEST); at v0 the coordinator names a joining member without
one. Request checks, errors and messages as Kafka 4.4
(``group.consumer_group.check_request``); they come before the coordinator is
looked up, as Kafka's GroupCoordinatorService validates first. A change of
membership or assignment is written to ``__consumer_offsets`` before it is
answered.
Authorization (Kafka's): READ on the group, else GROUP_AUTHORIZATION_FAILED;
subscribed topic names the principal may not all DESCRIBE are
TOPIC_AUTHORIZATION_FAILED; a regex subscription resolves to the topics the
principal may DESCRIBE (``group.consumer_group``).
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._group_answers import heartbeat_response
from kcompat.broker.host.context import RequestContext
from kcompat.group.consumer_messages import Heartbeat, HeartbeatResult, check_request


def _owned(ctx: RequestContext, request: Any) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
    """The partitions the member says it owns, by topic name. A topic deleted
    (or re-created) since is named as it was: the member still holds those
    partitions, and must revoke them before it is given new ones, as Kafka's
    assignments by topic id ask it to. An id never known is left out."""
    if request.topic_partitions is None:
        return None
    owned = []
    for t in request.topic_partitions:
        meta = ctx.state.topic_by_id(t.topic_id)
        name = meta.name if meta is not None else ctx.state.gone_topic(t.topic_id)
        if name is not None:
            owned.append((name, tuple(t.partitions)))
    return tuple(owned)


def _denied(ctx: RequestContext, group_id: str, names: Any) -> ErrorCode | None:
    """Kafka's rule: READ on the group; every subscribed topic named (a regex
    subscription aside) DESCRIBE, so a client learns of no topic it may not see."""
    if not _authz.group(ctx, _authz.Op.READ, group_id):
        return ErrorCode.group_authorization_failed
    if names and len(_authz.topics(ctx, _authz.Op.DESCRIBE, names)) < len(set(names)):
        return ErrorCode.topic_authorization_failed
    return None


async def handle(ctx: RequestContext, request: Any) -> Any:
    service = ctx.consumer_groups
    rebalance_timeout_ms = int(request.rebalance_timeout.total_seconds() * 1000)
    names = request.subscribed_topic_names
    hb = Heartbeat(
        member_id=request.member_id, member_epoch=request.member_epoch,
        instance_id=request.instance_id, rack_id=request.rack_id,
        rebalance_timeout_ms=rebalance_timeout_ms,
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),  # v1+
        server_assignor=request.server_assignor, owned=_owned(ctx, request),
        client_id=ctx.client_id or "", client_host=ctx.client_host, principal=ctx.principal)
    if (denied := _denied(ctx, request.group_id, names)) is not None:
        return heartbeat_response(ctx, HeartbeatResult(denied))
    invalid = check_request(request.group_id, hb, service.assignors,
                            member_id_required=ctx.version >= 1)
    if invalid is not None:
        return heartbeat_response(ctx, HeartbeatResult(invalid[0], error_message=invalid[1]))
    if (gate := service.coordinator_error(request.group_id)) is not None:
        return heartbeat_response(ctx, HeartbeatResult(gate))
    if not hb.member_id and hb.member_epoch == 0:  # v0: the coordinator names it
        hb = dataclasses.replace(hb, member_id=str(uuid.uuid4()))
    return heartbeat_response(ctx, await service.heartbeat(request.group_id, hb))
