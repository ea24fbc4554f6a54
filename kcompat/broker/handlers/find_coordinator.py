"""FindCoordinator (key 10), versions 0-6.

Quirks: v0-3 ask for one ``key`` and answer in
top-level fields; v4+ batch ``coordinator_keys`` and answer one entry per key.
librdkafka < 2.11 enables LZ4 and its group coordinator only when v0 is
advertised, so v0 stays served. Other key types (2, a share coordinator,
which v6 can name) are INVALID_REQUEST: Kafka's brokers ask it for the leader
of a ``__share_group_state`` partition, kcompat's find it in their own
metadata, and share consumers find their group with key type 0. The coordinator of a
group (key_type 0) or transactional id (1) is the leader of the key's ``__consumer_offsets`` /
``__transaction_state`` partition, COORDINATOR_NOT_AVAILABLE while it has none
or the topic is still being created (on the first FindCoordinator, which waits
up to ``CREATION_WAIT_S`` for the new topic's leaders first). A group's
coordinator is told only to a principal that may DESCRIBE the group, a
transactional id's to one that may DESCRIBE the id (else
GROUP_AUTHORIZATION_FAILED / TRANSACTIONAL_ID_AUTHORIZATION_FAILED with Kafka's
message in v0-3, an empty one in v4+, and no internal topic is created for it).
Messages as Kafka 4.4's: v1-3 say "NONE" for a coordinator found and the
error's text otherwise, v4+ an empty one.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.controller.admin import auto_create
from kcompat.broker.controller.internal_topics import OFFSETS_TOPIC, TXN_TOPIC, partition_for
from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, OK, own_endpoint
from kcompat.broker.host.context import RequestContext

GROUP, TRANSACTION = 0, 1
CREATION_WAIT_S = 2.0


def _coordinator(ctx: RequestContext, key_type: int, key: str) -> dict[str, Any]:
    """The coordinator of a group (a transactional id) is the
    Raft leader of its ``__consumer_offsets`` (``__transaction_state``)
    partition; the first FindCoordinator for a missing one has it created
    (through the controller, like Kafka) and is answered
    COORDINATOR_NOT_AVAILABLE meanwhile."""

    state = ctx.state
    cluster = ctx.cluster
    # Kafka 4.4's messages (measured): v1-3 "NONE" when found, v4+ always empty
    found = "NONE" if ctx.version < 4 else ""
    topic = OFFSETS_TOPIC if key_type == GROUP else TXN_TOPIC
    meta = state.topics.get(topic)
    if meta is None:
        auto_create(ctx.controller, topic)
    else:
        index = partition_for(key, meta.partitions)
        if (topic, index) in cluster.assignments:
            leader = cluster.partition_view(topic, index)[0]
            if leader == state.node_id:
                host, port = own_endpoint(ctx)
                return {"error_code": OK, "error_message": found, "node_id": state.node_id,
                        "host": host, "port": port}
            where = cluster.endpoint(leader, ctx.listener) if leader in cluster.peers else None
            if where is not None:
                return {"error_code": OK, "error_message": found, "node_id": leader,
                        "host": where[0], "port": where[1]}
    return {"error_code": ErrorCode.coordinator_not_available,
            "error_message": "The coordinator is not available." if ctx.version < 4 else "",
            "node_id": -1, "host": "", "port": -1}


def _denied(ctx: RequestContext, key_type: int, key: str) -> ErrorCode | None:
    if key_type == GROUP and not _authz.group(ctx, _authz.Op.DESCRIBE, key):
        return ErrorCode.group_authorization_failed
    if key_type == TRANSACTION and not _authz.txn_id(ctx, _authz.Op.DESCRIBE, key):
        return ErrorCode.transactional_id_authorization_failed
    return None


def _answer(ctx: RequestContext, key_type: int, key: str = "") -> dict[str, Any]:
    if (denied := _denied(ctx, key_type, key)) is not None:
        # Kafka 4.4: the error's message in v0-3, an empty one in v4+ (measured)
        return {"error_code": denied,
                "error_message": _authz.MESSAGES[denied] if ctx.version < 4 else "",
                "node_id": -1, "host": "", "port": -1}
    if key_type in (GROUP, TRANSACTION):
        return _coordinator(ctx, key_type, key)
    return {"error_code": ErrorCode.invalid_request,
            "error_message": f"Unknown coordinator type received: {key_type}",
            "node_id": -1, "host": "", "port": -1}


async def _create_internal_topic(ctx: RequestContext, key_type: int) -> None:
    """The first FindCoordinator for a missing internal topic has it created
    and waits (briefly, bounded) for its leaders, instead of answering every
    client COORDINATOR_NOT_AVAILABLE for the next few retries."""

    topic = OFFSETS_TOPIC if key_type == GROUP else TXN_TOPIC
    cluster = ctx.cluster
    if topic not in ctx.state.topics:
        auto_create(ctx.controller, topic)
        await cluster.wait_leaders(topic, CREATION_WAIT_S)


async def handle(ctx: RequestContext, request: Any) -> Any:
    key_type = getattr(request, "key_type", GROUP)
    keys = request.coordinator_keys if hasattr(request, "coordinator_keys") else (
        getattr(request, "key", ""),)
    if key_type in (GROUP, TRANSACTION) and (not _authz.enabled(ctx) or any(
            _denied(ctx, key_type, key) is None for key in keys)):
        await _create_internal_topic(ctx, key_type)
    if not hasattr(request, "coordinator_keys"):
        return ctx.response(throttle_time=NO_THROTTLE,
                            **_answer(ctx, key_type, getattr(request, "key", "")))
    coordinators = tuple(ctx.build("Coordinator", key=key, **_answer(ctx, key_type, key))
                         for key in request.coordinator_keys)
    return ctx.response(throttle_time=NO_THROTTLE, coordinators=coordinators)
