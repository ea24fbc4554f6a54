"""OffsetCommit (key 8), versions 2-10.

Java 4 commits with v2+ (caps at 9 for the classic consumer), kafka-python v8,
librdkafka v7. v10 names topics by id only (KIP-848 consumers): an id this
broker does not know is UNKNOWN_TOPIC_ID for each of its partitions (those
topics first in the answer, as Kafka lists them), and offsets are kept by topic
name as for every other version. A commit with generation -1 and no member id is a standalone
commit (``assign()`` consumers, Spark never commits) and is accepted while the
group has no members. Offsets are written to ``__consumer_offsets`` and fsynced
before the answer, and become visible to OffsetFetch only then.
Authorization (Kafka's): without READ on the group every partition is
GROUP_AUTHORIZATION_FAILED; a topic without READ is TOPIC_AUTHORIZATION_FAILED
(answered first, with the unknown ids, as Kafka's response builder orders them).
A partition the metadata lacks is UNKNOWN_TOPIC_OR_PARTITION (UNKNOWN_TOPIC_ID
by id) before any group error — a member's stale generation, an unknown member,
NOT_COORDINATOR — as Kafka filters such topics out before it asks the group.
A member's commit (a generation or epoch >= 0) to a group the coordinator does
not know is ILLEGAL_GENERATION up to v8 and GROUP_ID_NOT_FOUND from v9, as in
Kafka 4.4.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.groups.groups import NotCoordinatorError
from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, OK, unknown_partition_error
from kcompat.broker.handlers._leader_hints import topic_name
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.state import now_ms
from kcompat.group.offsets import CommittedOffset


def _unknown(ctx: RequestContext, topic: str | None, partition: int) -> ErrorCode:
    if topic is None:
        return ErrorCode.unknown_topic_id
    return unknown_partition_error(ctx.state, topic, partition)


def _partition_error(ctx: RequestContext, topic: str | None, p: Any,
                     max_metadata: int) -> ErrorCode:
    if topic is None:
        return ErrorCode.unknown_topic_id
    if (unknown := unknown_partition_error(ctx.state, topic, p.partition_index)) != OK:
        return unknown  # the metadata image decides: the partition need not be local
    if p.committed_metadata is not None and len(p.committed_metadata.encode()) > max_metadata:
        return ErrorCode.offset_metadata_too_large
    return OK


async def handle(ctx: RequestContext, request: Any) -> Any:
    groups = ctx.groups
    group_id = request.group_id
    generation = request.generation_id_or_member_epoch
    named = [(t.name if ctx.version < 10 else topic_name(ctx, t.topic_id), t)
             for t in request.topics]
    partition_errors: dict[tuple[str, int], ErrorCode] = {}
    allowed = _authz.topics(ctx, _authz.Op.READ, (name for name, _t in named))
    if not _authz.group(ctx, _authz.Op.READ, group_id):
        top_error: ErrorCode | None = ErrorCode.group_authorization_failed
    elif not group_id:
        top_error = ErrorCode.invalid_group_id
    elif (gate := groups.coordinator_error(group_id)) is not None:
        top_error = gate  # not (yet) this group's coordinator
    elif (consumer := ctx.consumer_groups.group(group_id)) is not None:  # KIP-848
        top_error, partition_errors = ctx.consumer_groups.commit_errors(
            consumer, request.member_id, generation, ctx.version,
            [(name, p.partition_index) for name, t in named if name in allowed
             for p in t.partitions])
    else:  # only now: coordinator_error loads the group on a new coordinator
        top_error = groups.coordinator.commit_error(
            group_id, generation, request.member_id,
            getattr(request, "group_instance_id", None))
        if top_error == ErrorCode.illegal_generation and ctx.version >= 9 \
                and group_id not in groups.coordinator.groups:
            top_error = ErrorCode.group_id_not_found  # v9+ (KIP-848) names a missing group
    max_metadata = int(ctx.state.config["offset.metadata.max.bytes"])
    now = now_ms()
    errors: dict[tuple[str | None, int], ErrorCode] = {}
    accepted: dict[tuple[str, int], CommittedOffset] = {}
    # as Kafka: topics whose id the broker does not know (or the principal may not
    # READ) are answered first, then the coordinator's answer for the others
    named.sort(key=lambda nt: nt[0] in allowed)
    for name, t in named:
        denied = (ErrorCode.topic_authorization_failed if name is not None
                  and name not in allowed and top_error != ErrorCode.group_authorization_failed
                  else None)
        for p in t.partitions:
            # a partition the metadata lacks is answered before the group is asked
            # (Kafka filters it out first), whatever the member's generation
            unknown = (_unknown(ctx, name, p.partition_index)
                       if top_error != ErrorCode.group_authorization_failed else OK)
            code = (denied or unknown or top_error
                    or _partition_error(ctx, name, p, max_metadata))
            if code == OK and name is not None:  # a KIP-848 member's older epoch
                code = partition_errors.get((name, p.partition_index), OK)
            errors[(name, p.partition_index)] = code
            if code == OK:
                assert name is not None
                accepted[(name, p.partition_index)] = CommittedOffset(
                    p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                    p.committed_metadata or "", now)
    if accepted:
        if ctx.consumer_groups.group(group_id) is None:
            groups.coordinator.ensure_group(group_id, now)
        try:
            await groups.commit_offsets(group_id, accepted)
        except OSError:
            for tp in accepted:
                errors[tp] = ErrorCode.kafka_storage_error
        except NotCoordinatorError as e:  # leadership moved meanwhile
            for tp in accepted:
                errors[tp] = e.code
    topics = tuple(
        ctx.build("OffsetCommitResponseTopic", name=name, topic_id=getattr(t, "topic_id", None),
                  partitions=tuple(
                      ctx.build("OffsetCommitResponsePartition", partition_index=p.partition_index,
                                error_code=errors[(name, p.partition_index)])
                      for p in t.partitions))
        for name, t in named
    )
    return ctx.response(throttle_time=NO_THROTTLE, topics=topics)
