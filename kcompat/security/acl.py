"""ACLs and the authorizer, with the semantics of Kafka's StandardAuthorizer.

Theory of operation
-------------------
An ACL (``AclBinding``) says that a principal (``User:alice``, or the wildcard
``User:*``) connecting from a host (an address, or ``*``) is allowed or denied
one operation on the resources a pattern names: a resource type and a name,
either LITERAL (the name itself, or ``*``: every resource of the type) or
PREFIXED (every name starting with it). The enums keep Kafka's wire codes;
a code Kafka does not know reads as UNKNOWN, as Kafka's ``fromCode`` does.

``Authorizer.authorize`` decides as StandardAuthorizer does:

1. a super user (``super.users``) may do anything;
2. the ACLs whose pattern covers the resource are gathered — the literal
   name, the literal ``*`` and every PREFIXED prefix of the name;
3. one of them that matches the principal (or ``User:*``), the host (or
   ``*``) and the operation with DENY denies, whatever allows;
4. else one that matches with ALLOW allows; an ALLOW of READ, WRITE, DELETE
   or ALTER also allows DESCRIBE, ALTER_CONFIGS allows DESCRIBE_CONFIGS, ALL
   allows everything (a DENY implies nothing but ALL: DENY READ leaves
   DESCRIBE alone);
5. else, if no ACL at all covers the resource (whoever it names),
   ``allow.everyone.if.no.acl.found`` decides; if some ACL covers it, deny.

``authorized_operations`` is the 32-bit field Metadata, DescribeGroups and
DescribeCluster answer: bit ``op`` set for each operation the resource type
supports (Kafka's ``AclEntry.supportedOperations``) that ``authorize`` allows.

The ACLs are kept in ``AclStore``, indexed by (resource type, pattern type,
name) so a check costs a dict lookup per length of PREFIXED name in use; the metadata
image owns the store and changes it in log order (``kcompat.broker.storage.metadata``),
the authorizer only reads it. ``AclBindingFilter`` is DescribeAcls' and
DeleteAcls' filter: null fields and ANY match anything, pattern type MATCH
matches every pattern that covers the named resource. ``check_new`` and
``check_filter`` are Kafka 4.4's checks of CreateAcls bindings and DeleteAcls
filters, with its error messages (measured against the reference broker:
``compat_tests/java/test_acls_differential.py``).

Pure: no I/O, no clocks.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from kio.schema.errors import ErrorCode

WILDCARD = "*"  # the literal resource name for every resource, and any host
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"
#: ``authorizer.class.name`` of the one authorizer kcompat has
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15  # KIP-939, on transactional ids


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def resource_type(code: int) -> ResourceType:
    """Kafka's ``fromCode``: a code it does not know is UNKNOWN."""
    return ResourceType(code) if code in ResourceType._value2member_map_ else ResourceType.UNKNOWN


def pattern_type(code: int) -> PatternType:
    return PatternType(code) if code in PatternType._value2member_map_ else PatternType.UNKNOWN


def operation(code: int) -> Operation:
    return Operation(code) if code in Operation._value2member_map_ else Operation.UNKNOWN


def permission(code: int) -> Permission:
    return Permission(code) if code in Permission._value2member_map_ else Permission.UNKNOWN


_O = Operation
#: what an ALLOW of an operation also allows (StandardAuthorizer's implications)
IMPLIES_DESCRIBE = frozenset({_O.DESCRIBE, _O.READ, _O.WRITE, _O.DELETE, _O.ALTER})
IMPLIES_DESCRIBE_CONFIGS = frozenset({_O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS})
#: the operations each resource type has (Kafka's AclEntry.supportedOperations):
#: what ``authorized_operations`` reports on
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER,
                         _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS),
    ResourceType.GROUP: (_O.READ, _O.DESCRIBE, _O.DELETE, _O.DESCRIBE_CONFIGS,
                         _O.ALTER_CONFIGS),
    ResourceType.CLUSTER: (_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS,
                           _O.IDEMPOTENT_WRITE, _O.ALTER, _O.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (_O.DESCRIBE, _O.WRITE),
    ResourceType.DELEGATION_TOKEN: (_O.DESCRIBE,),
    ResourceType.USER: (_O.CREATE_TOKENS, _O.DESCRIBE_TOKENS),
}


def bitfield(operations: Iterable[Operation]) -> int:
    """Kafka's ``Utils.to32BitField``: bit ``op`` set for each operation."""
    out = 0
    for op in operations:
        out |= 1 << int(op)
    return out


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def to_list(self) -> list[Any]:
        """The binding in a metadata record or checkpoint (``from_list`` reads it)."""
        return [int(self.resource_type), self.name, int(self.pattern_type), self.principal,
                self.host, int(self.operation), int(self.permission)]

    @classmethod
    def from_list(cls, fields: Iterable[Any]) -> AclBinding:
        rt, name, pt, principal, host, op, perm = fields
        return cls(resource_type(int(rt)), str(name), pattern_type(int(pt)), str(principal),
                   str(host), operation(int(op)), permission(int(perm)))


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """DescribeAcls' and DeleteAcls' filter (Kafka's AclBindingFilter): None
    and ANY match anything; pattern type MATCH with a name matches the ACLs
    that cover that resource (its literal name, ``*``, its prefixes)."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: Operation
    permission: Permission

    def matches(self, b: AclBinding) -> bool:
        return self._matches_pattern(b) and self._matches_entry(b)

    def _matches_pattern(self, b: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, b.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, b.pattern_type):
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, b.pattern_type):
            return self.name == b.name
        if b.pattern_type == PatternType.LITERAL:  # MATCH
            return self.name == b.name or b.name == WILDCARD
        return b.pattern_type == PatternType.PREFIXED and self.name.startswith(b.name)

    def _matches_entry(self, b: AclBinding) -> bool:
        return ((self.principal is None or self.principal == b.principal)
                and (self.host is None or self.host == b.host)
                and self.operation in (Operation.ANY, b.operation)
                and self.permission in (Permission.ANY, b.permission))


# -- Kafka 4.4's checks -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AclError(Exception):
    code: ErrorCode
    message: str | None


def _invalid(message: str) -> AclError:
    return AclError(ErrorCode.invalid_request, message)


def rejects_whole_request(b: AclBinding) -> bool:
    """A CreateAcls binding Kafka cannot even build (ANY where a value is due,
    a MATCH or ANY pattern type): its broker answers every binding of the
    request UNKNOWN_SERVER_ERROR (null message) and creates none."""
    return (b.resource_type == ResourceType.ANY
            or b.pattern_type in (PatternType.ANY, PatternType.MATCH)
            or b.operation == Operation.ANY or b.permission == Permission.ANY)


def check_new(b: AclBinding) -> None:
    """One binding to create, checked as Kafka 4.4 checks it: AclError
    (INVALID_REQUEST with Kafka's message) otherwise."""
    if b.resource_type == ResourceType.CLUSTER and b.name != CLUSTER_NAME:
        raise _invalid(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not b.name:
        raise _invalid("Invalid empty resource name")
    if b.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise _invalid(f"Invalid resourceType {b.resource_type.name}")
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise _invalid(f"Invalid patternType {b.pattern_type.name}")
    if b.operation in (Operation.UNKNOWN, Operation.ANY):
        raise _invalid(f"Invalid operation {b.operation.name}")
    if b.permission not in (Permission.ALLOW, Permission.DENY):
        raise _invalid(f"Invalid permissionType {b.permission.name}")
    if ":" not in b.principal:
        raise _invalid(f"Could not parse principal from `{b.principal}` (no colon is present "
                       "separating the principal type from the principal name)")
    if not b.host:
        raise _invalid("Host pattern cannot be null or empty")


def check_filter(f: AclBindingFilter) -> None:
    """A DeleteAcls filter as Kafka's controller checks it."""
    if f.resource_type == ResourceType.UNKNOWN or f.pattern_type == PatternType.UNKNOWN:
        raise _invalid("Unknown patternFilter.")
    if f.operation == Operation.UNKNOWN or f.permission == Permission.UNKNOWN:
        raise _invalid("Unknown entryFilter.")


# -- the store and the authorizer ---------------------------------------------------------


class AclStore:
    """The ACLs in force, indexed for ``Authorizer``: (resource type, pattern
    type, name) -> its bindings. Insertion order is kept (``bindings``)."""

    def __init__(self, bindings: Iterable[AclBinding] = ()) -> None:
        self._all: dict[AclBinding, None] = {}
        self._by_pattern: dict[tuple[ResourceType, PatternType, str], dict[AclBinding, None]] = {}
        # resource type -> length of a PREFIXED name -> how many patterns have it:
        # a check looks up only the prefixes of those lengths
        self._prefix_lengths: dict[ResourceType, dict[int, int]] = {}
        self.replace(bindings)

    def __len__(self) -> int:
        return len(self._all)

    def __contains__(self, b: object) -> bool:
        return b in self._all

    def bindings(self) -> Iterator[AclBinding]:
        return iter(list(self._all))

    def add(self, b: AclBinding) -> None:
        if b in self._all:
            return
        self._all[b] = None
        found = self._by_pattern.setdefault((b.resource_type, b.pattern_type, b.name), {})
        if not found and b.pattern_type == PatternType.PREFIXED:
            lengths = self._prefix_lengths.setdefault(b.resource_type, {})
            lengths[len(b.name)] = lengths.get(len(b.name), 0) + 1
        found[b] = None

    def remove(self, b: AclBinding) -> None:
        if self._all.pop(b, 0) is None:
            key = (b.resource_type, b.pattern_type, b.name)
            found = self._by_pattern[key]
            del found[b]
            if not found:
                del self._by_pattern[key]
                if b.pattern_type == PatternType.PREFIXED:
                    lengths = self._prefix_lengths[b.resource_type]
                    lengths[len(b.name)] -= 1
                    if not lengths[len(b.name)]:
                        del lengths[len(b.name)]

    def replace(self, bindings: Iterable[AclBinding]) -> None:
        """Hold exactly ``bindings`` (a checkpoint loaded), in place."""
        self._all.clear()
        self._by_pattern.clear()
        self._prefix_lengths.clear()
        for b in bindings:
            self.add(b)

    def find(self, f: AclBindingFilter) -> list[AclBinding]:
        return [b for b in self._all if f.matches(b)]

    def covering(self, rt: ResourceType, name: str) -> list[AclBinding]:
        """Every ACL whose pattern covers resource ``name`` of type ``rt``."""
        get = self._by_pattern.get
        out = list(get((rt, PatternType.LITERAL, name), ()))
        if name != WILDCARD:
            out += get((rt, PatternType.LITERAL, WILDCARD), ())
        for end in self._prefix_lengths.get(rt, ()):
            if end <= len(name):
                out += get((rt, PatternType.PREFIXED, name[:end]), ())
        return out


def _result(b: AclBinding, principal: str, host: str, op: Operation) -> Permission | None:
    """What ``b`` says about ``op`` by ``principal`` from ``host`` (its pattern
    covers the resource): ALLOW, DENY, or None when it does not apply."""
    if b.principal not in (principal, WILDCARD_PRINCIPAL):
        return None
    if b.host not in (WILDCARD, host):
        return None
    if b.operation != Operation.ALL:
        if b.permission == Permission.ALLOW:
            if op == Operation.DESCRIBE:
                applies = b.operation in IMPLIES_DESCRIBE
            elif op == Operation.DESCRIBE_CONFIGS:
                applies = b.operation in IMPLIES_DESCRIBE_CONFIGS
            else:
                applies = b.operation == op
            if not applies:
                return None
        elif b.operation != op:
            return None
    return b.permission


def parse_super_users(text: str) -> frozenset[str]:
    """``super.users`` as Kafka reads it: principals separated by ``;``."""
    return frozenset(p.strip() for p in text.split(";") if p.strip())


class Authorizer:
    """StandardAuthorizer's decisions over an ``AclStore`` it reads (the
    metadata image keeps the store current)."""

    def __init__(self, store: AclStore, super_users: Iterable[str] = (),
                 allow_if_no_acl: bool = False) -> None:
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl

    def authorize(self, principal: str, host: str, op: Operation, rt: ResourceType,
                  name: str) -> bool:
        """May ``principal`` connected from ``host`` (an address) do ``op`` on
        resource ``name`` of type ``rt``?"""
        if principal in self.super_users:
            return True
        return self._decide(self.store.covering(rt, name), principal, host, op)

    def _decide(self, covering: list[AclBinding], principal: str, host: str,
                op: Operation) -> bool:
        allowed = False
        for b in covering:
            found = _result(b, principal, host, op)
            if found == Permission.DENY:
                return False
            allowed = allowed or found == Permission.ALLOW
        return allowed or (not covering and self.allow_if_no_acl)

    def authorized_operations(self, principal: str, host: str, rt: ResourceType,
                              name: str) -> int:
        """The 32-bit field of the operations on the resource ``authorize`` allows."""
        supported = SUPPORTED_OPERATIONS.get(rt, ())
        if principal in self.super_users:
            return bitfield(supported)
        covering = self.store.covering(rt, name)
        return bitfield(op for op in supported if self._decide(covering, principal, host, op))
