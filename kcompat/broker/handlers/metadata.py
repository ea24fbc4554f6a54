"""Metadata (key 3), versions 0-13.

Quirks: a null topic list (v1+) or an empty one (v0) means every topic. Topics
may be auto-created when ``auto.create.topics.enable`` and the request allows
it (v4+ field; always allowed below v4). aiokafka parses from v5, kcat's
librdkafka 2.0.2 from v4. Topic ids appear from v10; a request may name topics
by id only (v10+). Leaders, epochs, replicas and ISR come from the Raft
groups (and leaders' announcements for partitions this broker does not
replicate); the brokers are the live ones. A starting broker holds its answer
(bounded) until its metadata image has caught up. A new topic is
LEADER_NOT_AVAILABLE, as while Kafka creates it, until this broker knows a
leader for each of its partitions (``ClusterRuntime.first_leader_pending``).
v13 adds a top-level error code (KIP-1102: REBOOTSTRAP_REQUIRED when a broker
wants the client to start over from its bootstrap servers), always NONE here,
as from a Kafka broker that is serving.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.context import RequestContext
from kcompat.broker.controller import admin
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.metadata import TopicMeta
from kcompat.broker.state import TopicError, check_topic_name

ZERO_UUID = uuid.UUID(int=0)
TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))


def _partitions(ctx: RequestContext, meta: TopicMeta) -> tuple[Any, ...]:
    """Leaders, epochs, replicas and ISR from the Raft groups."""
    cluster = ctx.cluster
    out = []
    live = {b.node_id for b in cluster.image.live_brokers()}
    for index in range(meta.partitions):
        if (meta.name, index) not in cluster.assignments:
            continue
        leader, epoch, replicas, isr = cluster.partition_view(meta.name, index)
        offline = tuple(r for r in replicas if live and r not in live)
        out.append(ctx.build(
            "MetadataResponsePartition",
            error_code=OK if leader >= 0 else ErrorCode.leader_not_available,
            partition_index=index, leader_id=leader, leader_epoch=epoch,
            replica_nodes=replicas, isr_nodes=isr, offline_replicas=offline,
        ))
    return tuple(out)


def _brokers(ctx: RequestContext, topics: tuple[Any, ...]) -> tuple[tuple[Any, ...], int]:
    """(brokers, controller id): the live brokers and the leaders named in ``topics``."""
    leaders = {p.leader_id for t in topics for p in t.partitions if p.leader_id >= 0}
    brokers = tuple(
        ctx.build("MetadataResponseBroker", node_id=node, host=host, port=port, rack=rack)
        for node, host, port, rack in ctx.controller.lifecycle.broker_endpoints(leaders, ctx.listener))
    # as from a Kafka 4 broker: a random live broker, which forwards admin requests
    return brokers, ctx.controller.lifecycle.advertised_controller(b.node_id for b in brokers)


def _topic(ctx: RequestContext, meta: TopicMeta) -> Any:
    if any(ctx.cluster.first_leader_pending(meta.name, i) for i in range(meta.partitions)):
        # still being created: its first leaders are not elected (or not known
        # here) yet; Kafka knows a new topic only with its leaders and answers
        # LEADER_NOT_AVAILABLE meanwhile (clients retry), never a leaderless
        # partition, on which librdkafka would wait for its 1 s topic scan
        return _error_topic(ctx, meta.name, ErrorCode.leader_not_available)
    return ctx.build(
        "MetadataResponseTopic", error_code=OK, name=meta.name, topic_id=meta.topic_id,
        is_internal=meta.internal, partitions=_partitions(ctx, meta),
    )


def _error_topic(ctx: RequestContext, name: str | None, code: ErrorCode, tid: Any = None) -> Any:
    return ctx.build(
        "MetadataResponseTopic", error_code=code, name=name, topic_id=tid or ZERO_UUID,
        is_internal=False, partitions=(),
    )


def _lookup(ctx: RequestContext, name: str, auto_create: bool) -> Any:
    state = ctx.state
    meta = state.topics.get(name)
    if meta is not None:
        return _topic(ctx, meta)
    if not auto_create or not state.config["auto.create.topics.enable"]:
        return _error_topic(ctx, name, ErrorCode.unknown_topic_or_partition)
    try:
        check_topic_name(name)
    except TopicError as e:
        return _error_topic(ctx, name, e.code)
    # created in the background through the controller; LEADER_NOT_AVAILABLE
    # meanwhile, as Kafka answers (clients retry)
    admin.auto_create(ctx.controller, name)
    return _error_topic(ctx, name, ErrorCode.leader_not_available)


async def handle(ctx: RequestContext, request: Any) -> Any:
    state = ctx.state
    await ctx.controller.lifecycle.wait_serving(timeout_s=5.0)  # a caught-up image
    requested = request.topics
    if requested is None or (ctx.version == 0 and not requested):
        topics = tuple(_topic(ctx, meta) for meta in list(state.topics.values()))
    else:
        auto = bool(getattr(request, "allow_auto_topic_creation", True))
        out = []
        for t in requested:
            name = t.name
            if name is None:
                meta = state.topic_by_id(t.topic_id)
                out.append(_topic(ctx, meta) if meta else
                           _error_topic(ctx, None, ErrorCode.unknown_topic_id, t.topic_id))
            else:
                out.append(_lookup(ctx, name, auto))
        topics = tuple(out)
    if getattr(request, "include_topic_authorized_operations", False):
        # Kafka without an authorizer answers every topic operation (READ, WRITE, CREATE,
        # DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS), also for errored
        # topics, instead of the "omitted" sentinel (FINDINGS.md, D7).
        topics = tuple(dataclasses.replace(t, topic_authorized_operations=TOPIC_OPERATIONS)
                       for t in topics)
    brokers, controller_id = _brokers(ctx, topics)
    return ctx.response(
        throttle_time=NO_THROTTLE, brokers=brokers, cluster_id=ctx.state.cluster_id,
        controller_id=controller_id, topics=topics, error_code=OK,
    )
