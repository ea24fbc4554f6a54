"""DeleteGroups (key 42), versions 0-3.

Only a group without members can be deleted (NON_EMPTY_GROUP otherwise); an
unknown group answers GROUP_ID_NOT_FOUND; a KIP-848 consumer group likewise
(its snapshot record is tombstoned too). Deletion writes tombstones for the
group's offsets and metadata to ``__consumer_offsets``; a share group's
share-partition state is deleted from ``__share_group_state`` (a share group
created again with that id starts at ``share.auto.offset.reset``).
v3 adds a per-group error message, which Kafka 4.4 leaves null for these
errors too (its schema: ``kcompat.wire.kio_extra``). A group named twice is
answered once.
Authorization (Kafka's): a group the principal may not DELETE is
GROUP_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE
from kcompat.broker.host.context import RequestContext


async def handle(ctx: RequestContext, request: Any) -> Any:
    groups = ctx.groups
    results = []
    for group_id in dict.fromkeys(request.groups_names):  # each group once, as Kafka
        error = groups.coordinator_error(group_id)  # coordinator only
        if not _authz.group(ctx, _authz.Op.DELETE, group_id):
            error = ErrorCode.group_authorization_failed
        elif error is None:
            error = await groups.delete_group(group_id)
        results.append(ctx.build("DeletableGroupResult", group_id=group_id, error_code=error))
    return ctx.response(throttle_time=NO_THROTTLE, results=tuple(results))
