"""CreateTopics (key 19), versions 2-7.

Quirks: Java 4.x sends v2 at least, librdkafka and kafka-python v3+. From v5 a
successful topic carries its partition count, replication factor and the
effective config of every topic key (name, value, source) the way Kafka 4 does;
v7 adds the topic id. A failed topic answers -1/-1 and no configs. A topic named
twice in one request is INVALID_REQUEST ("Duplicate topic name.") for that name,
once. Manual assignments need num_partitions and replication_factor of -1,
partitions 0..n-1 and exactly this broker as the one replica of each, else
INVALID_REQUEST / INVALID_REPLICA_ASSIGNMENT with Kafka's messages. Null config
values and bad configs are INVALID_CONFIG. ``validate_only`` creates nothing.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.context import RequestContext
from kcompat.broker.handlers._common import (
    NO_THROTTLE,
    OK,
    check_replicas,
    duplicates,
    null_config_check,
    topic_config,
)
from kcompat.broker.metadata import TopicMeta
from kcompat.broker.state import TopicError
from kcompat.broker.topic_config import TOPIC_CONFIGS


def _manual_partitions(ctx: RequestContext, topic: Any) -> int:
    """Validate a manual assignment; returns the partition count it describes."""
    if topic.replication_factor != -1:
        raise TopicError(ErrorCode.invalid_request, "A manual partition assignment was "
                         "specified, but replication factor was not set to -1.")
    if topic.num_partitions != -1:
        raise TopicError(ErrorCode.invalid_request, "A manual partition assignment was "
                         "specified, but numPartitions was not set to -1.")
    seen: set[int] = set()
    for a in topic.assignments:
        if a.partition_index in seen:
            raise TopicError(
                ErrorCode.invalid_replica_assignment,
                f"Found multiple manual partition assignments for partition {a.partition_index}",
            )
        seen.add(a.partition_index)
        check_replicas(a.broker_ids, ctx.state.node_id)
    if seen != set(range(len(seen))):
        raise TopicError(ErrorCode.invalid_replica_assignment,
                         "partitions should be a consecutive 0-based integer sequence")
    return len(seen)


def _configs(ctx: RequestContext, meta: TopicMeta) -> tuple[Any, ...]:
    if not hasattr(ctx.resp, "CreatableTopicConfigs"):  # before v5
        return ()
    out = []
    for key in TOPIC_CONFIGS:
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


def _create(ctx: RequestContext, topic: Any, validate_only: bool) -> Any:
    try:
        partitions, replication = topic.num_partitions, topic.replication_factor
        if topic.assignments:
            partitions, replication = _manual_partitions(ctx, topic), 1
        configs = null_config_check(topic.configs)
        meta = ctx.state.create_topic(topic.name, partitions, replication, configs,
                                      validate_only)
    except TopicError as e:
        return _error(ctx, topic.name, e.code, e.message)
    return ctx.build(
        "CreatableTopicResult", name=topic.name, topic_id=meta.topic_id, error_code=OK,
        error_message=None, topic_config_error_code=0, num_partitions=meta.partitions,
        replication_factor=1, configs=_configs(ctx, meta),
    )


async def handle(ctx: RequestContext, request: Any) -> Any:
    if ctx.state.cluster is not None:  # cluster mode: through the controller
        from kcompat.broker.cluster.admin import create_topics

        return await create_topics(ctx, request)
    dups = duplicates(t.name for t in request.topics)
    results, reported = [], set()
    for topic in request.topics:
        if topic.name not in dups:
            results.append(_create(ctx, topic, request.validate_only))
        elif topic.name not in reported:
            reported.add(topic.name)
            results.append(_error(ctx, topic.name, ErrorCode.invalid_request,
                                  "Duplicate topic name."))
    return ctx.response(throttle_time=NO_THROTTLE, topics=tuple(results))
