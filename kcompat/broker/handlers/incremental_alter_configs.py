"""IncrementalAlterConfigs (key 44), versions 0-1.

Quirks: operations are SET=0, DELETE=1, APPEND=2, SUBTRACT=3 on a TOPIC's
override set; APPEND/SUBTRACT apply to list keys only (INVALID_CONFIG
otherwise, as Kafka 4.4 answers) and start from the key's effective value when
the topic has no override. DELETE of a key the topic does not set, known or
not, changes nothing. The configs are checked before the topic: an unknown
key or bad value is INVALID_CONFIG even for a topic that does not exist
(then UNKNOWN_TOPIC_OR_PARTITION), as Kafka 4.4's controller answers. A key named twice in one resource, a null value for
anything but DELETE, or an unknown operation is INVALID_REQUEST; an unknown key
or bad value INVALID_CONFIG. confluent-kafka's ``incremental_alter_configs``
uses this API, kafka-python's ``alter_configs`` does not. A BROKER resource
("" the cluster-wide default, or this broker's id) changes that level's
dynamic broker configs (``dynamic_config``), with Kafka's broker-side request
checks and messages: duplicates, nulls, unknown operations INVALID_REQUEST;
APPEND / SUBTRACT on a non-list key INVALID_CONFIG (a list starts from the
level's value, else Kafka's default); then the whole new level is checked as
AlterConfigs checks it. A BROKER_LOGGER resource (8, this broker's id) sets
(SET) or hands back to the parent (DELETE) a logger's level here only
(``broker_loggers``); another type is INVALID_REQUEST ("Unknown resource
type 3").
GROUP resources (32) change a group's config overrides (``group_config``),
whether or not the group exists; "" is INVALID_REQUEST ("Default group
resources are not allowed."); DELETE of an unknown key is a no-op; APPEND /
SUBTRACT on a non-list key is INVALID_CONFIG ("Can't APPEND to key k because
its type is not LIST."), Kafka's answers for groups.
``validate_only`` changes nothing.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.config import broker_loggers, dynamic_config
from kcompat.broker.config.configdef import ConfigError
from kcompat.broker.config.group_config import GROUP_CONFIGS, GroupConfigError, parse_value
from kcompat.broker.config.group_config import effective as group_effective
from kcompat.broker.config.topic_config import TOPIC_CONFIGS, effective
from kcompat.broker.handlers._common import (
    NO_THROTTLE,
    RESOURCE_BROKER,
    RESOURCE_BROKER_LOGGER,
    RESOURCE_GROUP,
    RESOURCE_TOPIC,
    alter_results,
    duplicates,
)
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.state import TopicError

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}


def _check_ops(configs: Any, group: bool = False) -> None:
    """Kafka's request checks; a GROUP resource's messages name keys only."""
    dups = duplicates(c.name for c in configs)
    if dups:
        listed = "" if group else f" : {','.join(sorted(dups))}"
        raise TopicError(ErrorCode.invalid_request, f"Error due to duplicate config keys{listed}")
    for c in configs:
        if c.config_operation not in _OP_NAMES:
            raise TopicError(ErrorCode.invalid_request,
                             f"Unknown config operation {c.config_operation} for {c.name}")
    nulls = [c.name if group else f"{_OP_NAMES[c.config_operation]}:{c.name}" for c in configs
             if c.value is None and c.config_operation != DELETE]
    if nulls:
        raise TopicError(ErrorCode.invalid_request,
                         f"Null value not supported for : {','.join(nulls)}")


def _apply(ctx: RequestContext, overrides: dict[str, Any], op: Any) -> None:
    name, kind = op.name, op.config_operation
    if kind == DELETE:  # of a key the topic does not set, or no topic key: nothing to do
        overrides.pop(name, None)
        return
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        raise TopicError(ErrorCode.invalid_config, f"Unknown topic config name: {name}")
    if kind == SET:
        overrides[name] = op.value
    else:
        verb = "append" if kind == APPEND else "subtract"
        if definition.type != "list":
            raise TopicError(ErrorCode.invalid_config,
                             f"Config value {verb} is not allowed for config key: {name}")
        try:
            current = definition.parse(effective(name, overrides, ctx.state.broker_defaults)[0])
            items = definition.parse(op.value)
        except ConfigError as e:
            raise TopicError(ErrorCode.invalid_config, str(e)) from None
        if kind == APPEND:
            overrides[name] = current + [v for v in items if v not in current]
        else:
            overrides[name] = [v for v in current if v not in items]


def _apply_group(ctx: RequestContext, overrides: dict[str, Any], op: Any) -> None:
    name, kind = op.name, op.config_operation
    if kind == SET:
        overrides[name] = op.value
    elif kind == DELETE:
        overrides.pop(name, None)
    else:
        definition = GROUP_CONFIGS.get(name)
        if definition is None:
            raise TopicError(ErrorCode.invalid_config, f"Unknown group config name: {name}")
        if definition.type != "list":
            raise TopicError(ErrorCode.invalid_config,
                             f"Can't {_OP_NAMES[kind]} to key {name} because its type is not LIST.")
        try:
            current = list(group_effective(name, overrides, ctx.state.config)[0] or [])
            items = parse_value(name, op.value)
        except GroupConfigError as e:
            raise TopicError(ErrorCode.invalid_config, e.message) from None
        if kind == APPEND:
            overrides[name] = current + [v for v in items if v not in current]
        else:
            overrides[name] = [v for v in current if v not in items]


def _alter_group(ctx: RequestContext, resource: Any) -> dict[str, Any]:
    overrides = dict(ctx.state.group_configs.get(resource.resource_name, {}))
    for op in resource.configs:
        _apply_group(ctx, overrides, op)
    return ctx.state.set_group_configs(resource.resource_name, overrides)


def _alter_broker(ctx: RequestContext, resource: Any) -> dict[str, Any]:
    name = resource.resource_name
    ops = [(c.name, c.config_operation, c.value) for c in resource.configs]
    try:
        dynamic_config.check_ops(ops)
        dynamic_config.check_alter_name(name, ctx.state.node_id)
        configs = dynamic_config.apply_ops(ctx.state.broker_configs.get(name, {}), ops)
    except dynamic_config.DynamicConfigError as e:
        raise TopicError(e.code, e.message) from None
    return ctx.state.set_broker_configs(name, configs)


def _alter_loggers(ctx: RequestContext, resource: Any, validate_only: bool) -> None:
    ops = [(c.name, c.config_operation, c.value) for c in resource.configs]
    try:
        broker_loggers.alter(resource.resource_name, ctx.state.node_id, ops, validate_only)
    except dynamic_config.DynamicConfigError as e:
        raise TopicError(e.code, e.message) from None


def _alter(ctx: RequestContext, resource: Any, validate_only: bool) -> dict[str, Any] | None:
    if resource.resource_type == RESOURCE_BROKER:
        return _alter_broker(ctx, resource)
    if resource.resource_type == RESOURCE_BROKER_LOGGER:
        _alter_loggers(ctx, resource, validate_only)  # this broker only, as in Kafka
        return None
    _check_ops(resource.configs, group=resource.resource_type == RESOURCE_GROUP)
    if resource.resource_type == RESOURCE_GROUP:
        return _alter_group(ctx, resource)
    if resource.resource_type != RESOURCE_TOPIC:
        raise TopicError(ErrorCode.invalid_request,
                         f"Unknown resource type {resource.resource_type}")
    meta = ctx.state.topics.get(resource.resource_name)
    overrides = dict(meta.configs) if meta is not None else {}
    for op in resource.configs:  # the configs are checked before the topic, as in Kafka
        _apply(ctx, overrides, op)
    if meta is None:
        ctx.state.set_topic_configs(resource.resource_name, overrides)  # INVALID_CONFIG first
        raise TopicError(ErrorCode.unknown_topic_or_partition,
                         f"The topic '{resource.resource_name}' does not exist.")
    return ctx.state.set_topic_configs(meta.name, overrides)


async def handle(ctx: RequestContext, request: Any) -> Any:
    results = await alter_results(
        ctx, request, lambda c, r: _alter(c, r, bool(request.validate_only)))
    return ctx.response(throttle_time=NO_THROTTLE, responses=results)
