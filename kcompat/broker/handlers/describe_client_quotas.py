"""DescribeClientQuotas (key 48), versions 0-1.

Quirks: the filter is a list of components (entity type; match exact name,
default entity or any name) and ``strict`` (no other entity types); no
component and not strict lists every entity, strict lists none. A bad filter
is one top-level error with Kafka 4.4's message and null entries: a type
named twice, a null exact match, a default match with a name, an unknown
match type, ip combined with user or client-id (INVALID_REQUEST), an unknown
entity type (UNSUPPORTED_VERSION, as Kafka answers). Entities come from this
broker's metadata image (``controller.client_quotas``), identical on every
broker; types and keys in Kafka's order.
Authorization (Kafka's): DESCRIBE_CONFIGS on the cluster, else
CLUSTER_AUTHORIZATION_FAILED, no message and null entries.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.controller import client_quotas as cq
from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.host.context import RequestContext


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not _authz.cluster(ctx, _authz.Op.DESCRIBE_CONFIGS):
        return ctx.response(throttle_time=NO_THROTTLE,
                            error_code=ErrorCode.cluster_authorization_failed,
                            error_message=None, entries=None)  # Kafka 4.4's: no message
    components = [cq.Component(c.entity_type, int(c.match_type), c.match)
                  for c in request.components]
    try:
        found = cq.describe(ctx.state.metadata.image.client_quotas, components,
                            request.strict)
    except cq.QuotaError as e:
        return ctx.response(throttle_time=NO_THROTTLE, error_code=e.code,
                            error_message=e.message, entries=None)
    entries = tuple(
        ctx.build("EntryData",
                  entity=tuple(ctx.build("EntityData", entity_type=t, entity_name=n)
                               for t, n in entity),
                  values=tuple(ctx.build("ValueData", key=k, value=v) for k, v in values))
        for entity, values in found)
    return ctx.response(throttle_time=NO_THROTTLE, error_code=OK, error_message="",
                        entries=entries)
