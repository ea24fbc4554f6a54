"""CreateTopics (key 19), versions 2-7.

Quirks: Java 4.x sends v2 at least, librdkafka and kafka-python v3+. From v5 a
successful topic carries its partition count, replication factor and the
effective config of every topic key (name, value, source) the way Kafka 4 does;
v7 adds the topic id. A failed topic answers -1/-1 and no configs. A topic named
twice in one request is INVALID_REQUEST ("Duplicate topic name.") for that name,
once. Manual assignments need num_partitions and replication_factor of -1,
partitions 0..n-1, and registered brokers, each once per partition and as many
for every partition, else INVALID_REQUEST / INVALID_REPLICA_ASSIGNMENT with
Kafka's messages. Null config values and bad configs are INVALID_CONFIG.
``validate_only`` creates nothing (checked against the receiving broker's
image). Any broker creates topics, as a Kafka 4 broker does: through the
controller, here or forwarded to it, asking again while none is known until
the request's ``timeout_ms`` (Kafka's 30 s when it is 0), then
REQUEST_TIMED_OUT (``controller.admin``); never NOT_CONTROLLER. It answers
once the topic's record is committed and applied here too and the new
partitions' first leaders are elected (bounded by ``LEADERS_WAIT_S`` and the
request's timeout), so a Metadata that follows names them, as Kafka's does
(its creation record names the leaders).
Controller mutation quota (KIP-599, ``broker.quotas``): a valid topic takes its
partition count; from v6 a topic met with the bucket already empty is
THROTTLING_QUOTA_EXCEEDED, earlier versions are only throttled.
Authorization (Kafka's controller): CREATE on the cluster, else on each topic;
a topic denied is TOPIC_AUTHORIZATION_FAILED "Authorization failed.", answered
after the others; a created topic's configs only with DESCRIBE_CONFIGS on it, else
its topic_config_error_code is TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

import trio
from kio.schema.errors import ErrorCode

from kcompat.broker.config.topic_config import listed_keys
from kcompat.broker.controller import admin
from kcompat.broker.handlers import _authz, _quota
from kcompat.broker.handlers._common import (
    OK,
    duplicates,
    null_config_check,
    topic_config,
)
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.metadata import TopicMeta
from kcompat.broker.storage.state import TopicError, check_replicas

#: how long (at most, and within the request's timeout) CreateTopics waits for
#: the new partitions' first leaders before it answers
LEADERS_WAIT_S = 2.0


def _manual_assignment(ctx: RequestContext, topic: Any) -> list[tuple[int, ...]]:
    """Validate a manual assignment; the replica list of each partition."""
    if topic.replication_factor != -1:
        raise TopicError(ErrorCode.invalid_request, "A manual partition assignment was "
                         "specified, but replication factor was not set to -1.")
    if topic.num_partitions != -1:
        raise TopicError(ErrorCode.invalid_request, "A manual partition assignment was "
                         "specified, but numPartitions was not set to -1.")
    seen: dict[int, tuple[int, ...]] = {}
    registered = ctx.cluster.image.broker_ids()
    for a in topic.assignments:
        if a.partition_index in seen:
            raise TopicError(
                ErrorCode.invalid_replica_assignment,
                f"Found multiple manual partition assignments for partition {a.partition_index}",
            )
        first = next(iter(seen.values()), None)
        check_replicas(a.broker_ids, registered, len(first) if first else None)
        seen[a.partition_index] = tuple(a.broker_ids)
    if set(seen) != set(range(len(seen))):
        raise TopicError(ErrorCode.invalid_replica_assignment,
                         "partitions should be a consecutive 0-based integer sequence")
    return [seen[i] for i in range(len(seen))]


def _configs(ctx: RequestContext, meta: TopicMeta) -> tuple[Any, ...]:
    if not hasattr(ctx.resp, "CreatableTopicConfigs"):  # before v5
        return ()
    out = []
    for key in listed_keys(meta.configs):
        value, source = topic_config(ctx.state, key, meta.configs)
        out.append(ctx.build("CreatableTopicConfigs", name=key, value=value, read_only=False,
                             config_source=source, is_sensitive=False))
    return tuple(out)


def _error(ctx: RequestContext, name: str, code: ErrorCode, message: str | None) -> Any:
    return ctx.build(
        "CreatableTopicResult", name=name, topic_id=None, error_code=code,
        error_message=message, topic_config_error_code=0, num_partitions=-1,
        replication_factor=-1, configs=(),
    )


async def _create(ctx: RequestContext, topic: Any, validate_only: bool,
                  leaders_wait_s: float, timeout_s: float,
                  quota: _quota.MutationQuota | None) -> Any:
    try:
        manual = _manual_assignment(ctx, topic) if topic.assignments else None
        configs = null_config_check(topic.configs)
        meta = await admin.create_topic(
            ctx.controller, topic.name, topic.num_partitions, topic.replication_factor,
            configs, validate_only, manual, timeout_s,
            None if quota is None else lambda permits: _quota.take(quota, permits))
    except TopicError as e:
        return _error(ctx, topic.name, e.code, e.message)
    if not validate_only:
        # Kafka's creation record names the leaders; here they are elected a
        # moment later: answer once they are (bounded), so that Metadata right
        # after shows the topic with its leaders, as Kafka's controller does
        await ctx.cluster.wait_leaders(topic.name, leaders_wait_s)
    source = ctx.cluster.assignments.get((meta.view_of, 0)) if meta.view_of else None
    if source is not None:  # a view reports its source's replicas
        replication = len(source[1])
    elif manual:
        replication = len(manual[0])
    elif topic.replication_factor == -1:
        replication = ctx.state.config["default.replication.factor"]
    else:
        replication = topic.replication_factor
    # configs only to a principal that may DESCRIBE_CONFIGS the topic (Kafka's controller)
    describable = _authz.topic(ctx, _authz.Op.DESCRIBE_CONFIGS, topic.name)
    return ctx.build(
        "CreatableTopicResult", name=topic.name, topic_id=meta.topic_id, error_code=OK,
        error_message=None, num_partitions=meta.partitions, replication_factor=replication,
        topic_config_error_code=0 if describable else ErrorCode.topic_authorization_failed,
        configs=_configs(ctx, meta) if describable else (),
    )


async def handle(ctx: RequestContext, request: Any) -> Any:
    dups = duplicates(t.name for t in request.topics)
    results, reported, denied = [], set(), []
    anywhere = _authz.cluster(ctx, _authz.Op.CREATE)  # else CREATE on each topic
    timeout_s = request.timeout.total_seconds()
    now = trio.current_time()
    deadline = now + min(LEADERS_WAIT_S, timeout_s)
    # how long the creation may wait for a controller (Kafka's request.timeout.ms if none given)
    forward_until = now + (timeout_s if timeout_s > 0 else admin.FORWARD_TIMEOUT_S)
    quota = _quota.mutations(ctx, strict_since=6)
    for topic in request.topics:
        if topic.name not in dups and not (anywhere or _authz.topic(ctx, _authz.Op.CREATE,
                                                                   topic.name)):
            denied.append(_error(ctx, topic.name, ErrorCode.topic_authorization_failed,
                                 "Authorization failed."))
        elif topic.name not in dups:
            wait_s = max(0.0, deadline - trio.current_time())
            forward_s = max(0.0, forward_until - trio.current_time())
            results.append(await _create(ctx, topic, request.validate_only, wait_s, forward_s,
                                         quota))
        elif topic.name not in reported:
            reported.add(topic.name)
            results.append(_error(ctx, topic.name, ErrorCode.invalid_request,
                                  "Duplicate topic name."))
    # Kafka's controller answers the topics denied after the others
    return ctx.response(throttle_time=_quota.mutation_throttle(ctx, quota),
                        topics=tuple(results + denied))
