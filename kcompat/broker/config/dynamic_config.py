"""Dynamic broker configs: Kafka's cluster-wide defaults and per-broker values.

Theory of operation
-------------------
Kafka (KIP-226, kept in the KRaft metadata log) lets an admin change some
broker keys while brokers run, at two levels: the cluster-wide default
(BROKER resource "") and one broker ("<node id>"). Here each level is a set of
raw strings in the metadata image (``MetadataImage.broker_configs``, record
``broker_configs``: a level's whole new set), so a change is replicated,
survives restart and reaches every broker in log order. A broker's effective
value of a key is its own level's, else the cluster default's, else its
static config (``BrokerConfig``); ``overlay`` computes the typed values of the
dynamic levels that apply to one broker, a listener's own values
(``listener.name.<l>.<key>``, read by ``BrokerConfig.for_listener``) among them.

``validate`` checks a level's whole new set as Kafka's broker does before it
forwards a change to its controller, in Kafka's order: keys Kafka cannot
change at run time ("Cannot update these configs dynamically"), security keys
settable per listener only, each known key's type and bounds (in Kafka's
definition order; a listener-prefixed key as its base key; Kafka's broker
quota keys such as ``leader.replication.throttled.rate`` first), per-broker
keys at the cluster level (a listener-prefixed key is one, except Kafka's
three cluster-level listener keys: ``max.connections``,
``max.connection.creation.rate``, ``num.network.threads``), then the
reconfiguration checks Kafka runs against the current value (thread counts may
at most double or halve; the cleaner's dedupe buffer per thread). Every
failure is INVALID_REQUEST with Kafka's message; keys Kafka does not know are
accepted and stored, as Kafka does. ``check_cluster_min_isr`` is the
controller's check: the cluster-level ``min.insync.replicas`` (which Kafka 4
writes when a cluster is formatted, ELR being on) cannot be removed.
``apply_ops`` is IncrementalAlterConfigs on one level's set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.config.broker_config import BROKER_CONFIGS, BrokerConfig
from kcompat.broker.config.broker_keys import (
    CONFIG_DEF,
    KEYS,
    LISTENER_PREFIX,
    PER_BROKER,
    InvalidValue,
    base_key,
    definition_order,
    java_order,
    java_set,
    parse,
)

CLUSTER = ""  # the resource name of the cluster-wide default
MIN_ISR = "min.insync.replicas"
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
THREAD_KEYS = ("num.io.threads", "num.network.threads", "num.replica.fetchers",
               "num.recovery.threads.per.data.dir", "background.threads")
_MB = 1024 * 1024


class DynamicConfigError(Exception):
    """A refused change: Kafka's error code and message."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _refuse(message: str, code: ErrorCode = ErrorCode.invalid_request) -> DynamicConfigError:
    return DynamicConfigError(code, message)


def check_alter_name(name: str, node_id: int) -> None:
    """An alter's BROKER resource: "" or this broker's id (Kafka's messages)."""
    if name == CLUSTER:
        return
    try:
        target = int(name)
    except ValueError:
        raise _refuse(f"Node id must be an integer, but it is: {name}") from None
    if target != node_id:
        raise _refuse(f"Unexpected broker id, expected {node_id}, but received {name}")


def check_ops(ops: Iterable[tuple[str, int, str | None]]) -> None:
    """IncrementalAlterConfigs' request checks for a BROKER resource."""
    ops = list(ops)
    names = [name for name, _, _ in ops]
    if len(set(names)) != len(names):
        raise _refuse("Error due to duplicate config keys")
    nulls = [name for name, op, value in ops if value is None and op != DELETE]
    if nulls:
        raise _refuse(f"Null value not supported for : {','.join(nulls)}")
    for _, op, _ in ops:
        if op not in (SET, DELETE, APPEND, SUBTRACT):
            raise _refuse(f"Unknown operations type {op}")


def apply_ops(stored: Mapping[str, str], ops: Iterable[tuple[str, int, str | None]]
              ) -> dict[str, str]:
    """One level's new set after SET / DELETE / APPEND / SUBTRACT; a list
    operation starts from the level's value, else Kafka's default."""
    out = dict(stored)
    for name, op, value in ops:
        if op == SET:
            out[name] = str(value)
        elif op == DELETE:
            out.pop(name, None)
        else:
            key = CONFIG_DEF.get(name)  # Kafka looks it up in KafkaConfig's keys
            if key is None:
                raise _refuse(f"Unknown config name: {name}", ErrorCode.invalid_config)
            if key.type != "LIST":
                verb = "append" if op == APPEND else "subtract"
                raise _refuse(f"Config value {verb} is not allowed for config key: {name}",
                              ErrorCode.invalid_config)
            start = out.get(name, key.default or "")
            current = [x.strip() for x in start.split(",") if x.strip()]
            items = [x.strip() for x in str(value).split(",") if x.strip()]
            if op == APPEND:
                current += [x for x in items if x not in current]
            else:
                current = [x for x in current if x not in items]
            out[name] = ",".join(current)
    return out


#: listener-prefixed keys Kafka takes at the cluster level too (DynamicBrokerConfig's
#: cluster-level listener configs); every other ``listener.name.<l>.<key>`` is per broker
CLUSTER_LEVEL_LISTENER_KEYS = ("max.connections", "max.connection.creation.rate",
                               "num.network.threads")


def listener_key(name: str) -> str | None:
    """``<key>`` of ``listener.name.<l>.<key>`` (``<l>`` without a dot, maybe
    empty, as Kafka's pattern reads it); None for any other name."""
    if not name.startswith(LISTENER_PREFIX):
        return None
    listener, dot, key = name[len(LISTENER_PREFIX):].partition(".")
    return key if dot else None


def _per_broker_only(name: str) -> bool:
    prefixed = listener_key(name)
    if prefixed is not None:
        return prefixed not in CLUSTER_LEVEL_LISTENER_KEYS
    key = KEYS.get(name)
    return key is not None and key.mode == PER_BROKER


def validate(name: str, configs: Mapping[str, str], current: Callable[[str], Any]) -> None:
    """A level's whole new set, checked as Kafka's broker does; ``current``
    gives this broker's effective value of a key (for the reconfiguration
    checks). DynamicConfigError otherwise."""
    fixed = [k for k in configs if k in KEYS and not KEYS[k].dynamic]
    if fixed:
        raise _refuse(f"Cannot update these configs dynamically: {java_set(fixed)}")
    bare = [k for k in configs if k in KEYS and KEYS[k].listener_only]
    if bare:
        raise _refuse("These security configs can be dynamically updated only per-listener "
                      f"using the listener prefix: {java_set(bare)}")
    typed = _typed(configs)
    if name == CLUSTER:
        per_broker = [k for k in configs if _per_broker_only(k)]
        if per_broker:
            raise _refuse("Cannot update these configs at default cluster level, broker id "
                          f"must be specified: {java_set(per_broker)}")
    _check_reconfiguration(typed, current)


def _typed(configs: Mapping[str, str]) -> dict[str, Any]:
    """Kafka's type check, then the typed values of the unprefixed keys. Kafka
    checks each dynamic key in its definition order, a listener-prefixed one
    as its base key (of the two, the value later in Java's hash order of the
    names is the one checked)."""
    checked: dict[str, str] = {}
    for name in java_order(configs):
        base = base_key(name)
        if base is not None and base.dynamic:
            checked[base.name] = configs[name]
    try:
        for key in definition_order(checked):
            parse(key, checked[key])
        return {key: parse(key, configs[key]) for key in definition_order(configs)
                if checked[key] == configs[key]}
    except InvalidValue as e:
        raise _refuse(e.message) from None


def _check_reconfiguration(typed: Mapping[str, Any], current: Callable[[str], Any]) -> None:
    for key in THREAD_KEYS:
        if key not in typed or typed[key] == current(key):
            continue
        new, old = typed[key], int(current(key))
        problem = None
        if new < old // 2:
            problem = f"value should be at least half the current value {old}"
        elif new > old * 2:
            problem = f"value should not be greater than double the current value {old}"
        if problem:
            raise _refuse("Invalid value org.apache.kafka.common.config.ConfigException: "
                          f"Dynamic thread count update validation failed for {key}={new}, "
                          f"{problem} for configuration Invalid dynamic configuration")
    cleaner = ("log.cleaner.threads", "log.cleaner.dedupe.buffer.size")
    if any(k in typed for k in cleaner):
        threads, dedupe = (int(typed[k]) if k in typed else int(current(k)) for k in cleaner)
        if threads == 0:
            raise _refuse("/ by zero")
        if dedupe // threads < _MB:
            raise _refuse("requirement failed: log.cleaner.dedupe.buffer.size must be at "
                          "least 1MB per cleaner thread.")


def check_cluster_min_isr(name: str, stored: Mapping[str, str],
                          configs: Mapping[str, str]) -> None:
    """The controller's check of a cluster-level change (INVALID_CONFIG)."""
    if name == CLUSTER and MIN_ISR in stored and MIN_ISR not in configs:
        raise _refuse("Cluster-level min.insync.replicas cannot be removed while ELR is "
                      "enabled.", ErrorCode.invalid_config)


def overlay(levels: Mapping[str, Mapping[str, str]], node_id: int
            ) -> tuple[dict[str, Any], dict[str, str]]:
    """(typed values, source) of the dynamic keys that apply to ``node_id``:
    its own level over the cluster default; source "dynamic_broker" or
    "dynamic_default". A listener's own value of a key
    (``listener.name.<l>.<key>``) is typed as its key. Keys Kafka does not
    know, and values that no longer parse, do not apply."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for level, source in ((CLUSTER, "dynamic_default"), (str(node_id), "dynamic_broker")):
        for key, raw in levels.get(level, {}).items():
            base = KEYS.get(key) or (KEYS.get(listener_key(key) or "")
                                     if key.startswith(LISTENER_PREFIX) else None)
            if base is None:
                continue
            try:
                values[key] = parse(base.name, raw)
            except InvalidValue:
                continue
            sources[key] = source
    return values, sources


def current(config: BrokerConfig, key: str) -> Any:
    """This broker's effective value of a Kafka key: dynamic, else static (a
    key kcompat has), else Kafka's default (None if Kafka has none)."""
    if key in config.dynamic:
        return config.dynamic[key]
    if key in BROKER_CONFIGS:
        return config.values[key]
    kafka = KEYS.get(key)
    return parse(key, kafka.default) if kafka is not None and kafka.default is not None else None
