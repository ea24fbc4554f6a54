"""UnregisterBroker (key 64), version 0 (``kafka-cluster.sh unregister``).

Quirks: any broker takes it and the controller carries it out
(``controller.admin``): the broker's registration in force is fenced for good
(``unregister_broker``) — left out of Metadata, DescribeCluster (fenced ones
included) and new replica placements, and a manual assignment naming it is
refused as for an unknown broker. A running process that was unregistered
stays fenced and hands its partition leaderships on; it registers again only
when restarted, as in Kafka. The replicas it holds are not moved: ``kcompat
cluster decommission`` moves them first. An id with no registration is
BROKER_ID_NOT_REGISTERED, as a second unregistration is.
Authorization (Kafka's controller): ALTER on the cluster, else
CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.controller.admin import submit
from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.state import TopicError


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not _authz.cluster(ctx, _authz.Op.ALTER):
        code = ErrorCode.cluster_authorization_failed
        return ctx.response(throttle_time=NO_THROTTLE, error_code=code,
                            error_message=_authz.MESSAGES[code])
    code = OK
    message: str | None = ""  # Kafka 4.4 answers an empty message, not null
    try:
        await submit(ctx.controller, {"op": "unregister_broker", "name": "",
                                      "id": int(request.broker_id)})
    except TopicError as e:
        code, message = e.code, e.message
    return ctx.response(throttle_time=NO_THROTTLE, error_code=code, error_message=message)
