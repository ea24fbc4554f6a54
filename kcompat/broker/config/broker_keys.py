"""Apache Kafka's broker config keys: what each is and how Kafka checks a value.

Theory of operation
-------------------
``kafka_broker_keys`` holds Kafka 4.4's broker keys as generated data (type,
default, dynamic update mode, synonyms, validator bounds). This module gives
them a shape (``KafkaKey``) and checks a dynamic value as Kafka's broker does
before it takes one (``parse``): the value is read as the key's ConfigDef
type, then held to its Range or its allowed strings, and a failure is Kafka's
``ConfigException`` text ("Invalid value abc for configuration
log.retention.ms: Not a number of type LONG"). Typed values use kcompat's
shapes (``int``, ``float``, ``bool``, ``list[str]``, ``str``), so a dynamic
value can stand in for a static one. ``java_set`` prints a set of names in the
order Java's ``HashSet.toString`` does, as Kafka's messages list them
(``java_order``: that order).

Three dynamic keys are not KafkaConfig's: the broker quota keys of Kafka's
``QuotaConfig`` (``leader.replication.throttled.rate``,
``follower.replication.throttled.rate``,
``replica.alter.log.dirs.io.max.bytes.per.second``; LONG, at least 0, Kafka's
default ``Long.MAX_VALUE``: unlimited), which Kafka's ``DynamicConfig.Broker``
defines ahead of KafkaConfig's dynamic keys — so they are checked first. A
broker lists one only while a dynamic level sets it, with no DEFAULT_CONFIG
synonym (its default is not KafkaConfig's); ``CONFIG_DEF`` is KafkaConfig's
keys alone, what Kafka looks a key up in to APPEND to it or to type a
listener-prefixed key it describes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kcompat.broker.config.kafka_broker_keys import ROWS

LISTENER_PREFIX = "listener.name."
# Kafka's DescribeConfigsResponse.ConfigType ids by ConfigDef type name
TYPE_IDS = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6,
            "LIST": 7, "CLASS": 8, "PASSWORD": 9}
READ_ONLY, PER_BROKER, CLUSTER_WIDE = "read-only", "per-broker", "cluster-wide"
_LIMITS = {"SHORT": 2**15, "INT": 2**31, "LONG": 2**63}


class InvalidValue(ValueError):
    """A value Kafka's ConfigDef refuses; ``message`` is Kafka's text."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class KafkaKey:
    name: str
    type: str  # Kafka's ConfigDef.Type name: INT, LONG, LIST, PASSWORD...
    default: str | None  # as a broker renders it; None: null
    mode: str  # READ_ONLY, PER_BROKER or CLUSTER_WIDE
    listed: bool  # False: one of Kafka's internal keys
    sensitive: bool
    synonyms: tuple[str, ...]  # most specific first, the key among them
    minimum: str | None  # Range bounds, as Java prints them
    maximum: str | None
    choices: tuple[str, ...] | None
    non_empty: bool  # a LIST that must not be empty
    listener_only: bool  # dynamic only as listener.name.<listener>.<key>

    @property
    def dynamic(self) -> bool:
        return self.mode != READ_ONLY

    @property
    def type_id(self) -> int:
        return TYPE_IDS.get(self.type, 0)


def _key(row: tuple[Any, ...]) -> KafkaKey:
    name, kind, default, mode, listed, sensitive, synonyms, low, high, choices, non_empty, \
        listener_only = row
    return KafkaKey(name, kind, default, mode, listed, sensitive, tuple(synonyms) or (name,),
                    low, high, tuple(choices) if choices else None, non_empty, listener_only)


CONFIG_DEF: dict[str, KafkaKey] = {row[0]: _key(row) for row in ROWS}  # type: ignore[misc]
# Kafka's broker quota keys (QuotaConfig's broker quota configs; see the header):
# dynamic at both levels, LONG, Range atLeast(0); no default shown (None)
QUOTA_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate",
              "replica.alter.log.dirs.io.max.bytes.per.second")
KEYS: dict[str, KafkaKey] = {
    **{name: KafkaKey(name, "LONG", None, CLUSTER_WIDE, False, False, (name,), "0", None,
                      None, False, False) for name in QUOTA_KEYS},
    **CONFIG_DEF,
}
_ORDER = {name: i for i, name in enumerate(KEYS)}


def _listener_key(name: str) -> str | None:
    if not name.startswith(LISTENER_PREFIX):
        return None
    _, _, key = name[len(LISTENER_PREFIX):].partition(".")
    return key


def base_key(name: str) -> KafkaKey | None:
    """The key itself, or for ``listener.name.<l>.<key>`` the listener's key
    (as Kafka's type check of a dynamic change reads it)."""
    if name in KEYS:
        return KEYS[name]
    key = _listener_key(name)
    return KEYS.get(key) if key is not None else None


def synonyms(name: str) -> tuple[str, ...]:
    """The names Kafka's broker looks ``name`` up by, most specific first: a
    key's synonyms; for ``listener.name.<l>.<key>`` itself, ``<key>``, and
    ``<key>`` less its first part (a SASL mechanism's: ``plain.sasl.jaas.config``
    -> ``sasl.jaas.config``) if it has one."""
    key = _listener_key(name)
    if name in KEYS or key is None:
        return KEYS[name].synonyms if name in KEYS else (name,)
    mechanism = key[key.find(".") + 1:]
    return (name, key) if mechanism == key else (name, key, mechanism)


def described_key(name: str) -> KafkaKey | None:
    """The key whose type a broker's DescribeConfigs gives ``name``: the key
    itself, else the first of its synonyms KafkaConfig defines."""
    if name in KEYS:
        return KEYS[name]
    return next((CONFIG_DEF[n] for n in synonyms(name) if n in CONFIG_DEF), None)


def definition_order(names: Any) -> list[str]:
    """Known keys in the order Kafka's ConfigDef defines them (its check order)."""
    return sorted((n for n in names if n in KEYS), key=_ORDER.__getitem__)


# -- values ----------------------------------------------------------------------

def java_double(value: float) -> str:
    """``Double.toString``: 2.0, 0.5, 1.0E20."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        text = repr(float(value))
        return text if "e" not in text else f"{value:.1f}"
    mantissa, _, exponent = f"{value:.16E}".partition("E")
    mantissa = mantissa.rstrip("0")
    mantissa = mantissa + "0" if mantissa.endswith(".") else mantissa
    return f"{mantissa}E{int(exponent)}"


def _typed(key: KafkaKey, text: str) -> Any:
    t = key.type
    if t == "BOOLEAN":
        if text.lower() not in ("true", "false"):
            raise InvalidValue("Expected value to be either true or false")
        return text.lower() == "true"
    if t == "LIST":
        return [x.strip() for x in text.split(",")] if text else []
    if "_" in text and t in ("SHORT", "INT", "LONG", "DOUBLE"):  # Python reads 1_000, Java not
        raise InvalidValue(f"Not a number of type {t}")
    if t in _LIMITS:
        try:
            value = int(text)
        except ValueError:
            raise InvalidValue(f"Not a number of type {t}") from None
        if not -_LIMITS[t] <= value < _LIMITS[t]:
            raise InvalidValue(f"Not a number of type {t}")
        return value
    if t == "DOUBLE":
        try:
            return float(text)
        except ValueError:
            raise InvalidValue(f"Not a number of type {t}") from None
    return text


def _check(key: KafkaKey, value: Any) -> None:
    if key.name == "compression.gzip.level":
        if not (1 <= value <= 9 or value == -1):
            raise InvalidValue("Value must be between 1 and 9 or equal to -1")
        return
    if key.minimum is not None and value < float(key.minimum):
        raise InvalidValue(f"Value must be at least {key.minimum}")
    if key.maximum is not None and value > float(key.maximum):
        raise InvalidValue(f"Value must be no more than {key.maximum}")
    if key.choices is not None:
        items = value if isinstance(value, list) else [value]
        if any(v not in key.choices for v in items):
            raise InvalidValue(f"String must be one of: {', '.join(key.choices)}")


def render(key: KafkaKey, value: Any) -> str:
    """A typed value as Kafka prints it in a message."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return java_double(value)
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


def parse(name: str, raw: str) -> Any:
    """A dynamic value of a Kafka key, typed and checked; InvalidValue with
    Kafka's message naming the key."""
    key = KEYS[name]
    text = raw.strip()
    try:
        value = _typed(key, text)
    except InvalidValue as e:
        raise InvalidValue(f"Invalid value {raw} for configuration {name}: {e.message}") from None
    try:
        _check(key, value)
    except InvalidValue as e:
        raise InvalidValue(f"Invalid value {render(key, value)} for configuration {name}: "
                           f"{e.message}") from None
    return value


# -- Java's HashSet order, for the lists in Kafka's messages ---------------------------

def _java_hash(text: str) -> int:
    h = 0
    for unit in text.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return h


def java_set(names: Any) -> str:
    """``[a, b]`` in the iteration order of a ``java.util.HashSet`` of ``names``."""
    return "[" + ", ".join(java_order(names)) + "]"


def java_order(names: Any) -> list[str]:
    """``names`` in the iteration order of a ``java.util.HashSet`` of them."""
    items = sorted(set(names))
    capacity = 16
    while len(items) > capacity * 0.75:
        capacity *= 2

    def bucket(name: str) -> int:
        h = _java_hash(name)
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(items, key=bucket)
