"""AlterConfigs (key 33), versions 0-2 (the legacy, non-incremental API).

Quirks: for a TOPIC the request's configs *replace* the whole override set
(keys left out fall back to their defaults), as in Kafka. A null value is
INVALID_REQUEST ("Null value not supported for : k"); an unknown key or bad
value INVALID_CONFIG. A BROKER resource ("" the cluster-wide default, or this
broker's id) replaces that level's dynamic broker configs the same way,
checked as Kafka's broker checks them (``dynamic_config``: keys Kafka cannot
change at run time, types and bounds, per-broker keys at the cluster level are
INVALID_REQUEST; dropping the cluster-level min.insync.replicas INVALID_CONFIG,
as Kafka 4 with ELR answers). A resource named twice is
INVALID_REQUEST. A GROUP resource (32) replaces the group's config overrides
the same way (Kafka 4.4 accepts it here too). Other types, BROKER_LOGGER
included, are INVALID_REQUEST ("Unknown resource type 8").
``validate_only`` changes nothing.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers._common import (
    NO_THROTTLE,
    RESOURCE_BROKER,
    RESOURCE_GROUP,
    RESOURCE_TOPIC,
    alter_results,
)
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.state import TopicError


def _alter(ctx: RequestContext, resource: Any) -> dict[str, Any] | None:
    nulls = [c.name for c in resource.configs if c.value is None]
    if nulls:
        raise TopicError(ErrorCode.invalid_request,
                         f"Null value not supported for : {','.join(nulls)}")
    changes = {c.name: c.value for c in resource.configs}
    if resource.resource_type == RESOURCE_TOPIC:
        return ctx.state.set_topic_configs(resource.resource_name, changes)
    if resource.resource_type == RESOURCE_GROUP:
        return ctx.state.set_group_configs(resource.resource_name, changes)
    if resource.resource_type == RESOURCE_BROKER:
        return ctx.state.set_broker_configs(resource.resource_name, changes)
    raise TopicError(ErrorCode.invalid_request,
                     f"Unknown resource type {resource.resource_type}")


async def handle(ctx: RequestContext, request: Any) -> Any:
    results = await alter_results(ctx, request, _alter)
    return ctx.response(throttle_time=NO_THROTTLE, responses=results)
