"""DeleteTopics (key 20), versions 1-6.

Quirks: v1-5 name topics in ``topic_names``; v6 sends ``topics`` entries with
either a name or a topic id (Java Admin's ``deleteTopics(TopicCollection.ofTopicIds)``).
An unknown id is UNKNOWN_TOPIC_ID, an unknown name UNKNOWN_TOPIC_OR_PARTITION;
naming both is INVALID_REQUEST. A name or id given twice is INVALID_REQUEST for
that topic, as in Kafka 4. ``delete.topic.enable=false`` answers
TOPIC_DELETION_DISABLED. v6 answers carry the deleted topic's id. Any broker
deletes through the controller (here or forwarded to it, asking again while
none is known until ``timeout_ms``, ``controller.admin``) and answers once its
own image has dropped the topic.
Controller mutation quota (KIP-599): a topic to delete takes its partition
count; from v5 a topic met with the bucket already empty is
THROTTLING_QUOTA_EXCEEDED, earlier versions are only throttled.
Authorization (Kafka's controller): DELETE on the cluster, else DESCRIBE and
DELETE on each topic, else TOPIC_AUTHORIZATION_FAILED — by name with the zero id,
by id with the id and, to a principal that may not DESCRIBE it, no name.
"""

from __future__ import annotations

import uuid
from typing import Any

import trio
from kio.schema.errors import ErrorCode

from kcompat.broker.controller.admin import FORWARD_TIMEOUT_S, delete_topic
from kcompat.broker.handlers import _authz, _quota
from kcompat.broker.handlers._common import OK, duplicates
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.state import TopicError

_ZERO = uuid.UUID(int=0)


def _requested(request: Any) -> list[tuple[str | None, uuid.UUID | None]]:
    if hasattr(request, "topic_names"):
        return [(name, None) for name in request.topic_names]
    return [(t.name, t.topic_id if t.topic_id and t.topic_id != _ZERO else None)
            for t in request.topics]


def _denied(ctx: RequestContext, name: str, by_id: bool
            ) -> tuple[str | None, uuid.UUID | None] | None:
    """Kafka's controller: DELETE on the cluster, else DESCRIBE and DELETE on the
    topic; denied, the (name, id) to answer with — a topic asked by id keeps its
    id and shows its name only to who may DESCRIBE it, one asked by name gets the
    zero id. None when allowed."""
    if _authz.cluster(ctx, _authz.Op.DELETE) or _authz.topic(ctx, _authz.Op.DELETE, name):
        return None
    describable = _authz.topic(ctx, _authz.Op.DESCRIBE, name)
    meta = ctx.state.topics.get(name)
    if by_id:
        return (name if describable else None), (meta.topic_id if meta else None)
    return name, _ZERO


def _delete(ctx: RequestContext, name: str | None, topic_id: uuid.UUID | None,
            pending: list[str], quota: _quota.MutationQuota | None) -> Any:
    state = ctx.state
    code, message = OK, None
    by_id = name is None
    try:
        if name is not None and topic_id is not None:
            raise TopicError(ErrorCode.invalid_request,
                             "You may not specify both topic name and topic id.")
        if name is None:
            meta = state.topic_by_id(topic_id) if topic_id is not None else None
            if meta is None:
                raise TopicError(ErrorCode.unknown_topic_id, "This server does not host this "
                                 "topic ID.")
            name = meta.name
        meta = state.topics.get(name)
        topic_id = meta.topic_id if meta is not None else topic_id
        if not state.config["delete.topic.enable"]:
            raise TopicError(ErrorCode.topic_deletion_disabled, "Topic deletion is disabled.")
        if (denied := _denied(ctx, name, by_id)) is not None:
            name, topic_id = denied
            raise TopicError(ErrorCode.topic_authorization_failed,
                             _authz.MESSAGES[ErrorCode.topic_authorization_failed])
        if meta is not None:
            _quota.take(quota, meta.partitions)
        pending.append(name)  # committed through the controller below
    except TopicError as e:
        code, message = e.code, e.message
    return ctx.build("DeletableTopicResult", name=name, topic_id=topic_id,
                     error_code=code, error_message=message)


async def handle(ctx: RequestContext, request: Any) -> Any:
    wanted = _requested(request)
    dup_names = duplicates(n for n, _ in wanted if n is not None)
    dup_ids = duplicates(i for _, i in wanted if i is not None)
    results, reported = [], set()
    pending: list[str] = []
    quota = _quota.mutations(ctx, strict_since=5)
    for name, topic_id in wanted:
        if name in dup_names or topic_id in dup_ids:
            key = name if name in dup_names else topic_id
            if key not in reported:
                reported.add(key)
                what = "name" if name in dup_names else "id"
                results.append(ctx.build(
                    "DeletableTopicResult", name=name, topic_id=topic_id,
                    error_code=ErrorCode.invalid_request, error_message=f"Duplicate topic {what}.",
                ))
            continue
        results.append(_delete(ctx, name, topic_id, pending, quota))
    if pending:
        results = await _commit_deletions(ctx, request, results, pending)
    return ctx.response(throttle_time=_quota.mutation_throttle(ctx, quota),
                        responses=tuple(results))


async def _commit_deletions(ctx: RequestContext, request: Any, results: list[Any],
                            pending: list[str]) -> list[Any]:
    """Delete through the controller, each answered once its record is
    committed and applied (here too), all within the request's timeout."""
    failed: dict[str, TopicError] = {}
    timeout = getattr(request, "timeout", 0)  # a timedelta (decoded) or milliseconds
    timeout_s = (timeout.total_seconds() if hasattr(timeout, "total_seconds")
                 else float(timeout or 0) / 1000)
    until = trio.current_time() + (timeout_s if timeout_s > 0 else FORWARD_TIMEOUT_S)
    for name in pending:
        try:
            await delete_topic(ctx.controller, name, max(0.0, until - trio.current_time()))
        except TopicError as e:
            failed[name] = e
    return [ctx.build("DeletableTopicResult", name=r.name, topic_id=getattr(r, "topic_id", None),
                      error_code=failed[r.name].code, error_message=failed[r.name].message)
            if r.name in failed else r for r in results]
