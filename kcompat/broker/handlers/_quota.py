"""Quotas at the handlers (``kcompat.broker.net.quotas``): whose traffic a
request is, and the throttle it earns turned into a muted connection; the
controller mutation quota of CreateTopics, CreatePartitions and DeleteTopics
(``mutations`` for one request, ``take`` the partitions of one topic).

KIP-219: the answer goes out at once carrying ``throttle_time_ms``; the broker
then reads nothing more from the connection for that long
(``Session.mute_until``, honoured by ``connection``). An internal call (no
session) is answered with the throttle and muted nowhere.
"""

from __future__ import annotations

import datetime

import trio
from kio.schema.errors import ErrorCode

from kcompat.broker.host.context import RequestContext
from kcompat.broker.net import quotas
from kcompat.broker.net.quotas import (
    INT_MAX,
    ClientQuotaManager,
    MutationQuota,
    Quotas,
)
from kcompat.broker.storage.state import TopicError

__all__ = ["INT_MAX", "MutationQuota", "image_quotas", "managers", "mutation_throttle",
           "mutations", "record",
           "take", "throttle"]


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


def mutations(ctx: RequestContext, strict_since: int) -> MutationQuota | None:
    """This request's controller mutation quota (None: none applies); strict
    from version ``strict_since`` (KIP-599), permissive before."""
    return managers(ctx).mutations.quota_for(image_quotas(ctx), ctx.principal, ctx.client_id,
                                             ctx.version >= strict_since)


def take(quota: MutationQuota | None, permits: int) -> None:
    """Take ``permits`` partition mutations for one topic, or refuse it:
    TopicError THROTTLING_QUOTA_EXCEEDED (strict, the bucket already empty),
    without a message as Kafka 4.4 answers it (the error's own message is
    ``quotas.THROTTLING_QUOTA_EXCEEDED``)."""
    if quota is not None and not quota.record(permits):
        raise TopicError(ErrorCode.throttling_quota_exceeded, None)


def mutation_throttle(ctx: RequestContext, quota: MutationQuota | None) -> datetime.timedelta:
    """The answer's throttle_time (the connection muted that long)."""
    return throttle(ctx, 0 if quota is None else quota.throttle_time_ms())
