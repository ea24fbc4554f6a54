"""ShareGroupHeartbeat (key 76), version 1 (KIP-932).

Join (epoch 0, with the subscribed topics), heartbeat, or leave (epoch -1) a
share group at its coordinator (``share_groups``): the answer carries the
member epoch, the heartbeat interval and, when it changed, the member's
assignment by topic id. Request checks and errors as Kafka 4.4
(``group.share_group``); an empty group id is INVALID_REQUEST before the
coordinator is looked up. A change of membership or assignment is written to
``__consumer_offsets`` before it is answered (``share_groups``).
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.context import RequestContext
from kcompat.broker.handlers._common import NO_THROTTLE


async def handle(ctx: RequestContext, request: Any) -> Any:
    service = ctx.share_groups
    gate = (ErrorCode.invalid_request if not request.group_id
            else service.coordinator_error(request.group_id))
    if gate is not None:
        message = "GroupId can't be empty." if not request.group_id else None
        return ctx.response(throttle_time=NO_THROTTLE, error_code=gate, error_message=message,
                            member_id=None, member_epoch=0,
                            heartbeat_interval=datetime.timedelta(0), assignment=None)
    subscribed = request.subscribed_topic_names
    result = await service.heartbeat(
        request.group_id, request.member_id, request.member_epoch,
        None if subscribed is None else list(subscribed), request.rack_id,
        ctx.client_id or "", ctx.client_host)
    assignment = None
    if result.assignment is not None:
        topics = []
        for name, partitions in result.assignment:
            meta = ctx.state.topics.get(name)
            if meta is not None:
                topics.append(ctx.build("TopicPartitions", topic_id=meta.topic_id,
                                        partitions=tuple(partitions)))
        assignment = ctx.build("Assignment", topic_partitions=tuple(topics))
    return ctx.response(
        throttle_time=NO_THROTTLE, error_code=result.error, error_message=result.error_message,
        member_id=result.member_id, member_epoch=result.member_epoch,
        heartbeat_interval=datetime.timedelta(milliseconds=result.heartbeat_interval_ms),
        assignment=assignment)
