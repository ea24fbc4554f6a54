"""AddRaftVoter (key 80), versions 0-1 (KIP-853).

Quirks: adds a voter to the metadata quorum (``__cluster_metadata``): the
node must follow the metadata log as an observer and have caught up — a
broker-only node (``process.roles=broker``) is one; it is then a controller
candidate like the others. Any broker takes the request and has the metadata
leader carry it out (``replication.quorum_admin.change_voter``, one change at
a time), answering once the change is committed (v1 with
``ack_when_committed`` false: once the leader wrote it). The listeners and directory
id are not checked: a kcompat voter is reached on its registered Kafka
listener. DUPLICATE_VOTER for a voter; REQUEST_TIMED_OUT when the node has
not caught up (or another change is pending) within the timeout; a
``cluster_id`` other than this cluster's is INCONSISTENT_CLUSTER_ID.
Authorization (Kafka's controller): ALTER on the cluster, else
CLUSTER_AUTHORIZATION_FAILED (RemoveRaftVoter too: the same change).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, request_timeout_s
from kcompat.broker.host.context import RequestContext

TIMEOUT_S_MAX = 60.0


async def change(ctx: RequestContext, request: Any, add: bool) -> Any:
    if not _authz.cluster(ctx, _authz.Op.ALTER):
        code = ErrorCode.cluster_authorization_failed
        return ctx.response(throttle_time=NO_THROTTLE, error_code=code,
                            error_message=_authz.MESSAGES[code])
    cluster_id = request.cluster_id
    if cluster_id is not None and cluster_id != ctx.state.cluster_id:
        return ctx.response(throttle_time=NO_THROTTLE,
                            error_code=ErrorCode.inconsistent_cluster_id,
                            error_message=f"The cluster id {cluster_id} is not this cluster's.")
    code, message = await ctx.broker.quorum_admin.change_voter(
        int(request.voter_id), add, request_timeout_s(request, 0.5, TIMEOUT_S_MAX),
        committed=bool(getattr(request, "ack_when_committed", True)))
    return ctx.response(throttle_time=NO_THROTTLE, error_code=code, error_message=message)


async def handle(ctx: RequestContext, request: Any) -> Any:
    return await change(ctx, request, add=True)
