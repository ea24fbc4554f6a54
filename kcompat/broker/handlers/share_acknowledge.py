"""ShareAcknowledge (key 79), versions 1-2 (KIP-932; v2 adds RENEW, KIP-1222).

Acknowledgements without a fetch, in the member's share session: the epoch
must be the session's next one, or -1 to close it (its remaining acquired
records are released). Epoch 0 is INVALID_SHARE_SESSION_EPOCH: a session is
opened by ShareFetch only. Each partition's ``error_code`` is the result of
its acknowledgements (all or nothing), written to ``__share_group_state``
before the answer.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.context import RequestContext
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.handlers._share import (
    PartitionResult,
    ack_batches,
    apply_acks,
    error_answer,
    named_partitions,
    persist,
    release_session,
    topic_responses,
)
from kcompat.broker.share_sessions import FINAL_EPOCH, INITIAL_EPOCH
from kcompat.broker.shares import Held
from kcompat.group.share_partition import AckBatch


async def handle(ctx: RequestContext, request: Any) -> Any:
    group_id, member_id = request.group_id or "", request.member_id or ""
    if not group_id:
        return error_answer(ctx, ErrorCode.invalid_group_id, "The group id is empty.")
    if not member_id:
        return error_answer(ctx, ErrorCode.invalid_request, "The member id is empty.")
    epoch = request.share_session_epoch
    if epoch == INITIAL_EPOCH:
        return error_answer(ctx, ErrorCode.invalid_share_session_epoch,
                            "A share session is opened by ShareFetch.")
    entries, names, unknown = named_partitions(ctx, request.topics, "partitions")
    acks: dict[tuple[str, int], list[AckBatch]] = {}
    for tp, entry in entries.items():
        batches, problem = ack_batches(ctx, entry)
        if problem:
            return error_answer(ctx, ErrorCode.invalid_request, problem)
        acks[tp] = batches
    session, code = ctx.shares.sessions.advance(group_id, member_id, epoch)
    if session is None:
        return error_answer(ctx, code)
    touched: dict[tuple[str, str, int], Held] = {}
    results: dict[tuple[str, int], PartitionResult] = {}
    await apply_acks(ctx, group_id, member_id, acks, results, touched)
    if epoch == FINAL_EPOCH:
        release_session(ctx, session, touched)
    await persist(ctx, touched, results)
    ids = {name: tid for tid, name in names.items()}
    responses, endpoints = topic_responses(ctx, results, ids, unknown, fetch=False)
    lock_ms = ctx.shares.settings_of(group_id).config.record_lock_duration_ms
    return ctx.response(throttle_time=NO_THROTTLE, error_code=OK, error_message=None,
                        acquisition_lock_timeout=datetime.timedelta(milliseconds=lock_ms),
                        responses=responses, node_endpoints=endpoints)
