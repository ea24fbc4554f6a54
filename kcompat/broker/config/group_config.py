"""Group configs (ConfigResource type GROUP = 32): Kafka 4.4's ``GroupConfig``
(KIP-848, KIP-932, KIP-1071 streams, KIP-1191 dead-letter topics) plus
kcompat's ``kc.share.*`` keys (docs/extensions.md, "Share groups").

Theory of operation
-------------------
A group stores only the keys set on it (its overrides), in the metadata image
(``MetadataImage.group_configs``, record ``group_configs``), so they are
replicated, survive restart and need no group to exist. Every other key takes
its value from its broker synonym (``group.share.record.lock.duration.ms`` for
``share.record.lock.duration.ms``...; a dynamic broker config when one is
set, ``dynamic_config``) or its static default.

``validate_overrides`` checks a whole new override set as Kafka's
``GroupConfig.validate`` does: unknown names, then each value's type and
static range (Kafka's ``ConfigException`` wording), then the bounds the broker
sets (``share.record.lock.duration.ms must be in the range 15000 to 60000
inclusive.``), session timeout above heartbeat interval, and the DLQ topic
name. ``effective_group_config`` gives the service every key's value, an
override clamped into the broker's current bounds as Kafka 4.4's
``GroupConfig.evaluate`` does (a bound may have tightened since it was set).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol

from kcompat.broker.config.broker_config import BROKER_CONFIGS, BrokerConfig
from kcompat.broker.config.configdef import ConfigDef


class GroupConfigSource(Protocol):
    """What ``effective_group_config`` reads (``BrokerState``)."""

    config: BrokerConfig

    @property
    def group_configs(self) -> Mapping[str, Mapping[str, Any]]: ...


class GroupConfigError(ValueError):
    """A bad group config change; ``message`` is Kafka's INVALID_CONFIG text."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


_ISO_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?"
    r"(T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
    re.IGNORECASE,
)


def _duration_ns(text: str) -> int | None:
    """Nanoseconds of an ISO-8601 duration as Java's ``Duration.parse`` reads
    it (``PnDTnHnMn.nS``, signs allowed), or None if it is not one."""
    m = _ISO_DURATION.fullmatch(text)
    if m is None or m.group(3) == "T" or not any(m.group(i) for i in (2, 4, 5, 6)):
        return None
    days, hours, minutes, seconds = (int(m.group(i) or 0) for i in (2, 4, 5, 6))
    nanos = int((m.group(7) or "").ljust(9, "0"))
    if (m.group(6) or "").startswith("-"):
        nanos = -nanos
    total = (((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 10**9 + nanos
    return -total if m.group(1) == "-" else total


def duration_ms(text: str) -> int | None:
    """Milliseconds of a non-negative ISO-8601 duration, else None."""
    ns = _duration_ns(text)
    return None if ns is None or ns < 0 else ns // 10**6


def auto_offset_reset(value: str) -> tuple[str, int | None]:
    """``share.auto.offset.reset`` as (strategy, duration_ms): ("earliest",
    None), ("latest", None) or ("by_duration", ms before now)."""
    if value.startswith("by_duration:"):
        return "by_duration", duration_ms(value[len("by_duration:"):])
    return value, None


def _check_auto_offset_reset(value: Any) -> str | None:
    ok = value in ("earliest", "latest")
    if str(value).startswith("by_duration:"):
        ok = duration_ms(str(value)[len("by_duration:"):]) is not None
    if ok:
        return None
    return (f"Invalid value `{value}` for configuration share.auto.offset.reset. The value "
            "must be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.")


_D = ConfigDef
# Kafka's keys with their broker synonym (GroupConfig.ALL_GROUP_CONFIG_SYNONYMS)
GROUP_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        _D("consumer.session.timeout.ms", "int", 45000, minimum=1,
           broker_key="group.consumer.session.timeout.ms"),
        _D("consumer.heartbeat.interval.ms", "int", 5000, minimum=1,
           broker_key="group.consumer.heartbeat.interval.ms"),
        _D("consumer.assignment.interval.ms", "int", 1000, minimum=0,
           broker_key="group.consumer.assignment.interval.ms"),
        _D("consumer.assignor.offload.enable", "boolean", True,
           broker_key="group.consumer.assignor.offload.enable"),
        _D("share.session.timeout.ms", "int", 45000, minimum=1,
           broker_key="group.share.session.timeout.ms"),
        _D("share.heartbeat.interval.ms", "int", 5000, minimum=1,
           broker_key="group.share.heartbeat.interval.ms"),
        _D("share.record.lock.duration.ms", "int", 30000, minimum=1000,
           broker_key="group.share.record.lock.duration.ms"),
        _D("share.delivery.count.limit", "int", 5, minimum=2,
           broker_key="group.share.delivery.count.limit"),
        _D("share.partition.max.record.locks", "int", 2000, minimum=100,
           broker_key="group.share.partition.max.record.locks"),
        _D("share.auto.offset.reset", "string", "latest", check=_check_auto_offset_reset),
        _D("share.isolation.level", "string", "read_uncommitted",
           choices=("read_committed", "read_uncommitted")),
        _D("share.renew.acknowledge.enable", "boolean", True),
        _D("share.assignment.interval.ms", "int", 1000, minimum=0,
           broker_key="group.share.assignment.interval.ms"),
        _D("share.assignor.offload.enable", "boolean", True,
           broker_key="group.share.assignor.offload.enable"),
        _D("streams.session.timeout.ms", "int", 45000, minimum=1,
           broker_key="group.streams.session.timeout.ms"),
        _D("streams.heartbeat.interval.ms", "int", 5000, minimum=1,
           broker_key="group.streams.heartbeat.interval.ms"),
        _D("streams.num.standby.replicas", "int", 0, minimum=0,
           broker_key="group.streams.num.standby.replicas"),
        _D("streams.initial.rebalance.delay.ms", "int", 3000, minimum=0,
           broker_key="group.streams.initial.rebalance.delay.ms"),
        _D("streams.assignment.interval.ms", "int", 1000, minimum=0,
           broker_key="group.streams.assignment.interval.ms"),
        _D("streams.assignor.offload.enable", "boolean", True,
           broker_key="group.streams.assignor.offload.enable"),
        _D("streams.task.offset.interval.ms", "int", 60000, minimum=1,
           broker_key="group.streams.task.offset.interval.ms"),
        _D("streams.num.warmup.replicas", "int", 2, minimum=0,
           broker_key="group.streams.num.warmup.replicas"),
        _D("streams.rack.aware.assignment.tags", "list", [],
           broker_key="group.streams.rack.aware.assignment.tags"),
        _D("streams.acceptable.recovery.lag", "long", 10000, minimum=0,
           broker_key="group.streams.acceptable.recovery.lag"),
        _D("streams.assignor.name", "string", None, broker_key="group.streams.assignors"),
        _D("errors.deadletterqueue.topic.name", "string", ""),
        _D("errors.deadletterqueue.copy.record.enable", "boolean", False),
        # extensions (docs/extensions.md, "Share groups"): listed only where set or asked for
        _D("kc.share.ordering", "string", "none", choices=("none", "message-group")),
        _D("kc.share.redelivery.backoff.ms", "long", 0, minimum=0),  # 0: off
        _D("kc.share.redelivery.backoff.multiplier", "double", 2.0, minimum=1.0),
        _D("kc.share.redelivery.backoff.max.ms", "long", 30000, minimum=0),
    )
}
EXTENSION_PREFIX = "kc."
# Kafka's internal group configs: accepted, never listed by DescribeConfigs
INTERNAL_KEYS = frozenset({
    "consumer.assignor.offload.enable", "share.assignor.offload.enable",
    "streams.assignor.offload.enable", "streams.task.offset.interval.ms",
    "streams.num.warmup.replicas", "streams.acceptable.recovery.lag",
})
# key -> (broker key of the lowest, of the highest value a group may set)
BOUNDS: dict[str, tuple[str | None, str | None]] = {
    "consumer.heartbeat.interval.ms": ("group.consumer.min.heartbeat.interval.ms",
                                       "group.consumer.max.heartbeat.interval.ms"),
    "consumer.session.timeout.ms": ("group.consumer.min.session.timeout.ms",
                                    "group.consumer.max.session.timeout.ms"),
    "consumer.assignment.interval.ms": ("group.consumer.min.assignment.interval.ms",
                                        "group.consumer.max.assignment.interval.ms"),
    "share.heartbeat.interval.ms": ("group.share.min.heartbeat.interval.ms",
                                    "group.share.max.heartbeat.interval.ms"),
    "share.session.timeout.ms": ("group.share.min.session.timeout.ms",
                                 "group.share.max.session.timeout.ms"),
    "share.record.lock.duration.ms": ("group.share.min.record.lock.duration.ms",
                                      "group.share.max.record.lock.duration.ms"),
    "share.delivery.count.limit": ("group.share.min.delivery.count.limit",
                                   "group.share.max.delivery.count.limit"),
    "share.partition.max.record.locks": ("group.share.min.partition.max.record.locks",
                                         "group.share.max.partition.max.record.locks"),
    "share.assignment.interval.ms": ("group.share.min.assignment.interval.ms",
                                     "group.share.max.assignment.interval.ms"),
    "streams.heartbeat.interval.ms": ("group.streams.min.heartbeat.interval.ms",
                                      "group.streams.max.heartbeat.interval.ms"),
    "streams.session.timeout.ms": ("group.streams.min.session.timeout.ms",
                                   "group.streams.max.session.timeout.ms"),
    "streams.num.standby.replicas": (None, "group.streams.max.standby.replicas"),
    "streams.assignment.interval.ms": ("group.streams.min.assignment.interval.ms",
                                       "group.streams.max.assignment.interval.ms"),
    "streams.task.offset.interval.ms": ("group.streams.min.task.offset.interval.ms", None),
    "streams.num.warmup.replicas": (None, "group.streams.max.warmup.replicas"),
}
_SESSION_HEARTBEAT = (("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
                      ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
                      ("streams.session.timeout.ms", "streams.heartbeat.interval.ms"))


# -- parsing with Kafka's messages --------------------------------------------

def _typed(d: ConfigDef, text: str) -> Any:
    """``text`` as ``d``'s type (Kafka's ConfigDef.parseType, values trimmed)."""
    t = d.type
    if t == "boolean":
        if text.lower() not in ("true", "false"):
            raise ValueError("Expected value to be either true or false")
        return text.lower() == "true"
    if t == "list":
        return [x.strip() for x in text.split(",")] if text else []
    if t == "string":
        return text
    try:
        if t == "double":
            return float(text)
        value = int(text)
    except ValueError:
        raise ValueError(f"Not a number of type {t.upper()}") from None
    limit = 2**63 if t == "long" else 2**31
    if not -limit <= value < limit:
        raise ValueError(f"Not a number of type {t.upper()}")
    return value


def parse_value(key: str, raw: Any) -> Any:
    """One value of a known key, typed; GroupConfigError in Kafka's words."""
    d = GROUP_CONFIGS[key]
    text = (raw if isinstance(raw, str) else d.render(raw)).strip()
    try:
        value = _typed(d, text)
        if d.minimum is not None and value < d.minimum:
            low = d.minimum if d.type == "double" else int(d.minimum)
            raise ValueError(f"Value must be at least {low}")
        if d.choices is not None and value not in d.choices:
            raise ValueError(f"String must be one of: {', '.join(d.choices)}")
        problem = d.check(value) if d.check is not None else None
        if problem:
            raise ValueError(problem)
    except ValueError as e:
        raise GroupConfigError(f"Invalid value {text} for configuration {key}: {e}") from None
    return value


def validate_overrides(raw: Mapping[str, Any], config: BrokerConfig) -> dict[str, Any]:
    """A group's whole new override set, typed and checked as Kafka 4.4's
    ``GroupConfig.validate``; GroupConfigError with Kafka's message."""
    for key in raw:
        if key not in GROUP_CONFIGS:
            raise GroupConfigError(f"Unknown group config name: {key}")
    parsed = {key: parse_value(key, raw[key]) for key in GROUP_CONFIGS if key in raw}
    for key, (low_key, high_key) in BOUNDS.items():
        if key in parsed:
            _check_bounds(key, parsed[key], config, low_key, high_key)
    for session, heartbeat in _SESSION_HEARTBEAT:
        if session in parsed or heartbeat in parsed:
            if _broker_or_override(session, parsed, config) <= _broker_or_override(
                    heartbeat, parsed, config):
                raise GroupConfigError(f"{session} must be greater than {heartbeat}")
    if str(parsed.get("errors.deadletterqueue.topic.name", "")).startswith("__"):
        raise GroupConfigError(
            "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'")
    name = parsed.get("streams.assignor.name")
    registered = list(config["group.streams.assignors"])
    if name is not None and name not in registered:
        raise GroupConfigError(f"streams.assignor.name '{name}' is not a registered task "
                               f"assignor. Registered assignors are: [{', '.join(registered)}].")
    return parsed


def _check_bounds(key: str, value: int, config: BrokerConfig, low_key: str | None,
                  high_key: str | None) -> None:
    low = config[low_key] if low_key else None
    high = config[high_key] if high_key else None
    if low is not None and high is not None:
        if not low <= value <= high:
            raise GroupConfigError(f"{key} must be in the range {low} to {high} inclusive.")
    elif high is not None and value > high:
        raise GroupConfigError(f"{key} must be less than or equal to {high}")
    elif low is not None and value < low:
        raise GroupConfigError(f"{key} must be greater than or equal to {low}")


def _broker_or_override(key: str, overrides: Mapping[str, Any], config: BrokerConfig) -> Any:
    if key in overrides:
        return overrides[key]
    return _broker_value(key, config)[0]


# -- effective values -----------------------------------------------------------

def _broker_value(key: str, config: BrokerConfig) -> tuple[Any, str]:
    """(value, 'broker' | 'default') of a key the group does not set."""
    d = GROUP_CONFIGS[key]
    if d.broker_key is None:
        return d.default, "default"
    value = config[d.broker_key]
    if key == "streams.assignor.name":  # the first registered assignor
        value = value[0] if value else None
    if d.broker_key in config.dynamic_sources:  # a dynamic broker config
        return value, config.dynamic_sources[d.broker_key]
    return value, "broker" if d.broker_key in config.explicit else "default"


def clamp(key: str, value: Any, config: BrokerConfig) -> Any:
    """An override held inside the broker's current bounds (Kafka's evaluate)."""
    low_key, high_key = BOUNDS.get(key, (None, None))
    if low_key is not None and value < config[low_key]:
        return config[low_key]
    if high_key is not None and value > config[high_key]:
        return config[high_key]
    return value


def effective(key: str, overrides: Mapping[str, Any], config: BrokerConfig) -> tuple[Any, str]:
    """(value, source) of one key; source is 'group', 'broker' or 'default'.
    An override is reported as set (DescribeConfigs shows it unclamped)."""
    if key in overrides:
        return overrides[key], "group"
    return _broker_value(key, config)


def effective_group_config(state: GroupConfigSource, group_id: str) -> dict[str, Any]:
    """Every group config key's value for ``group_id``: its override (clamped
    into the broker's bounds), else the broker's value, else the default.
    ``share.auto.offset.reset`` stays a string (see ``auto_offset_reset``)."""
    overrides = state.group_configs.get(group_id, {})
    out = {}
    for key in GROUP_CONFIGS:
        value, source = effective(key, overrides, state.config)
        out[key] = clamp(key, value, state.config) if source == "group" else value
    return out


# -- DescribeConfigs ------------------------------------------------------------

def listed_keys(overrides: Mapping[str, Any], asked: Any) -> list[str]:
    """The keys DescribeConfigs lists: Kafka's non-internal keys (all, or
    those ``asked`` for), an extension key where set or asked for by name."""
    out = []
    for key in GROUP_CONFIGS:
        if asked:
            if key in asked:
                out.append(key)
        elif key.startswith(EXTENSION_PREFIX):
            if key in overrides:
                out.append(key)
        elif key not in INTERNAL_KEYS:
            out.append(key)
    return out


def render(key: str, value: Any) -> str | None:
    return None if value is None else GROUP_CONFIGS[key].render(value)


def synonyms(key: str, overrides: Mapping[str, Any], config: BrokerConfig
             ) -> list[tuple[str, str | None, str]]:
    """(name, value, source) from most to least specific, as Kafka lists
    them: the override, the broker key's dynamic value, its static value if
    set, its default."""
    d = GROUP_CONFIGS[key]
    out: list[tuple[str, str | None, str]] = []
    if key in overrides:
        out.append((key, render(key, overrides[key]), "group"))
    broker_key = d.broker_key
    if broker_key is None:
        out.append((key, render(key, d.default), "default"))
        return out
    broker_def = BROKER_CONFIGS[broker_key]
    if broker_key in config.dynamic_sources:
        out.append((broker_key, broker_def.render(config[broker_key]),
                    config.dynamic_sources[broker_key]))
    if broker_key in config.explicit:
        out.append((broker_key, broker_def.render(config.values[broker_key]), "broker"))
    out.append((broker_key, broker_def.render(broker_def.default), "default"))
    return out


DOCS: dict[str, str] = {
    "consumer.session.timeout.ms":
        "The timeout to detect client failures when using the consumer group protocol.",
    "consumer.heartbeat.interval.ms":
        "The heartbeat interval given to the members of a consumer group.",
    "consumer.assignment.interval.ms":
        "The interval between assignment updates for a consumer group.",
    "share.session.timeout.ms":
        "The timeout to detect client failures when using the share group protocol.",
    "share.heartbeat.interval.ms":
        "The heartbeat interval given to the members of a share group.",
    "share.record.lock.duration.ms":
        "The record acquisition lock duration in milliseconds for share groups.",
    "share.delivery.count.limit":
        "The maximum number of delivery attempts for a record delivered to a share group.",
    "share.partition.max.record.locks": "Share-group record lock limit per share-partition.",
    "share.auto.offset.reset":
        "The strategy to initialize the share-partition start offset. earliest, latest, or "
        "by_duration:<duration> (ISO8601, PnDTnHnMn.nS, not negative).",
    "share.isolation.level":
        "Controls how to read records written transactionally: read_committed or "
        "read_uncommitted.",
    "share.renew.acknowledge.enable":
        "Whether the renew acknowledge type is enabled for the share group.",
    "share.assignment.interval.ms": "The interval between assignment updates for a share group.",
    "streams.session.timeout.ms":
        "The timeout to detect client failures when using the streams group protocol.",
    "streams.heartbeat.interval.ms": "The heartbeat interval given to the members.",
    "streams.num.standby.replicas": "The number of standby replicas for each task.",
    "streams.initial.rebalance.delay.ms":
        "The amount of time the group coordinator will wait for more streams clients to join "
        "a new group before performing the first rebalance.",
    "streams.assignment.interval.ms":
        "The interval between assignment updates for a streams group.",
    "streams.rack.aware.assignment.tags":
        "List of client tag keys used to distribute standby replicas across Kafka Streams "
        "instances.",
    "streams.assignor.name": "The task assignor to use for this streams group.",
    "errors.deadletterqueue.topic.name":
        "The name of the topic to be used as the dead-letter queue (DLQ) topic for this share "
        "group. If blank (the default), the group does not have a DLQ topic.",
    "errors.deadletterqueue.copy.record.enable":
        "When writing onto the dead-letter queue topic, whether to copy the original record "
        "onto the DLQ topic, or just write a record containing the context information headers.",
    "kc.share.ordering":
        "kcompat: none, or message-group (records of one message group, header kc-group else "
        "the key, are handed out one at a time in offset order).",
    "kc.share.redelivery.backoff.ms":
        "kcompat: delay before a released or timed-out record is acquirable again (0: none).",
    "kc.share.redelivery.backoff.multiplier":
        "kcompat: factor of the redelivery backoff per further delivery attempt.",
    "kc.share.redelivery.backoff.max.ms": "kcompat: the largest redelivery backoff.",
}
