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

from kcompat.broker.context import RequestContext
from kcompat.broker.groups import NotCoordinatorError
from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.state import now_ms


async def handle(ctx: RequestContext, request: Any) -> Any:
    groups = ctx.groups
    results = []
    for group_id in dict.fromkeys(request.groups_names):  # each group once, as Kafka
        error = groups.coordinator_error(group_id)  # coordinator only
        if not _authz.group(ctx, _authz.Op.DELETE, group_id):
            error = ErrorCode.group_authorization_failed
        elif error is None and ctx.share_groups.group(group_id) is not None:
            error = await ctx.share_groups.delete(group_id)
        elif error is None and ctx.consumer_groups.group(group_id) is not None:
            error = await ctx.consumer_groups.delete(group_id)
            if error == OK:  # the Empty classic placeholder of its offsets goes too
                ctx.groups.coordinator.delete_group(group_id, now_ms())
        elif error is None:
            error = groups.coordinator.delete_group(group_id, now_ms())
        if error == OK:
            groups.coordinator.pop_group_changes()
            try:
                await groups.delete_group_records(group_id)
            except NotCoordinatorError as e:
                error = e.code
        results.append(ctx.build("DeletableGroupResult", group_id=group_id, error_code=error))
    return ctx.response(throttle_time=NO_THROTTLE, results=tuple(results))
