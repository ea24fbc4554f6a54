"""Metadata (key 3), versions 0-13.

Quirks: a null topic list (v1+) or an empty one (v0) means every topic. Topics
may be auto-created when ``auto.create.topics.enable`` and the request allows
it (v4+ field; always allowed below v4). aiokafka parses from v5, kcat's
librdkafka 2.0.2 from v4. Topic ids appear from v10; a request may name topics
by id only (v10+). Leaders, epochs, replicas and ISR come from the Raft
groups (and leaders' announcements for partitions this broker does not
replicate); the brokers are the live ones. A starting broker holds its answer
(bounded: 5 s) until its metadata image has caught up, as a Kafka broker serves
no client before it has; answering before then, it cannot tell that a topic
missing from its image does not exist (a restarted broker learns what was
committed only from the quorum's leader), so such a topic is
LEADER_NOT_AVAILABLE, which clients retry, never UNKNOWN_TOPIC_OR_PARTITION,
which librdkafka caches as final, nor auto-created. A new topic is
LEADER_NOT_AVAILABLE, as while Kafka creates it, until this broker knows a
leader for each of its partitions (``ClusterRuntime.first_leader_pending``).
An all-topics answer is built in slices of about ``SLICE_PARTITIONS``
partitions, with a checkpoint of the event loop between them.
v13 adds a top-level error code (KIP-1102: REBOOTSTRAP_REQUIRED when a broker
wants the client to start over from its bootstrap servers), always NONE here,
as from a Kafka broker that is serving.

Authorization, as Kafka's KafkaApis: an all-topics request leaves out the
topics the principal may not DESCRIBE; a named one answers them
TOPIC_AUTHORIZATION_FAILED (by id: the id with a null name), after the others.
A topic to auto-create needs CREATE on the cluster or on the topic, else it is
TOPIC_AUTHORIZATION_FAILED too, between the two. The authorized-operations
fields are filled when asked for: each described topic's (not the denied
ones'), and the cluster's for v8-v10 (0 without DESCRIBE on the cluster).
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import trio
from kio.schema.errors import ErrorCode

from kcompat.broker.controller import admin
from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.metadata import TopicMeta
from kcompat.broker.storage.state import TopicError, check_topic_name
from kcompat.wire import codec

ZERO_UUID = uuid.UUID(int=0)
#: partitions described per step of an all-topics request (``_every_topic``): about
#: 20-30 ms of the event loop on a 2-core host
SLICE_PARTITIONS = 1000
TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))


@dataclasses.dataclass(slots=True)
class _Shared:
    """What the topics of one answer share, found once per request rather than
    once per topic or partition: the live and the fenced brokers, and this
    version's topic and partition classes."""

    live: set[int]
    fenced: set[int]
    topic_cls: type[Any]
    partition_cls: type[Any]


def _shared(ctx: RequestContext) -> _Shared:
    cluster = ctx.cluster
    resp = ctx.resp
    return _Shared({b.node_id for b in cluster.image.live_brokers()}, cluster.fenced_ids(),
                   resp.MetadataResponseTopic, resp.MetadataResponsePartition)


def _partitions(ctx: RequestContext, meta: TopicMeta, shared: _Shared) -> tuple[Any, ...]:
    """Leaders, epochs, replicas and ISR from the Raft groups."""
    cluster = ctx.cluster
    out = []
    live, fenced, cls = shared.live, shared.fenced, shared.partition_cls
    for index in range(meta.partitions):
        if (meta.name, index) not in cluster.assignments:
            continue
        leader, epoch, replicas, isr = cluster.partition_view(meta.name, index, fenced)
        offline = tuple(r for r in replicas if live and r not in live)
        out.append(codec.build(
            cls, error_code=OK if leader >= 0 else ErrorCode.leader_not_available,
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


def _topic(ctx: RequestContext, meta: TopicMeta, shared: _Shared) -> Any:
    cluster = ctx.cluster
    if cluster.first_leaders_pending() and any(
            cluster.first_leader_pending(meta.name, i) for i in range(meta.partitions)):
        # still being created: its first leaders are not elected (or not known
        # here) yet; Kafka knows a new topic only with its leaders and answers
        # LEADER_NOT_AVAILABLE meanwhile (clients retry), never a leaderless
        # partition, on which librdkafka would wait for its 1 s topic scan
        return _error_topic(ctx, meta.name, ErrorCode.leader_not_available)
    return codec.build(
        shared.topic_cls, error_code=OK, name=meta.name, topic_id=meta.topic_id,
        is_internal=meta.internal,
        partitions=_partitions(ctx, meta, shared),
    )


def _error_topic(ctx: RequestContext, name: str | None, code: ErrorCode, tid: Any = None) -> Any:
    return ctx.build(
        "MetadataResponseTopic", error_code=code, name=name, topic_id=tid or ZERO_UUID,
        is_internal=False, partitions=(),
    )


def _lookup(ctx: RequestContext, name: str, auto_create: bool, shared: _Shared
            ) -> Any | None:
    state = ctx.state
    meta = state.topics.get(name)
    if meta is not None:
        return _topic(ctx, meta, shared)
    if not ctx.cluster.caught_up:
        return _error_topic(ctx, name, ErrorCode.leader_not_available)  # see the module
    if not auto_create or not state.config["auto.create.topics.enable"]:
        return _error_topic(ctx, name, ErrorCode.unknown_topic_or_partition)
    if not (_authz.cluster(ctx, _authz.Op.CREATE) or _authz.topic(ctx, _authz.Op.CREATE, name)):
        return None  # TOPIC_AUTHORIZATION_FAILED (``_named``)
    try:
        check_topic_name(name)
    except TopicError as e:
        return _error_topic(ctx, name, e.code)
    # created in the background through the controller; LEADER_NOT_AVAILABLE
    # meanwhile, as Kafka answers (clients retry)
    admin.auto_create(ctx.controller, name)
    return _error_topic(ctx, name, ErrorCode.leader_not_available)


def _denied(ctx: RequestContext, name: str | None, tid: Any = None) -> Any:
    """TOPIC_AUTHORIZATION_FAILED: no partitions, the id only when asked by id
    (else the zero id, which kio writes for None)."""
    return ctx.build("MetadataResponseTopic", error_code=ErrorCode.topic_authorization_failed,
                     name=name, topic_id=tid, is_internal=False, partitions=())


def _named(ctx: RequestContext, request: Any) -> tuple[list[Any], list[Any]]:
    """(answers of the topics described, the denied ones' in Kafka's order)."""
    state = ctx.state
    auto = bool(getattr(request, "allow_auto_topic_creation", True))
    out, not_creatable, not_describable = [], [], []
    shared = _shared(ctx)
    for t in request.topics:
        name = t.name
        if name is None:
            meta = state.topic_by_id(t.topic_id)
            if meta is None:
                code = (ErrorCode.unknown_topic_id if ctx.cluster.caught_up
                        else ErrorCode.leader_not_available)  # see the module
                out.append(_error_topic(ctx, None, code, t.topic_id))
            elif not _authz.topic(ctx, _authz.Op.DESCRIBE, meta.name):
                not_describable.append(_denied(ctx, None, meta.topic_id))
            else:
                out.append(_topic(ctx, meta, shared))
        elif not _authz.topic(ctx, _authz.Op.DESCRIBE, name):
            not_describable.append(_denied(ctx, name))
        elif (found := _lookup(ctx, name, auto, shared)) is None:
            not_creatable.append(_denied(ctx, name))
        else:
            out.append(found)
    return out, not_creatable + not_describable


def _with_operations(ctx: RequestContext, request: Any, topics: tuple[Any, ...]
                     ) -> tuple[Any, ...]:
    if not getattr(request, "include_topic_authorized_operations", False):
        return topics
    # Kafka without an authorizer answers every topic operation (READ, WRITE, CREATE,
    # DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS), also for errored
    # topics, instead of the "omitted" sentinel (FINDINGS.md, D7); with one, what the
    # topic's ACLs allow.
    return tuple(dataclasses.replace(t, topic_authorized_operations=ctx.authorized_operations(
        _authz.TOPIC, t.name or "")) for t in topics)


def _cluster_operations(ctx: RequestContext, request: Any) -> int:
    if not 8 <= ctx.version <= 10 or not request.include_cluster_authorized_operations:
        return _authz.NOT_REQUESTED
    if not _authz.cluster(ctx, _authz.Op.DESCRIBE):
        return 0
    return ctx.authorized_operations(_authz.CLUSTER, _authz.CLUSTER_NAME)


async def _checkpoint() -> None:
    await trio.sleep(0)


async def _every_topic(ctx: RequestContext) -> tuple[Any, ...]:
    """Every topic the caller may describe, built in slices of about
    ``SLICE_PARTITIONS`` partitions with a checkpoint between them, so that a
    cluster of many thousand partitions does not hold the event loop in one
    step. What a checkpoint changed is seen as if the request had come a
    moment later: a topic deleted meanwhile is left out, one made again is
    described as it is now."""
    state = ctx.state
    metas = list(state.topics.values())
    allowed = _authz.topics(ctx, _authz.Op.DESCRIBE, (m.name for m in metas))
    shared = _shared(ctx)
    out, built, sliced = [], 0, False
    for meta in metas:
        if meta.name not in allowed:
            continue
        if built >= SLICE_PARTITIONS:
            await _checkpoint()
            built, sliced = 0, True
            shared = _shared(ctx)
        if sliced:
            current = state.topics.get(meta.name)
            if current is None:
                continue
            meta = current
        out.append(_topic(ctx, meta, shared))
        built += max(meta.partitions, 1)
    return tuple(out)


async def handle(ctx: RequestContext, request: Any) -> Any:
    await ctx.controller.lifecycle.wait_serving(timeout_s=5.0)  # a caught-up image
    requested = request.topics
    denied: list[Any] = []
    if requested is None or (ctx.version == 0 and not requested):
        topics = await _every_topic(ctx)
    else:
        out, denied = _named(ctx, request)
        topics = tuple(out)
    topics = _with_operations(ctx, request, topics) + tuple(denied)
    brokers, controller_id = _brokers(ctx, topics)
    return ctx.response(
        throttle_time=NO_THROTTLE, brokers=brokers, cluster_id=ctx.state.cluster_id,
        controller_id=controller_id, topics=topics, error_code=OK,
        cluster_authorized_operations=_cluster_operations(ctx, request),
    )
