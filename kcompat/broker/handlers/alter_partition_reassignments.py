"""AlterPartitionReassignments (key 45), versions 0-1 (KIP-455, KIP-860).

Quirks: each partition's target is checked and committed on the controller
(``controller.admin.submit`` -> ``controller.reassignment``), concurrently;
the answer comes once each reassignment has *started* (its record is
committed), as in Kafka — ListPartitionReassignments shows it until it is
done. Null replicas cancel a reassignment in progress (NO_REASSIGNMENT_IN_PROGRESS
without one); a target equal to the replicas changes nothing; an unknown topic
or partition is UNKNOWN_TOPIC_OR_PARTITION, a bad target INVALID_REPLICA_ASSIGNMENT,
a replication factor change with ``allow_replication_factor_change`` false
(v1) INVALID_REPLICATION_FACTOR — each with Kafka's message, except that Kafka
leaves out a message that is its error code's generic one (NO_REASSIGNMENT_IN_PROGRESS
has none). No topics at all: Kafka answers the response's defaults — error message
"" instead of null, and ``allow_replication_factor_change`` true whatever was asked.
Authorization (Kafka's controller): ALTER on the cluster, else
CLUSTER_AUTHORIZATION_FAILED at the top and for every partition named.
"""

from __future__ import annotations

from typing import Any

import trio
from kio.schema.errors import ErrorCode

from kcompat.broker.controller.admin import submit
from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, OK, request_timeout_s
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.state import TopicError

TIMEOUT_S_MAX = 60.0
#: Kafka answers no message where the one it raised is its error code's generic one
GENERIC_MESSAGES = {
    ErrorCode.no_reassignment_in_progress: "No partition reassignment is in progress.",
}


def _denied(ctx: RequestContext, request: Any) -> Any:
    """Kafka's error answer without ALTER on the cluster: every partition named too."""
    code = ErrorCode.cluster_authorization_failed
    message = _authz.MESSAGES[code]
    topics = tuple(ctx.build("ReassignableTopicResponse", name=t.name, partitions=tuple(
        ctx.build("ReassignablePartitionResponse", partition_index=p.partition_index,
                  error_code=code, error_message=message) for p in t.partitions))
        for t in request.topics)
    extra = ({"allow_replication_factor_change": bool(request.allow_replication_factor_change)}
             if request.__version__ >= 1 else {})
    return ctx.response(throttle_time=NO_THROTTLE, error_code=code, error_message=message,
                        responses=topics, **extra)


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not _authz.cluster(ctx, _authz.Op.ALTER):
        return _denied(ctx, request)
    timeout_s = request_timeout_s(request, 0.5, TIMEOUT_S_MAX)
    allow = bool(getattr(request, "allow_replication_factor_change", True))
    if not request.topics:  # Kafka answers a response with its defaults
        return ctx.response(throttle_time=NO_THROTTLE, error_code=OK, error_message="",
                            responses=(), **({"allow_replication_factor_change": True}
                                             if request.__version__ >= 1 else {}))
    results: dict[tuple[int, int], Any] = {}

    async def one(slot: tuple[int, int], name: str, index: int,
                  replicas: tuple[int, ...] | None) -> None:
        code, message = OK, None
        intent = {"op": "reassign", "name": name, "index": index, "allow_rf_change": allow,
                  "replicas": None if replicas is None else [int(n) for n in replicas]}
        try:
            await submit(ctx.controller, intent, timeout_s)
        except TopicError as e:
            code = e.code
            message = None if GENERIC_MESSAGES.get(code) == e.message else e.message
        results[slot] = ctx.build("ReassignablePartitionResponse", partition_index=index,
                                  error_code=code, error_message=message)

    async with trio.open_nursery() as nursery:
        for ti, topic in enumerate(request.topics):
            for pi, part in enumerate(topic.partitions):
                nursery.start_soon(one, (ti, pi), topic.name, int(part.partition_index),
                                   part.replicas)
    topics = tuple(ctx.build("ReassignableTopicResponse", name=topic.name, partitions=tuple(
        results[(ti, pi)] for pi in range(len(topic.partitions))))
        for ti, topic in enumerate(request.topics))
    extra = {"allow_replication_factor_change": allow} if request.__version__ >= 1 else {}
    return ctx.response(throttle_time=NO_THROTTLE, error_code=OK, error_message=None,
                        responses=topics, **extra)
