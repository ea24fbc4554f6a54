"""What DescribeConfigs of a BROKER resource lists, as Kafka 4.4 lists it.

Theory of operation
-------------------
A broker ("<node id>") lists every key Kafka's broker lists (``broker_keys``),
kcompat's own keys (``kcompat.*``, ``admin.*``, ``host``, ``port``,
``advertised.host``, ``kc.*``; read-only), and every key stored at a dynamic
level that is neither (a key Kafka does not know, a listener-prefixed key,
one of Kafka's internal keys). A key's synonyms are the levels that set it,
as Kafka orders them: level by level — this broker's dynamic value
(DYNAMIC_BROKER_CONFIG), the cluster default (DYNAMIC_DEFAULT_BROKER_CONFIG),
the static config (STATIC_BROKER_CONFIG: set in kcompat's file, flags or env,
or derived by kcompat: ``listeners`` from host and port, ``node.id``,
``log.dirs``...), Kafka's default (DEFAULT_CONFIG) — and within a level the
key's Kafka synonyms (``log.retention.ms``, ``.minutes``, ``.hours``; for a
listener-prefixed key, its base key and that less its first part), less
the entries before the first one of the key itself (so ``log.retention.ms``
with no value of its own has none, as in Kafka). The entry's source is its
first synonym's (else DEFAULT_CONFIG); its value the key's own effective value. A kcompat key left at a default
equal to Kafka's shows Kafka's rendering. Sensitive values (passwords, keys
Kafka does not know) are null. Kafka's broker quota keys
(``leader.replication.throttled.rate``...) are listed only while a level sets
them; a listener-prefixed one is a key Kafka does not know here. The authorizer's
keys (``super.users``, ``allow.everyone.if.no.acl.found``), which KafkaConfig does
not define, are listed only when set, as Kafka lists a key of its properties it
cannot type: sensitive, null, STATIC_BROKER_CONFIG. The cluster default ("") lists only its stored
keys, each with its one synonym.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kcompat.broker.config.broker_config import BROKER_CONFIGS, BrokerConfig
from kcompat.broker.config.broker_keys import KEYS, TYPE_IDS, described_key, synonyms
from kcompat.broker.config.dynamic_config import CLUSTER

SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT = 3
SOURCE_STATIC = 4
SOURCE_DEFAULT = 5
_KCOMPAT_TYPES = {"boolean": "BOOLEAN", "string": "STRING", "int": "INT", "short": "SHORT",
                  "long": "LONG", "double": "DOUBLE", "list": "LIST", "password": "PASSWORD"}
_DEFAULTS = {name: key.default for name, key in KEYS.items() if key.default is not None}

Synonym = tuple[str, str | None, int]
#: StandardAuthorizer's keys: Kafka's broker takes them from its properties
#: without defining them, so it describes them as keys it does not know
AUTHORIZER_KEYS = ("super.users", "allow.everyone.if.no.acl.found")


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    value: str | None
    source: int
    read_only: bool
    sensitive: bool
    type_id: int
    synonyms: tuple[Synonym, ...]


def static_values(config: BrokerConfig, node_id: int, port: int) -> dict[str, str]:
    """Kafka keys at STATIC_BROKER_CONFIG: those kcompat's config sets (or
    whose kcompat default is not Kafka's) and those kcompat derives."""
    out = {}
    for key, definition in BROKER_CONFIGS.items():
        if key not in KEYS:
            continue
        text = definition.render(config.values[key])
        if key in config.explicit or (key in _DEFAULTS and text != _DEFAULTS[key]):
            out[key] = text
    out.update({k: BROKER_CONFIGS[k].render(config.values[k]) for k in AUTHORIZER_KEYS
                if k in config.explicit})
    host = config.values["host"]
    advertised = config.values["advertised.host"] or host
    out.update({
        "node.id": str(node_id), "broker.id": str(node_id),
        "log.dirs": ",".join(config.values["log.dirs"]),
        "listeners": ",".join(config.values["listeners"]) or f"PLAINTEXT://{host}:{port}",
        "advertised.listeners": (",".join(config.values["advertised.listeners"])
                                 or ",".join(config.values["listeners"])
                                 or f"PLAINTEXT://{advertised}:{port}"),
        "process.roles": ",".join(config.values["process.roles"]),
    })
    return out


def _kafka_entry(name: str, levels: Sequence[tuple[Mapping[str, str], int]]) -> Entry:
    key = described_key(name)
    sensitive = key is None or key.sensitive
    names = synonyms(name)
    found = [(n, None if sensitive else values[n], source)
             for values, source in levels for n in names if n in values]
    while found and found[0][0] != name:  # Kafka drops what precedes the key itself
        found.pop(0)
    value = next((values[name] for values, _ in levels if name in values), None)
    return Entry(name, None if sensitive else value,
                 found[0][2] if found else SOURCE_DEFAULT,
                 not (name in KEYS and KEYS[name].dynamic), sensitive,
                 key.type_id if key is not None else 0, tuple(found))


def _kcompat_entry(name: str, config: BrokerConfig) -> Entry:
    definition = BROKER_CONFIGS[name]
    # a secret (admin.token) is described as Kafka describes a password: no value
    value = None if definition.secret else definition.render(config.values[name])
    synonyms: list[Synonym] = []
    if name in config.explicit:
        synonyms.append((name, value, SOURCE_STATIC))
    default = None if definition.secret else definition.render(definition.default)
    synonyms.append((name, default, SOURCE_DEFAULT))
    return Entry(name, value, synonyms[0][2], True, definition.secret,
                 TYPE_IDS[_KCOMPAT_TYPES[definition.type]], tuple(synonyms))


def describe_broker(config: BrokerConfig, levels: Mapping[str, Mapping[str, str]],
                    node_id: int, port: int, asked: Sequence[str] | None) -> list[Entry]:
    """The entries of BROKER resource ``str(node_id)``: all, or those ``asked``."""
    own = levels.get(str(node_id), {})
    cluster = levels.get(CLUSTER, {})
    static = static_values(config, node_id, port)
    ordered = [(own, SOURCE_DYNAMIC_BROKER), (cluster, SOURCE_DYNAMIC_DEFAULT),
               (static, SOURCE_STATIC), (_DEFAULTS, SOURCE_DEFAULT)]
    extra = [k for k in {**own, **cluster} if not (k in KEYS and KEYS[k].listed)]
    extra += [k for k in AUTHORIZER_KEYS if k in config.explicit and k not in extra]
    names = extra + [k for k, key in KEYS.items() if key.listed]
    mine = [k for k, d in BROKER_CONFIGS.items() if k not in KEYS and not d.internal]
    if asked:
        wanted = set(asked)
        names = [k for k in names if k in wanted]
        mine = [k for k, d in BROKER_CONFIGS.items()
                if k not in KEYS and k in wanted and k not in AUTHORIZER_KEYS]
    return ([_kafka_entry(k, ordered) for k in names]
            + [_kcompat_entry(k, config) for k in mine])


def describe_cluster_default(levels: Mapping[str, Mapping[str, str]],
                             asked: Sequence[str] | None) -> list[Entry]:
    """The entries of BROKER resource "": the stored cluster-wide defaults."""
    cluster = levels.get(CLUSTER, {})
    names = [k for k in cluster if not asked or k in asked]
    out = []
    for name in names:
        entry = _kafka_entry(name, [(cluster, SOURCE_DYNAMIC_DEFAULT)])
        out.append(Entry(entry.name, entry.value, SOURCE_DYNAMIC_DEFAULT, entry.read_only,
                         entry.sensitive, entry.type_id,
                         ((name, entry.value, SOURCE_DYNAMIC_DEFAULT),)))
    return out
