"""The authorization checks the handlers share (Kafka's AuthHelper).

Theory of operation
-------------------
Each API checks its principal as Kafka 4.4's KafkaApis, ControllerApis and
the coordinators check it; this module has the few shapes those checks take,
so a handler adds a line or two:

* one resource: ``topic`` / ``group`` / ``txn_id`` / ``cluster`` — may the
  request's principal do the operation on it (``RequestContext.authorize``);
* many topics at once: ``topics`` keeps the names allowed (Kafka's
  ``filterByAuthorized``), each name asked once;
* ``any_topic_write``: Kafka's ``authorizeByResourceType(WRITE, TOPIC)``, which
  lets a principal with WRITE on some topic get an idempotent producer id
  without IDEMPOTENT_WRITE on the cluster (KIP-679);
* ``transactional_records``: a Produce whose batches are transactional needs
  WRITE on its transactional id (Kafka looks at each partition's first batch).

Without an authorizer (``authorizer.class.name`` unset) every check is True
at once: ``RequestContext.authorize`` answers before any ACL is looked at.
The error codes each API answers stay in the handlers, next to the request's
own errors.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.host.context import RequestContext
from kcompat.security import acl
from kcompat.security.acl import Operation, Permission, ResourceType
from kcompat.wire.batch import parse_header

Op = Operation
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
CLUSTER, TRANSACTIONAL_ID = ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
CLUSTER_NAME = acl.CLUSTER_NAME
#: Kafka's "authorized operations not requested" (the schemas' default)
NOT_REQUESTED = -(1 << 31)
_BATCH_HEADER_BYTES = 61
#: Kafka's ConfigResource.Type codes
CONFIG_TOPIC, CONFIG_BROKER, CONFIG_BROKER_LOGGER = 2, 4, 8
CONFIG_CLIENT_METRICS, CONFIG_GROUP = 16, 32
#: Kafka's messages of the authorization errors (``Errors.message()``), where an
#: answer carries one
MESSAGES = {
    ErrorCode.topic_authorization_failed: "Topic authorization failed.",
    ErrorCode.group_authorization_failed: "Group authorization failed.",
    ErrorCode.cluster_authorization_failed: "Cluster authorization failed.",
    ErrorCode.transactional_id_authorization_failed: "Transactional Id authorization failed.",
}


def enabled(ctx: RequestContext) -> bool:
    """Is an authorizer configured (else every check allows)?"""
    return ctx.broker.authorizer is not None


def topic(ctx: RequestContext, op: Operation, name: str) -> bool:
    return ctx.authorize(op, TOPIC, name)


def group(ctx: RequestContext, op: Operation, group_id: str) -> bool:
    return ctx.authorize(op, GROUP, group_id)


def txn_id(ctx: RequestContext, op: Operation, transactional_id: str) -> bool:
    return ctx.authorize(op, TRANSACTIONAL_ID, transactional_id)


def cluster(ctx: RequestContext, op: Operation) -> bool:
    return ctx.authorize(op, CLUSTER, acl.CLUSTER_NAME)


def topics(ctx: RequestContext, op: Operation, names: Iterable[str | None]) -> set[str]:
    """The names among ``names`` the principal may do ``op`` on (None skipped)."""
    wanted = {n for n in names if n is not None}
    if not enabled(ctx):
        return wanted
    return {n for n in wanted if ctx.authorize(op, TOPIC, n)}


def any_topic_write(ctx: RequestContext) -> bool:
    """Kafka's ``Authorizer.authorizeByResourceType(WRITE, TOPIC)``: allowed when
    WRITE on a name no ACL covers would be (a super user, a ``*`` ALLOW, or
    ``allow.everyone.if.no.acl.found``), else when some ALLOW of WRITE for this
    principal and host is not undone by a DENY: a literal ``*`` DENY undoes
    every one; a literal ALLOW is undone by a DENY of its name or of a prefix
    of it, a PREFIXED ALLOW by a PREFIXED DENY of a prefix of its own."""
    authorizer = ctx.broker.authorizer
    if authorizer is None or ctx.authorize(Op.WRITE, TOPIC, "hardcode"):
        return True
    host = ctx.client_address
    allows: list[tuple[acl.PatternType, str]] = []
    denies: list[tuple[acl.PatternType, str]] = []
    for b in authorizer.store.bindings():
        if (b.resource_type != TOPIC or b.operation not in (Op.WRITE, Op.ALL)
                or b.principal not in (ctx.principal, acl.WILDCARD_PRINCIPAL)
                or b.host not in (acl.WILDCARD, host)):
            continue
        (allows if b.permission == Permission.ALLOW else denies).append((b.pattern_type,
                                                                          b.name))
    if (acl.PatternType.LITERAL, acl.WILDCARD) in denies:
        return False
    denied_prefixes = [n for t, n in denies if t == acl.PatternType.PREFIXED]
    denied_literals = {n for t, n in denies if t == acl.PatternType.LITERAL}
    for kind, name in allows:
        if any(name.startswith(p) for p in denied_prefixes):
            continue
        if kind == acl.PatternType.LITERAL and name in denied_literals:
            continue
        return True
    return False


def transactional_records(request_topics: Iterable[Any]) -> bool:
    """Does a Produce carry transactional batches? (Each partition's first
    batch, as Kafka's ProduceRequest reads its flags.)"""
    for t in request_topics:
        for p in t.partition_data:
            records = p.records
            if records is not None and len(records) >= _BATCH_HEADER_BYTES:
                if parse_header(records).is_transactional:
                    return True
    return False


def config_resource_denied(ctx: RequestContext, op: Operation, resource_type: int,
                           name: str) -> ErrorCode | None:
    """DESCRIBE_CONFIGS / ALTER_CONFIGS on a config resource (Describe/AlterConfigs,
    IncrementalAlterConfigs): a topic's or a group's own ACLs, the cluster's for
    a broker or a broker's loggers; the error Kafka answers, None when allowed
    (or the resource type is not one of those: the handler answers it)."""
    if resource_type == CONFIG_TOPIC:
        return None if topic(ctx, op, name) else ErrorCode.topic_authorization_failed
    if resource_type == CONFIG_GROUP:
        return None if group(ctx, op, name) else ErrorCode.group_authorization_failed
    if resource_type in (CONFIG_BROKER, CONFIG_BROKER_LOGGER, CONFIG_CLIENT_METRICS):
        return None if cluster(ctx, op) else ErrorCode.cluster_authorization_failed
    return None


def operations(ctx: RequestContext, resource_type: ResourceType, name: str,
               requested: bool) -> int:
    """An authorized-operations field: the 32-bit set when ``requested``,
    else Kafka's "not requested" sentinel."""
    return ctx.authorized_operations(resource_type, name) if requested else NOT_REQUESTED
