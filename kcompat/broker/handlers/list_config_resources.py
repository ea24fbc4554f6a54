"""ListConfigResources (key 74), versions 0-1 (KIP-1142; v0 was
ListClientMetricsResources).

Quirks: v1 lists the config resources of the types asked for — none asked
means all: GROUP (32) per group with config overrides, CLIENT_METRICS (16)
per client-metrics subscription (kcompat has none), BROKER_LOGGER (8) and
BROKER (4) per live (unfenced) broker, TOPIC (2) per topic (internal ones
too) — in that order, as Apache Kafka 4.4's KafkaApis builds the list. A type outside those is
UNSUPPORTED_VERSION with no resources (Kafka's answer). v0 asks for
client-metrics resources only: none.
Authorization (Kafka's): DESCRIBE_CONFIGS on the cluster, else
CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import (
    NO_THROTTLE,
    OK,
    RESOURCE_BROKER,
    RESOURCE_GROUP,
    RESOURCE_TOPIC,
)
from kcompat.broker.host.context import RequestContext

RESOURCE_BROKER_LOGGER = 8
RESOURCE_CLIENT_METRICS = 16
LISTED = (RESOURCE_GROUP, RESOURCE_CLIENT_METRICS, RESOURCE_BROKER_LOGGER, RESOURCE_BROKER,
          RESOURCE_TOPIC)


def _names(ctx: RequestContext, resource_type: int) -> list[str]:
    image = ctx.state.metadata.image
    if resource_type in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER):
        return ([str(b.node_id) for b in image.live_brokers()]
                or [str(ctx.state.node_id)])
    if resource_type == RESOURCE_TOPIC:
        return list(image.topics)
    if resource_type == RESOURCE_GROUP:
        return [group for group, configs in image.group_configs.items() if configs]
    return []  # client metrics: no subscriptions


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not _authz.cluster(ctx, _authz.Op.DESCRIBE_CONFIGS):
        return ctx.response(throttle_time=NO_THROTTLE,
                            error_code=ErrorCode.cluster_authorization_failed,
                            config_resources=())
    if ctx.version == 0:
        return ctx.response(throttle_time=NO_THROTTLE, error_code=OK, config_resources=())
    asked = {int(t) for t in request.resource_types} or set(LISTED)
    if not asked <= set(LISTED):
        return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.unsupported_version,
                            config_resources=())
    resources = tuple(ctx.build("ConfigResource", resource_name=name, resource_type=kind)
                      for kind in LISTED if kind in asked for name in _names(ctx, kind))
    return ctx.response(throttle_time=NO_THROTTLE, error_code=OK, config_resources=resources)
