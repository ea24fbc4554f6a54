"""CreatePartitions (key 37), versions 0-3.

Quirks: ``count`` is the new total. Manual ``assignments`` (one per new
partition) name registered brokers, once each, as many as the topic's
replication factor; a wrong number of them is INVALID_REPLICA_ASSIGNMENT with
Kafka's message. Committed through the controller (``controller.admin.submit``). A topic named twice is
INVALID_REQUEST ("Duplicate topic name."); an unknown topic
UNKNOWN_TOPIC_OR_PARTITION without a message; a count that is not an increase
INVALID_PARTITIONS with Kafka 4.4's messages: "Topic already has N
partition(s)." for the topic's own count — what a client retrying an increase
that was carried out (its first answer lost to a timeout) sees, ``validate_only``
too — and "The topic T currently has N partition(s); M would not be an
increase." below it. On the controller an increase of a topic in flight is
waited for before the next one is validated (``controller.admin``), so a retry
racing its first attempt gets the same answer, never a second set of partitions.
``validate_only`` changes nothing.
Controller mutation quota (KIP-599): a valid increase takes the partitions it
adds; from v3 a topic met with the bucket already empty is
THROTTLING_QUOTA_EXCEEDED, earlier versions are only throttled.
Authorization (Kafka's controller): ALTER on each topic, else
TOPIC_AUTHORIZATION_FAILED without a message, answered after the others.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.controller.admin import increase_settled, submit
from kcompat.broker.handlers import _authz, _quota
from kcompat.broker.handlers._common import OK, duplicates
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.state import TopicError, check_replicas


def _manual_assignment(ctx: RequestContext, topic: Any) -> list[list[int]] | None:
    """Validate manual assignments of the new partitions (None without any)."""
    meta = ctx.state.topics.get(topic.name)
    if meta is None or topic.assignments is None:
        return None  # add_partitions reports the unknown topic
    added = topic.count - meta.partitions
    if added > 0 and len(topic.assignments) != added:
        raise TopicError(
            ErrorCode.invalid_replica_assignment,
            f"Attempted to add {added} additional partition(s), but only "
            f"{len(topic.assignments)} assignment(s) were specified.",
        )
    found = ctx.cluster.assignments.get((topic.name, 0))
    replication = len(found[1]) if found else None
    for assignment in topic.assignments:
        check_replicas(assignment.broker_ids, ctx.cluster.image.broker_ids(), replication)
    return [list(a.broker_ids) for a in topic.assignments]


async def _create(ctx: RequestContext, topic: Any, validate_only: bool,
                  quota: _quota.MutationQuota | None) -> Any:
    code, message = OK, None
    try:
        await increase_settled(ctx.controller, topic.name)  # a retry sees the first's count
        manual = _manual_assignment(ctx, topic)
        intent = ctx.state.add_partitions(topic.name, topic.count)
        _quota.take(quota, topic.count - ctx.state.topics[topic.name].partitions)
        if manual:
            intent["assignments"] = manual
        if not validate_only:
            await submit(ctx.controller, intent)
    except TopicError as e:
        code, message = e.code, e.message
    return ctx.build("CreatePartitionsTopicResult", name=topic.name, error_code=code,
                     error_message=message)


async def handle(ctx: RequestContext, request: Any) -> Any:
    dups = duplicates(t.name for t in request.topics)
    results, reported, denied = [], set(), []
    allowed = _authz.topics(ctx, _authz.Op.ALTER, (t.name for t in request.topics))
    quota = _quota.mutations(ctx, strict_since=3)
    for topic in request.topics:
        if topic.name not in dups and topic.name not in allowed:
            denied.append(ctx.build("CreatePartitionsTopicResult", name=topic.name,
                                    error_code=ErrorCode.topic_authorization_failed,
                                    error_message=None))  # Kafka 4.4's: no message
        elif topic.name not in dups:
            results.append(await _create(ctx, topic, request.validate_only, quota))
        elif topic.name not in reported:
            reported.add(topic.name)
            results.append(ctx.build(
                "CreatePartitionsTopicResult", name=topic.name,
                error_code=ErrorCode.invalid_request, error_message="Duplicate topic name.",
            ))
    return ctx.response(throttle_time=_quota.mutation_throttle(ctx, quota),
                        results=tuple(results + denied))
