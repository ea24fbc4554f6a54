"""DescribeTopicPartitions (key 75), version 0 (KIP-966), as Kafka 4.x serves it.

Java's ``Admin.describeTopics`` (kafka-clients 3.8+) uses it when advertised and
falls back to Metadata otherwise; kafka-python 3's admin sends it too. It is
Metadata without brokers, plus the KIP-966 fields and a cursor:

* The topics are the requested names (a set: duplicates answer once) or, for an
  empty list, every topic; either way those sorting before the cursor's topic
  are skipped, and the rest are answered in name order. The cursor's topic
  starts at its partition index, every other topic at 0. A cursor whose topic
  is not among the requested names, or whose index is negative, is
  INVALID_REQUEST for each requested topic (Kafka's ``getErrorResponse``).
* At most ``min(response_partition_limit, 2000)`` partitions (at least 1; 2000
  is Kafka's ``max.request.partition.size.limit``). When the limit cuts a topic
  ``next_cursor`` names it and its first partition left out; when the limit
  runs out exactly at a topic's end and another topic follows, the cursor names
  that topic at partition 0 (which need not exist).
* A requested topic that does not exist is UNKNOWN_TOPIC_OR_PARTITION
  (INVALID_TOPIC_EXCEPTION for an illegal name), costing nothing from the
  limit; the all-topics form never answers errors.
* Partitions carry no error code: a partition without a known leader has
  ``leader_id`` -1 (also a new topic whose first leader this broker does not
  know yet, where Metadata answers LEADER_NOT_AVAILABLE). Eligible leader
  replicas and the last known ELR are empty lists, never null: kcompat keeps
  no ELR, and Kafka's are empty too while the ISR has min.insync.replicas.
* Every topic answered (errors included) carries its authorized operations
  (without an authorizer every topic operation); there is no request flag for
  it, unlike Metadata. A topic the principal may not DESCRIBE is left out of
  the all-topics form, else answered TOPIC_AUTHORIZATION_FAILED after the
  others, without operations (Kafka's DescribeTopicPartitionsRequestHandler).

Filtered views (``kc.view.of``) appear as in Metadata: their partitions are
their source's (``cluster.assignments`` aliases).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.controller.internal_topics import OFFSETS_TOPIC, TXN_TOPIC
from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.metadata import TopicMeta
from kcompat.broker.storage.state import TopicError, check_topic_name
from kcompat.group.share_state import SHARE_STATE_TOPIC

PARTITION_LIMIT_MAX = 2000  # Kafka's max.request.partition.size.limit default
# Kafka's Topic.isInternal, which it answers also for a name that does not exist
KAFKA_INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TXN_TOPIC, SHARE_STATE_TOPIC})


def _partition(ctx: RequestContext, name: str, index: int, live: set[int]) -> Any:
    leader, epoch, replicas, isr = ctx.cluster.partition_view(name, index)
    return ctx.build(
        "DescribeTopicPartitionsResponsePartition", error_code=OK, partition_index=index,
        leader_id=leader, leader_epoch=epoch, replica_nodes=replicas, isr_nodes=isr,
        eligible_leader_replicas=(), last_known_elr=(),
        offline_replicas=tuple(r for r in replicas if live and r not in live),
    )


def _topic(ctx: RequestContext, meta: TopicMeta, indexes: Iterable[int]) -> Any:
    live = {b.node_id for b in ctx.cluster.image.live_brokers()}
    partitions = tuple(_partition(ctx, meta.name, i, live) for i in indexes
                       if (meta.name, i) in ctx.cluster.assignments)
    return ctx.build(
        "DescribeTopicPartitionsResponseTopic", error_code=OK, name=meta.name,
        topic_id=meta.topic_id, is_internal=meta.internal, partitions=partitions,
        topic_authorized_operations=ctx.authorized_operations(_authz.TOPIC, meta.name),
    )


def _unknown_topic(ctx: RequestContext, name: str) -> Any:
    try:
        check_topic_name(name)
        code = ErrorCode.unknown_topic_or_partition
    except TopicError as e:
        code = e.code
    return ctx.build(
        "DescribeTopicPartitionsResponseTopic", error_code=code, name=name,
        topic_id=None,  # kio writes the zero uuid
        is_internal=name in KAFKA_INTERNAL_TOPICS, partitions=(),
        topic_authorized_operations=ctx.authorized_operations(_authz.TOPIC, name),
    )


def _invalid_request(ctx: RequestContext, request: Any) -> Any:
    """Kafka's error answer: every requested topic (in request order) with the error."""
    topics = tuple(ctx.build(
        "DescribeTopicPartitionsResponseTopic", error_code=ErrorCode.invalid_request,
        name=t.name, topic_id=None, is_internal=False, partitions=(),
    ) for t in request.topics)
    return ctx.response(throttle_time=NO_THROTTLE, topics=topics, next_cursor=None)


def _names(ctx: RequestContext, request: Any) -> list[str] | None:
    """The topics to answer, in name order; None for an invalid cursor."""
    cursor = request.cursor
    after = cursor.topic_name if cursor is not None else ""
    if not request.topics:
        names = {n for n in ctx.state.topics if n >= after}
    else:
        names = {t.name for t in request.topics if t.name >= after}
        if cursor is not None and cursor.topic_name not in names:
            return None
    if cursor is not None and cursor.partition_index < 0:
        return None
    return sorted(names)


async def handle(ctx: RequestContext, request: Any) -> Any:
    await ctx.controller.lifecycle.wait_serving(timeout_s=5.0)  # a caught-up image
    names = _names(ctx, request)
    if names is None:
        return _invalid_request(ctx, request)
    cursor, every_topic = request.cursor, not request.topics
    remaining = max(min(PARTITION_LIMIT_MAX, request.response_partition_limit), 1)
    topics: list[Any] = []
    denied: list[Any] = []  # answered after the others, as Kafka does
    next_cursor = None
    for name in names:
        if not _authz.topic(ctx, _authz.Op.DESCRIBE, name):
            if not every_topic:
                denied.append(ctx.build(
                    "DescribeTopicPartitionsResponseTopic",
                    error_code=ErrorCode.topic_authorization_failed, name=name, topic_id=None,
                    is_internal=False, partitions=()))
            continue
        if remaining == 0:  # the limit ran out at the previous topic's end
            next_cursor = ctx.build("Cursor", topic_name=name, partition_index=0)
            break
        meta = ctx.state.topics.get(name)
        if meta is None:
            if not every_topic:
                topics.append(_unknown_topic(ctx, name))
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        end = min(meta.partitions, first + remaining)
        topic = _topic(ctx, meta, range(first, end))
        topics.append(topic)
        if end < meta.partitions:
            next_cursor = ctx.build("Cursor", topic_name=name, partition_index=end)
            break
        remaining -= len(topic.partitions)
    return ctx.response(throttle_time=NO_THROTTLE, topics=tuple(topics + denied),
                        next_cursor=next_cursor)
