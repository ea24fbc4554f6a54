"""TxnOffsetCommit (key 28), versions 0-4.

Offsets committed inside a transaction are written to ``__consumer_offsets``
as a transactional batch and become visible to OffsetFetch only when the
transaction's COMMIT marker reaches that partition (dropped on ABORT). The
producer must have added the group's offsets partition with AddOffsetsToTxn
(INVALID_TXN_STATE otherwise); when the transaction's coordinator is another
broker it is asked (``txn_verify.in_transaction``), as Kafka's group
coordinator verifies with KIP-890's AddPartitionsToTxn verifyOnly. From v3
the group generation and member are checked like an OffsetCommit's, but for
REBALANCE_IN_PROGRESS: a member
of the current generation commits in a transaction while its group awaits
the leader's SyncGroup, as Kafka lets it. A partition the metadata lacks is
UNKNOWN_TOPIC_OR_PARTITION before any of these (Kafka filters such
partitions out first), after the authorization checks.
Authorization (Kafka's): WRITE on the transactional id, else every partition is
TRANSACTIONAL_ID_AUTHORIZATION_FAILED; READ on the group, else
GROUP_AUTHORIZATION_FAILED; READ on each topic, else TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.groups.groups import NotCoordinatorError
from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import (
    NO_THROTTLE,
    OK,
    fenced_for_version,
    unknown_partition_error,
)
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.state import now_ms
from kcompat.group.offsets import CommittedOffset


async def _request_error(ctx: RequestContext, request: Any) -> ErrorCode | None:
    txns = ctx.txns
    if (gate := ctx.groups.coordinator_error(request.group_id)) is not None:
        return gate  # sent to the group coordinator, which this is not
    partition = txns.offsets_partition(request.group_id)
    if txns.coordinator_error(request.transactional_id) is not None:
        # the transaction coordinator is another broker: asked, as Kafka's
        # group coordinator verifies (KIP-890), whether the offsets partition
        # is in the producer's transaction
        code = await txns.verifier.in_transaction(
            request.transactional_id, request.producer_id, request.producer_epoch, partition)
        if code == ErrorCode.invalid_producer_epoch:  # fenced
            return fenced_for_version(ErrorCode.producer_fenced, ctx.version, 3)
        if code != OK:
            return code
        if ctx.version >= 3 and request.generation_id >= 0:
            return _member_error(ctx, request)
        return None
    meta = txns.coordinator.txns.get(request.transactional_id)
    if meta is None or meta.producer_id != request.producer_id:
        return ErrorCode.invalid_producer_id_mapping
    if meta.producer_epoch != request.producer_epoch:
        return fenced_for_version(ErrorCode.producer_fenced, ctx.version, 3)
    if not txns.coordinator.in_transaction(request.producer_id, request.producer_epoch,
                                           partition):
        return ErrorCode.invalid_txn_state
    if ctx.version >= 3 and request.generation_id >= 0:
        return _member_error(ctx, request)
    return None


def _member_error(ctx: RequestContext, request: Any) -> ErrorCode | None:
    """The member and generation check: a KIP-848 group's (ILLEGAL_GENERATION
    for a member not at its epoch) or a classic group's."""
    consumer = ctx.consumer_groups.group(request.group_id)
    if consumer is None:
        return ctx.groups.coordinator.commit_error(
            request.group_id, request.generation_id, request.member_id,
            request.group_instance_id, transactional=True)
    top, partitions = ctx.consumer_groups.commit_errors(
        consumer, request.member_id, request.generation_id, ctx.version,
        [(t.name, p.partition_index) for t in request.topics for p in t.partitions],
        transactional=True)
    return top or next(iter(partitions.values()), None)


def _denied(ctx: RequestContext, request: Any) -> ErrorCode | None:
    """Kafka's rule: WRITE on the transactional id, READ on the group."""
    if not _authz.txn_id(ctx, _authz.Op.WRITE, request.transactional_id):
        return ErrorCode.transactional_id_authorization_failed
    if not _authz.group(ctx, _authz.Op.READ, request.group_id):
        return ErrorCode.group_authorization_failed
    return None


async def handle(ctx: RequestContext, request: Any) -> Any:
    denied = _denied(ctx, request)
    error = denied or await _request_error(ctx, request)
    allowed = _authz.topics(ctx, _authz.Op.READ, (t.name for t in request.topics))
    now = now_ms()
    offsets: dict[tuple[str, int], CommittedOffset] = {}
    codes: dict[tuple[str, int], ErrorCode] = {}
    for t in request.topics:
        for p in t.partitions:
            # a partition the metadata lacks is filtered out before the
            # transaction and the group are asked, as Kafka does
            missing = unknown_partition_error(ctx.state, t.name, p.partition_index)
            code = (denied or (ErrorCode.topic_authorization_failed if t.name not in allowed
                               else None)
                    or (missing if missing != OK else None) or error or OK)
            codes[(t.name, p.partition_index)] = code
            if code == OK:
                offsets[(t.name, p.partition_index)] = CommittedOffset(
                    p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                    p.committed_metadata or "", now)
    if offsets:
        if ctx.consumer_groups.group(request.group_id) is None:
            # a group not known yet is created Empty, as Kafka creates it for
            # a producer's commit (and keeps it, the transaction aborted or not)
            ctx.groups.coordinator.ensure_group(request.group_id, now)
        try:
            written = await ctx.groups.txn_commit_offsets(
                request.group_id, request.producer_id, request.producer_epoch, offsets)
        except NotCoordinatorError as e:  # leadership moved meanwhile
            written = e.code
        if written == ErrorCode.invalid_producer_epoch:  # fenced (the offsets log knows)
            written = fenced_for_version(ErrorCode.producer_fenced, ctx.version, 3)
        if written != OK:
            codes = {tp: written if tp in offsets else code for tp, code in codes.items()}
    topics = tuple(
        ctx.build("TxnOffsetCommitResponseTopic", name=t.name, partitions=tuple(
            ctx.build("TxnOffsetCommitResponsePartition", partition_index=p.partition_index,
                      error_code=codes[(t.name, p.partition_index)]) for p in t.partitions))
        for t in request.topics
    )
    return ctx.response(throttle_time=NO_THROTTLE, topics=topics)
