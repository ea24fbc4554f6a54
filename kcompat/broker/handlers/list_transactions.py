"""ListTransactions (key 66), versions 0-2.

Filters by state names (unknown names are echoed in unknown_state_filters),
producer ids, (v1) a minimum running duration and (v2, KIP-1152) a regular
expression the whole transactional id must match (Java's ``Matcher.matches``;
null or empty: no filter). A pattern that does not compile is
INVALID_REGULAR_EXPRESSION.
Authorization (Kafka's): only the transactional ids the principal may DESCRIBE
are listed.
"""

from __future__ import annotations

import re
from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.state import now_ms
from kcompat.txn.coordinator import TxnState

KNOWN_STATES = {s.value for s in TxnState}


async def handle(ctx: RequestContext, request: Any) -> Any:
    states = set(request.state_filters)
    pids = set(request.producer_id_filters)
    min_duration_ms = int(getattr(request, "duration_filter", -1))
    pattern_text = getattr(request, "transactional_id_pattern", None)
    try:
        pattern = re.compile(pattern_text) if pattern_text else None
    except re.error as e:
        return ctx.response(throttle_time=NO_THROTTLE,
                            error_code=ErrorCode.invalid_regular_expression,
                            unknown_state_filters=(), transaction_states=(),
                            error_message=f"Invalid regular expression {pattern_text}: {e}")
    now = now_ms()
    listed = []
    for meta in list(ctx.txns.coordinator.txns.values()):
        if ctx.txns.coordinator_error(meta.transactional_id) is not None:
            continue  # coordinated elsewhere now
        if states and meta.state.value not in states:
            continue
        if pids and meta.producer_id not in pids:
            continue
        if pattern is not None and pattern.fullmatch(meta.transactional_id) is None:
            continue
        if min_duration_ms >= 0 and (meta.start_ms < 0 or now - meta.start_ms < min_duration_ms):
            continue
        if not _authz.txn_id(ctx, _authz.Op.DESCRIBE, meta.transactional_id):
            continue  # Kafka lists only the ids the principal may DESCRIBE
        listed.append(ctx.build("TransactionState", transactional_id=meta.transactional_id,
                                producer_id=meta.producer_id,
                                transaction_state=meta.state.value))
    return ctx.response(throttle_time=NO_THROTTLE, error_code=OK,
                        unknown_state_filters=tuple(sorted(states - KNOWN_STATES)),
                        transaction_states=tuple(listed))
