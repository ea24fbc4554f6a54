"""ListTransactions (key 66), versions 0-1.

Filters by state names (unknown names are echoed in unknown_state_filters),
producer ids and (v1) a minimum running duration.
"""

from __future__ import annotations

from typing import Any

from kcompat.broker.context import RequestContext
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.state import now_ms
from kcompat.txn.coordinator import TxnState

KNOWN_STATES = {s.value for s in TxnState}


async def handle(ctx: RequestContext, request: Any) -> Any:
    states = set(request.state_filters)
    pids = set(request.producer_id_filters)
    min_duration_ms = int(getattr(request, "duration_filter", -1))
    now = now_ms()
    listed = []
    for meta in list(ctx.txns.coordinator.txns.values()):
        if ctx.txns.coordinator_error(meta.transactional_id) is not None:
            continue  # coordinated elsewhere now
        if states and meta.state.value not in states:
            continue
        if pids and meta.producer_id not in pids:
            continue
        if min_duration_ms >= 0 and (meta.start_ms < 0 or now - meta.start_ms < min_duration_ms):
            continue
        listed.append(ctx.build("TransactionState", transactional_id=meta.transactional_id,
                                producer_id=meta.producer_id,
                                transaction_state=meta.state.value))
    return ctx.response(throttle_time=NO_THROTTLE, error_code=OK,
                        unknown_state_filters=tuple(sorted(states - KNOWN_STATES)),
                        transaction_states=tuple(listed))
