"""DescribeConfigs (key 32), versions 1-4.

Quirks: resource type 2 (TOPIC) lists every topic key with its effective value
and Kafka's source id (1 topic override, 2 / 3 this broker's / the cluster's
dynamic broker default, 4 set in the broker's config, 5 default); type 4
(BROKER) ``str(node.id)`` lists Kafka 4.4's broker keys and kcompat's own,
with Kafka's read-only flags, sensitivity and sources, and "" (the cluster
default) only the dynamic cluster-wide defaults, as Kafka 4 does
(``broker_config_entries``). A non-integer broker name or another id is
INVALID_REQUEST with Kafka's messages; an unknown topic UNKNOWN_TOPIC_OR_PARTITION;
other resource types INVALID_REQUEST. Null or empty ``configuration_keys``
means all keys. Synonyms (when asked) run from the topic override through the
broker key's levels to the default. v3+ carries config_type (Kafka's
ConfigType ids); documentation is null for topics and brokers. Type 8 (BROKER_LOGGER, this
broker's id) lists root and kcompat's loggers with their levels
(``broker_loggers``); another type is INVALID_REQUEST with Kafka's generic
message.

Type 32 (GROUP) lists Kafka 4.4's non-internal group keys (``group_config``)
for any group name, existing or not: an override with source 8 (GROUP_CONFIG),
else the broker synonym's value (4 if set in the broker's config, else 5);
synonyms run from the override to the broker key (named as in Kafka:
``group.share.delivery.count.limit``) or, for keys without one, the key
itself. A ``kc.share.*`` key is listed where set or asked for by name. An
empty name is INVALID_REQUEST ("Group name must not be empty"). v3+ asked for
documentation gets the keys' descriptions.

Authorization (Kafka's): DESCRIBE_CONFIGS on the topic (a group: the group; a
broker or its loggers: the cluster), else TOPIC_ / GROUP_ /
CLUSTER_AUTHORIZATION_FAILED with Kafka's message and no configs, answered after
the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.config import broker_config_entries, broker_loggers, group_config
from kcompat.broker.config.dynamic_config import DynamicConfigError
from kcompat.broker.config.topic_config import TOPIC_CONFIGS, listed_keys
from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import (
    CONFIG_TYPE_IDS,
    INVALID_REQUEST_MESSAGE,
    NO_THROTTLE,
    OK,
    RESOURCE_BROKER,
    RESOURCE_BROKER_LOGGER,
    RESOURCE_GROUP,
    RESOURCE_TOPIC,
    SOURCE_IDS,
    check_broker_name,
    topic_config,
    topic_synonyms,
)
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.state import TopicError, check_topic_name


def _entry(ctx: RequestContext, name: str, value: str | None, source: int, read_only: bool,
           kind: str | int, synonyms: Sequence[tuple[str, str | None, int]] | None,
           documentation: str | None = None, sensitive: bool = False) -> Any:
    syn = tuple(ctx.build("DescribeConfigsSynonym", name=n, value=v, source=s)
                for n, v, s in synonyms or ())
    type_id = kind if isinstance(kind, int) else CONFIG_TYPE_IDS.get(kind, 0)
    return ctx.build(
        "DescribeConfigsResourceResult", name=name, value=value, read_only=read_only,
        config_source=source, is_sensitive=sensitive, synonyms=syn,
        config_type=type_id, documentation=documentation,
    )


def _wanted(resource: Any, keys: Any) -> list[str]:
    if not resource.configuration_keys:
        return list(keys)
    asked = set(resource.configuration_keys)
    return [k for k in keys if k in asked]


def _topic(ctx: RequestContext, resource: Any, synonyms: bool) -> list[Any]:
    name = resource.resource_name
    check_topic_name(name)
    meta = ctx.state.topics.get(name)
    if meta is None:  # Kafka 4.4 answers an empty message
        raise TopicError(ErrorCode.unknown_topic_or_partition, "")
    out = []
    for key in _wanted(resource, listed_keys(meta.configs)):
        value, source = topic_config(ctx.state, key, meta.configs)
        syn = topic_synonyms(ctx.state, key, meta.configs) if synonyms else None
        out.append(_entry(ctx, key, value, source, False, TOPIC_CONFIGS[key].type, syn))
    return out


def _broker(ctx: RequestContext, resource: Any, synonyms: bool) -> list[Any]:
    state = ctx.state
    check_broker_name(state, resource.resource_name, allow_empty=True)
    asked = resource.configuration_keys or None
    if resource.resource_name == "":
        entries = broker_config_entries.describe_cluster_default(state.broker_configs, asked)
    else:
        entries = broker_config_entries.describe_broker(
            state.config, state.broker_configs, state.node_id, state.advertised_port, asked)
    return [_entry(ctx, e.name, e.value, e.source, e.read_only, e.type_id,
                   e.synonyms if synonyms else None, sensitive=e.sensitive)
            for e in entries]


def _broker_logger(ctx: RequestContext, resource: Any) -> list[Any]:
    try:
        broker_loggers.check_describe_name(resource.resource_name, ctx.state.node_id)
    except DynamicConfigError as e:
        raise TopicError(e.code, e.message) from None
    return [_entry(ctx, name, level, broker_loggers.SOURCE_DYNAMIC_BROKER_LOGGER, False, 0, None)
            for name, level in broker_loggers.describe(resource.configuration_keys or None)]


def _group(ctx: RequestContext, resource: Any, synonyms: bool, docs: bool) -> list[Any]:
    if not resource.resource_name:
        raise TopicError(ErrorCode.invalid_request, "Group name must not be empty")
    overrides = ctx.state.group_configs.get(resource.resource_name, {})
    config = ctx.state.config
    out = []
    for key in group_config.listed_keys(overrides, resource.configuration_keys):
        value, source = group_config.effective(key, overrides, config)
        syn = None
        if synonyms:
            syn = [(n, v, SOURCE_IDS[s]) for n, v, s in
                   group_config.synonyms(key, overrides, config)]
        doc = group_config.DOCS.get(key) if docs else None
        out.append(_entry(ctx, key, group_config.render(key, value), SOURCE_IDS[source], False,
                          group_config.GROUP_CONFIGS[key].type, syn, doc))
    return out


def _describe(ctx: RequestContext, resource: Any, synonyms: bool, docs: bool) -> Any:
    code: ErrorCode = OK
    message: str | None = ""  # Kafka 4.4's message of a resource described: empty, not null
    configs: list[Any] = []
    denied = _authz.config_resource_denied(ctx, _authz.Op.DESCRIBE_CONFIGS,
                                           resource.resource_type, resource.resource_name)
    try:
        if denied is not None:
            raise TopicError(denied, _authz.MESSAGES[denied])
        if resource.resource_type == RESOURCE_TOPIC:
            configs = _topic(ctx, resource, synonyms)
        elif resource.resource_type == RESOURCE_GROUP:
            configs = _group(ctx, resource, synonyms, docs)
        elif resource.resource_type == RESOURCE_BROKER:
            configs = _broker(ctx, resource, synonyms)
        elif resource.resource_type == RESOURCE_BROKER_LOGGER:
            configs = _broker_logger(ctx, resource)
        else:  # Kafka answers INVALID_REQUEST's own message
            raise TopicError(ErrorCode.invalid_request, INVALID_REQUEST_MESSAGE)
    except TopicError as e:
        code, message, configs = e.code, e.message, []
    return ctx.build(
        "DescribeConfigsResult", error_code=code, error_message=message,
        resource_type=resource.resource_type, resource_name=resource.resource_name,
        configs=tuple(configs),
    )


async def handle(ctx: RequestContext, request: Any) -> Any:
    synonyms = bool(request.include_synonyms)
    docs = bool(getattr(request, "include_documentation", False))
    found = [_describe(ctx, r, synonyms, docs) for r in request.resources]
    # Kafka answers the resources denied after the others
    results = tuple(sorted(found, key=lambda r: r.error_code in _authz.MESSAGES))
    return ctx.response(throttle_time=NO_THROTTLE, results=results)
