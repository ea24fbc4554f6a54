"""ShareAcknowledge (key 79), versions 1-2 (KIP-932; v2 adds RENEW, KIP-1222).

Acknowledgements without a fetch, in the member's share session: the epoch
must be the session's next one, or -1 to close it (its remaining acquired
records are released). Epoch 0 is INVALID_SHARE_SESSION_EPOCH: a session is
opened by ShareFetch only. Each partition's ``error_code`` is the result of
its acknowledgements (all or nothing), written to ``__share_group_state``
before the answer; a partition whose share-partition this broker has not
loaded (no ShareFetch claimed it here while it led the partition, or its
topic was re-created since) is UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers
for one missing from its share-partition cache. While a state partition the
request wrote to is behind (its oldest write waiting longer than
``lag_sources.SHARE_STATE_FROM_S``: ``backpressure``), the answer carries a
throttle and the connection is muted.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.groups.share_sessions import FINAL_EPOCH, INITIAL_EPOCH
from kcompat.broker.groups.shares import Held
from kcompat.broker.handlers import _quota
from kcompat.broker.handlers._common import OK
from kcompat.broker.handlers._share import (
    Parsed,
    PartitionResult,
    apply_acks,
    error_answer,
    parse_request,
    persist,
    release_session,
    topic_responses,
)
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.state import now_ms


async def handle(ctx: RequestContext, request: Any) -> Any:
    parsed = parse_request(ctx, request)
    if not isinstance(parsed, Parsed):
        return parsed
    group_id, member_id, acks = parsed.group_id, parsed.member_id, parsed.acks
    names, unknown = parsed.names, parsed.unknown
    epoch = request.share_session_epoch
    if epoch == INITIAL_EPOCH:
        return error_answer(ctx, ErrorCode.invalid_share_session_epoch,
                            "A share session is opened by ShareFetch.")
    session, code = ctx.shares.sessions.advance(group_id, member_id, epoch, now_ms())
    if session is None:
        return error_answer(ctx, code)
    touched: dict[tuple[str, str, int], Held] = {}
    results: dict[tuple[str, int], PartitionResult] = {}
    await apply_acks(ctx, group_id, member_id, acks, results, touched)
    if epoch == FINAL_EPOCH:
        release_session(ctx, session, touched)
    state_keys = {held.state_index for held in touched.values()}
    seen_s = ctx.broker.backpressure.lag_s("share_state", state_keys)
    await persist(ctx, touched, results)
    throttle = _quota.throttle(ctx, ctx.broker.backpressure.throttle_ms(
        "share_state", state_keys, seen_s))  # its state writes behind: slowed
    ids = {name: tid for tid, name in names.items()}
    responses, endpoints = topic_responses(ctx, results, ids, unknown, fetch=False)
    lock_ms = ctx.shares.settings_of(group_id).config.record_lock_duration_ms
    return ctx.response(throttle_time=throttle, error_code=OK, error_message=None,
                        acquisition_lock_timeout=datetime.timedelta(milliseconds=lock_ms),
                        responses=responses, node_endpoints=endpoints)
