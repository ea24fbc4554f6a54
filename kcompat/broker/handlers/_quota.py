"""Byte-rate quotas at the handlers (``kcompat.broker.quotas``): whose traffic a
request is, and the throttle it earns turned into a muted connection.

KIP-219: the answer goes out at once carrying ``throttle_time_ms``; the broker
then reads nothing more from the connection for that long
(``Session.mute_until``, honoured by ``connection``). An internal call (no
session) is answered with the throttle and muted nowhere.
"""

from __future__ import annotations

import datetime

import trio

from kcompat.broker import quotas
from kcompat.broker.context import RequestContext
from kcompat.broker.quotas import INT_MAX, ClientQuotaManager, Quotas

__all__ = ["INT_MAX", "image_quotas", "managers", "record", "throttle"]


def image_quotas(ctx: RequestContext) -> Quotas:
    return ctx.state.metadata.image.client_quotas


def record(ctx: RequestContext, manager: ClientQuotaManager, value: float) -> int:
    """Record ``value`` bytes of this request's (principal, client id); its throttle in ms."""
    return manager.record(image_quotas(ctx), ctx.principal, ctx.client_id, value)


def throttle(ctx: RequestContext, throttle_ms: int) -> datetime.timedelta:
    """Mute the connection for ``throttle_ms``; the response's ``throttle_time``."""
    if throttle_ms > 0 and ctx.session is not None:
        until = trio.current_time() + throttle_ms / 1000
        ctx.session.mute_until = max(ctx.session.mute_until, until)
    return datetime.timedelta(milliseconds=max(throttle_ms, 0))


def managers(ctx: RequestContext) -> quotas.ClientQuotas:
    return ctx.broker.quotas
