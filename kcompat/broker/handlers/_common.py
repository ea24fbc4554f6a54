"""Small helpers shared by handlers."""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.config.broker_keys import KEYS
from kcompat.broker.config.topic_config import TOPIC_CONFIGS, effective
from kcompat.broker.controller.admin import submit
from kcompat.broker.handlers._authz import config_resource_denied
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.state import BrokerState, TopicError
from kcompat.security.acl import Operation

NO_THROTTLE = datetime.timedelta(0)
OK = ErrorCode.none


def coordinator_error_response(ctx: Any, code: ErrorCode) -> Any:
    """The whole answer of a group API with one top-level error
    (NOT_COORDINATOR and friends, see ``GroupService.coordinator_error``)."""
    return ctx.response(throttle_time=NO_THROTTLE, error_code=code, generation_id=-1,
                        protocol_type=None, protocol_name="", leader="", member_id="",
                        members=(), assignment=b"", topics=(), skip_assignment=False)


def unknown_partition_error(state: BrokerState, topic: str, index: int) -> ErrorCode:
    """UNKNOWN_TOPIC_OR_PARTITION unless the metadata image has ``topic`` with a
    partition ``index`` (else OK), whichever brokers host it. The group and
    transaction APIs whose answer does not need the partition's log
    (OffsetCommit, TxnOffsetCommit, OffsetDelete, AddPartitionsToTxn) check
    this, as Kafka checks its metadata cache: a coordinator need not be a
    replica of the partitions it keeps offsets or transactions for. Leader-only
    APIs (Produce, Fetch, ListOffsets...) need the local replica instead
    (``BrokerState.partition``)."""
    meta = state.topics.get(topic)
    if meta is None or not 0 <= index < meta.partitions:
        return ErrorCode.unknown_topic_or_partition
    return OK


def ms_to_datetime(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


def datetime_to_ms(value: datetime.datetime | int | None) -> int:
    if value is None:
        return -1
    if isinstance(value, int):
        return value
    return int(value.timestamp() * 1000)


# -- admin helpers (topics, replica assignments, configs) --------------------

# Kafka's DescribeConfigsResponse.ConfigSource ids.
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT = 3
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
SOURCE_DYNAMIC_GROUP = 8  # GROUP_CONFIG
SOURCE_IDS = {"topic": SOURCE_DYNAMIC_TOPIC, "broker": SOURCE_STATIC_BROKER,
              "default": SOURCE_DEFAULT, "group": SOURCE_DYNAMIC_GROUP,
              "dynamic_broker": SOURCE_DYNAMIC_BROKER, "dynamic_default": SOURCE_DYNAMIC_DEFAULT}

# Kafka's DescribeConfigsResponse.ConfigType ids, by ConfigDef.type.
CONFIG_TYPE_IDS = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5,
                   "double": 6, "list": 7}

# ConfigResource.Type ids.
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
RESOURCE_GROUP = 32
# what Kafka answers with INVALID_REQUEST when it gives no message of its own
INVALID_REQUEST_MESSAGE = (
    "This most likely occurs because of a request being malformed by the client library or "
    "the message was sent to an incompatible broker. See the broker logs for more details.")


def request_timeout_s(request: Any, lowest: float, highest: float,
                      default_s: float = 30.0) -> float:
    """A request's ``timeout`` (kio: a timedelta; raw: ms) in seconds, within
    [``lowest``, ``highest``]; ``default_s`` when it has none."""
    timeout = getattr(request, "timeout", None)
    if timeout is None:
        return default_s
    seconds = (timeout.total_seconds() if isinstance(timeout, datetime.timedelta)
               else int(timeout) / 1000)
    return min(highest, max(lowest, seconds))


def own_endpoint(ctx: RequestContext) -> tuple[str, int]:
    """This broker's advertised host and port on the listener of ``ctx`` (a RequestContext)."""
    for name, host, port in ctx.state.endpoints:
        if name == ctx.listener:
            return host, port
    return advertised_host(ctx.state), ctx.state.advertised_port


def advertised_host(state: BrokerState) -> str:
    return str(state.config["advertised.host"] or state.config["host"])


def duplicates(names: Iterable[Any]) -> set[Any]:
    """The names that occur more than once."""
    counts = Counter(names)
    return {name for name, n in counts.items() if n > 1}


def null_config_check(configs: Iterable[Any]) -> dict[str, Any]:
    """``{name: value}`` of request configs; null values are INVALID_CONFIG as in Kafka."""
    nulls = [c.name for c in configs if c.value is None]
    if nulls:
        raise TopicError(ErrorCode.invalid_config,
                         f"Null value not supported for topic configs: {','.join(nulls)}")
    return {c.name: c.value for c in configs}


def topic_config(state: BrokerState, key: str, overrides: dict[str, Any]) -> tuple[str, int]:
    """(rendered effective value, Kafka config source id) of one topic key: a
    broker default comes from this broker's dynamic level, the cluster's, or
    the static config."""
    value, source = effective(key, overrides, state.broker_defaults)
    broker_key = TOPIC_CONFIGS[key].broker_key
    if source == "broker" and broker_key is not None:
        source = state.config.dynamic_sources.get(broker_key, "broker")
    return TOPIC_CONFIGS[key].render(value), SOURCE_IDS[source]


def topic_synonyms(
    state: BrokerState, key: str, overrides: dict[str, Any]
) -> list[tuple[str, str | None, int]]:
    """(name, value, source) from most to least specific, as Kafka lists synonyms:
    the topic's override, then the broker key's levels (this broker's dynamic
    value, the cluster's, the static config, Kafka's default) across the broker
    key's Kafka synonyms, less the entries before the broker key itself (so
    ``retention.ms`` with no broker value set has none). A key without a
    broker synonym has only its override."""
    definition = TOPIC_CONFIGS[key]
    out: list[tuple[str, str | None, int]] = []
    if key in overrides:
        out.append((key, definition.render(overrides[key]), SOURCE_DYNAMIC_TOPIC))
    broker_key = definition.broker_key
    if not broker_key:
        return out
    kafka = KEYS.get(broker_key)
    chain = kafka.synonyms if kafka is not None else (broker_key,)
    static = {k: definition.render(state.config.values[k]) for k in chain
              if k in state.config.explicit}
    defaults = {k: KEYS[k].default for k in chain if k in KEYS and KEYS[k].default is not None}
    levels: list[tuple[dict[str, Any], int]] = [
        (state.broker_configs.get(str(state.node_id), {}), SOURCE_DYNAMIC_BROKER),
        (state.broker_configs.get("", {}), SOURCE_DYNAMIC_DEFAULT),
        (static, SOURCE_STATIC_BROKER), (defaults, SOURCE_DEFAULT)]
    broker = [(n, values[n], source) for values, source in levels for n in chain if n in values]
    while broker and broker[0][0] != broker_key:
        broker.pop(0)
    return out + broker


def check_broker_name(state: BrokerState, name: str, allow_empty: bool) -> None:
    """Kafka's checks of a BROKER resource name in DescribeConfigs (INVALID_REQUEST)."""
    if name == "" and allow_empty:
        return
    try:
        broker_id = int(name)
    except ValueError:
        raise TopicError(ErrorCode.invalid_request,
                         f"Broker id must be an integer, but it is: {name}") from None
    if broker_id != state.node_id:
        expected = f"{state.node_id} or empty string" if allow_empty else state.node_id
        raise TopicError(ErrorCode.invalid_request,
                         f"Unexpected broker id, expected {expected}, but received {name}")


AlterOne = Callable[[Any, Any], dict[str, Any] | None]
_ALTER_DENIED_MESSAGES = {ErrorCode.topic_authorization_failed: "Topic authorization failed.",
                          ErrorCode.group_authorization_failed: "Group authorization failed."}


async def alter_results(ctx: Any, request: Any, alter: AlterOne) -> tuple[Any, ...]:
    """Run ``alter(ctx, resource)`` per resource of an (Incremental)
    AlterConfigs request the principal may ALTER_CONFIGS (else Kafka's
    TOPIC_ / GROUP_ / CLUSTER_AUTHORIZATION_FAILED, ``_authz``); TopicError
    becomes that resource's error. The
    validated change ``alter`` returns is then committed through the
    controller (``controller.admin.submit``) unless the request only validates."""
    dups = duplicates((r.resource_type, r.resource_name) for r in request.resources)
    out, reported = [], set()
    for resource in request.resources:
        key = (resource.resource_type, resource.resource_name)
        code, message = OK, None
        if key in dups:
            if key in reported:
                continue
            reported.add(key)
            code, message = ErrorCode.invalid_request, "Duplicate resource."
        elif (denied := config_resource_denied(ctx, Operation.ALTER_CONFIGS,
                                               resource.resource_type,
                                               resource.resource_name)) is not None:
            # Kafka 4.4: its controller's message for a topic or group, none for a broker
            code = denied
            message = _ALTER_DENIED_MESSAGES.get(denied)
        else:
            try:
                change = alter(ctx, resource)
                if change is not None and not request.validate_only:
                    await submit(ctx.controller, change)
            except TopicError as e:
                code, message = e.code, e.message
        out.append(ctx.build(
            "AlterConfigsResourceResponse", error_code=code, error_message=message,
            resource_type=resource.resource_type, resource_name=resource.resource_name,
        ))
    return tuple(out)


def fenced_for_version(code: ErrorCode, version: int, first_with_fenced: int) -> ErrorCode:
    """PRODUCER_FENCED (KIP-588) reaches only clients whose request version knows
    it; older versions get INVALID_PRODUCER_EPOCH, as Kafka answers."""
    if code == ErrorCode.producer_fenced and version < first_with_fenced:
        return ErrorCode.invalid_producer_epoch
    return code
