"""DeleteShareGroupOffsets (key 92), version 0 (KIP-932).

Deletes an empty share group's state for whole topics (every partition's
state in ``__share_group_state``); the group reads them again from
``share.auto.offset.reset``. A group with members is NON_EMPTY_GROUP, a
missing one GROUP_ID_NOT_FOUND, a missing topic UNKNOWN_TOPIC_OR_PARTITION.
Authorization (Kafka's): DELETE on the group, else GROUP_AUTHORIZATION_FAILED;
READ on each topic, else TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.handlers._share import offsets_refusal
from kcompat.broker.host.context import RequestContext


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not _authz.group(ctx, _authz.Op.DELETE, request.group_id):
        return ctx.response(throttle_time=NO_THROTTLE,
                            error_code=ErrorCode.group_authorization_failed,
                            error_message=None, responses=())
    if (refusal := offsets_refusal(ctx, request.group_id)) is not None:
        return refusal
    service = ctx.share_groups
    responses = []
    allowed = _authz.topics(ctx, _authz.Op.READ, (t.topic_name for t in request.topics))
    for t in request.topics:
        code, message = (ErrorCode.topic_authorization_failed, None) if (
            t.topic_name not in allowed) else await service.delete_offsets(request.group_id,
                                                                           t.topic_name)
        meta = ctx.state.topics.get(t.topic_name)
        responses.append(ctx.build("DeleteShareGroupOffsetsResponseTopic",
                                   topic_name=t.topic_name,
                                   topic_id=meta.topic_id if meta else None,
                                   error_code=code, error_message=message))
    return ctx.response(throttle_time=NO_THROTTLE, error_code=OK, error_message=None,
                        responses=tuple(responses))
