"""Client quotas (KIP-546): what AlterClientQuotas sets and DescribeClientQuotas finds.

Theory of operation
-------------------
A quota entity is a set of (entity type, name) pairs — ``user``,
``client-id`` (each alone or both) or ``ip`` alone — where a null name is the
*default* entity of that type (Kafka's ``<default>``). Each entity carries
values for a few keys: ``producer_byte_rate``, ``consumer_byte_rate``
(longs), ``request_percentage``, ``controller_mutation_rate`` (doubles) for
user/client-id entities, ``connection_creation_rate`` (an int) for ip ones.

Quotas live in the replicated metadata log, like topic configs: one
``client_quotas`` record per altered entity, ``{"entity": [[type, name],
...], "ops": [[key, value, remove], ...]}``, the validated ops themselves.
Every broker applies them to its ``MetadataImage.client_quotas`` in log
order (an entity left with no value is gone), so two alterations of one
entity committed close together both count, the image is the same
everywhere, survives a restart and is part of the metadata checkpoint.

Validation follows Kafka 4.4's answers (INVALID_REQUEST with its messages,
measured against the reference broker): entity first (``check_entity``),
then each op that sets a value (``check_value``); removing an unknown key is
not an error. ``match`` is DescribeClientQuotas' filter: exact name, default
(null name) or any name of a type, *strict* meaning no other entity types.

Enforcement (throttling produce/fetch/requests/connections by these values)
is not done here: it belongs to the quota-enforcement issue. The values are
stored, replicated and described only.

Pure: no I/O (whether an ``ip`` name that is not an address resolves is asked
by the caller and passed in).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

USER, CLIENT_ID, IP = "user", "client-id", "ip"
#: Kafka's order of entity types and keys in its answers.
TYPE_ORDER = (CLIENT_ID, USER, IP)
#: key -> (Kafka's ConfigDef type, the entity family it applies to)
KEYS: dict[str, tuple[str, str]] = {
    "producer_byte_rate": ("long", "client"),
    "consumer_byte_rate": ("long", "client"),
    "controller_mutation_rate": ("double", "client"),
    "request_percentage": ("double", "client"),
    "connection_creation_rate": ("int", "ip"),
}
_MAX = {"long": 2**63 - 1, "int": 2**31 - 1}
_ARTICLE = {"long": "a LONG", "int": "an INT"}

MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2

Entity = tuple[tuple[str, str | None], ...]


@dataclass(frozen=True, slots=True)
class QuotaError(Exception):
    code: ErrorCode
    message: str


def _invalid(message: str) -> QuotaError:
    return QuotaError(ErrorCode.invalid_request, message)


def canonical(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    """The entity of request pairs (a type named twice: the last name wins, as
    in Kafka), in ``TYPE_ORDER`` (unknown types last)."""
    by_type = dict(pairs)
    rank = {t: i for i, t in enumerate(TYPE_ORDER)}
    return tuple(sorted(by_type.items(), key=lambda p: (rank.get(p[0], len(rank)), p[0])))


def describe_entity(entity: Entity) -> str:
    """Kafka's ``ClientQuotaEntity`` text, as its messages quote it."""
    inner = ", ".join(f"{t}={n if n is not None else 'null'}" for t, n in entity)
    return f"ClientQuotaEntity(entries={{{inner}}})"


def is_ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def check_entity(entity: Entity, ip_resolves: bool = True) -> None:
    """Kafka's checks of an entity to alter; QuotaError otherwise.
    ``ip_resolves``: the ip name is an address or a host name that resolves."""
    if not entity:
        raise _invalid("Invalid empty client quota entity")
    types = {t for t, _ in entity}
    for entity_type, name in entity:
        if entity_type not in TYPE_ORDER:
            raise _invalid(f"Unhandled client quota entity type: {entity_type}")
        if name == "":
            raise _invalid(f"Empty {entity_type} not supported")
    if IP in types and types != {IP}:
        raise _invalid("Invalid quota entity combination, IP entity shouldnot be combined "
                       "with User or ClientId")
    ip = dict(entity).get(IP)
    if ip is not None and not ip_resolves:
        raise _invalid(f"{ip} is not a valid IP or resolvable host.")


def family(entity: Entity) -> str:
    return "ip" if any(t == IP for t, _ in entity) else "client"


def check_value(entity: Entity, key: str, value: float) -> None:
    """One value to set (Kafka's ``validateQuotaKeyValue``)."""
    found = KEYS.get(key)
    if found is None or found[1] != family(entity):
        raise _invalid(f"Invalid configuration key {key}")
    kind = found[0]
    if not value > 0.0:
        raise _invalid(f"Quota {key} must be greater than 0")
    if kind == "double":
        return
    if value > _MAX[kind]:
        raise _invalid(f"Proposed value for {key} is too large for {_ARTICLE[kind]}.")
    if value != int(value):
        raise _invalid(f"{key} cannot be a fractional value.")


def check_ops(entity: Entity, ops: Sequence[tuple[str, float, bool]]) -> None:
    """Every op of one entry that sets a value: (key, value, remove)."""
    for key, value, remove in ops:
        if not remove:
            check_value(entity, key, value)


def record(entity: Entity, ops: Iterable[Sequence[Any]]) -> dict[str, Any]:
    """The metadata record altering ``entity`` by validated (key, value, remove) ops
    (``MetadataImage.apply`` carries them out)."""
    return {"type": "client_quotas", "entity": [list(p) for p in entity],
            "ops": [[str(key), float(value), bool(remove)] for key, value, remove in ops]}


def entity_of_record(rec: Mapping[str, Any]) -> Entity:
    return tuple((str(t), None if n is None else str(n)) for t, n in rec["entity"])


def ordered_values(values: Mapping[str, float]) -> list[tuple[str, float]]:
    rank = {k: i for i, k in enumerate(KEYS)}
    return sorted(values.items(), key=lambda kv: rank.get(kv[0], len(rank)))


# -- DescribeClientQuotas ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Component:
    entity_type: str
    match_type: int
    match: str | None


def check_filter(components: Sequence[Component]) -> None:
    """Kafka's checks of a DescribeClientQuotas filter; QuotaError otherwise."""
    seen: set[str] = set()
    for c in components:
        if c.entity_type in seen:
            raise _invalid(f"Entity type {c.entity_type} cannot appear more than once in "
                           "the filter.")
        seen.add(c.entity_type)
        if c.entity_type not in TYPE_ORDER:
            raise QuotaError(ErrorCode.unsupported_version,
                             f"Unsupported entity type {c.entity_type}")
        if c.match_type == MATCH_EXACT and c.match is None:
            raise _invalid("Request specified MATCH_TYPE_EXACT, but set match string to null.")
        if c.match_type == MATCH_DEFAULT and c.match is not None:
            raise _invalid("Request specified MATCH_TYPE_DEFAULT, but also specified a "
                           "match string.")
        if c.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            raise _invalid(f"Unknown match type {c.match_type}")
    if IP in seen and seen & {USER, CLIENT_ID}:
        raise _invalid("Invalid entity filter component combination. IP filter component "
                       "should not be used with user or clientId filter component.")


def matches(entity: Entity, components: Sequence[Component], strict: bool) -> bool:
    names = dict(entity)
    for c in components:
        if c.entity_type not in names:
            return False
        name = names[c.entity_type]
        if c.match_type == MATCH_EXACT and name != c.match:
            return False
        if c.match_type == MATCH_DEFAULT and name is not None:
            return False
    return not strict or set(names) == {c.entity_type for c in components}


def describe(quotas: Mapping[Entity, Mapping[str, float]], components: Sequence[Component],
             strict: bool) -> list[tuple[Entity, list[tuple[str, float]]]]:
    """The entities matching the filter with their values (filter checked first)."""
    check_filter(components)
    return [(entity, ordered_values(values)) for entity, values in quotas.items()
            if values and matches(entity, components, strict)]
