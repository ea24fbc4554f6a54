"""``kcompat acls add|list|remove`` — kafka-acls.sh in small.

Options as kafka-acls.sh names them: ``--allow-principal`` / ``--deny-principal``
(repeatable), ``--allow-host`` / ``--deny-host`` (default ``*``; ``--host``
sets both), ``--operation`` (repeatable; Read, Write, Describe, AlterConfigs...
in any case, with or without ``_``/``-``; default All to add, any to remove),
the resources ``--topic``, ``--group``, ``--transactional-id`` (repeatable) and
``--cluster``, ``--resource-pattern-type`` (literal or prefixed to add and
remove; to list also any, the default, and match: every ACL that covers the
named resource). ``remove`` with no principal removes every ACL of the
resources, as kafka-acls.sh does.

One raw request each (CreateAcls v3, DescribeAcls v3, DeleteAcls v3, sent with
kio to the bootstrap broker, which forwards changes to the controller): the
client keeps Kafka's error messages, and operation codes kafka-python's admin
client does not know (TWO_PHASE_COMMIT) list fine. A binding the broker
refuses is a one-line error naming it; SECURITY_DISABLED says the broker runs
without ``authorizer.class.name``.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from kcompat.cli._common import CliError, add_client_args, check_code, print_json, print_table
from kcompat.security import acl

_PATTERNS_TO_CHANGE = ("literal", "prefixed")
_PATTERNS_TO_LIST = ("any", "match", "literal", "prefixed")


def register(sub: Any) -> None:
    acls = sub.add_parser("acls", help="add, list and remove ACLs (kafka-acls.sh)")
    asub = acls.add_subparsers(dest="acls_command", required=True, metavar="COMMAND")
    p = asub.add_parser("add", help="create ACLs")
    _binding_args(p, _PATTERNS_TO_CHANGE, "literal")
    p.set_defaults(func=cmd_add)
    p = asub.add_parser("list", help="list ACLs (all, or a resource's)")
    _resource_args(p, _PATTERNS_TO_LIST, "any")
    p.add_argument("--principal", help="only this principal's ACLs, e.g. User:alice")
    add_client_args(p)
    p.set_defaults(func=cmd_list)
    p = asub.add_parser("remove", help="remove ACLs (a resource's, or some of them)")
    _binding_args(p, _PATTERNS_TO_CHANGE, "literal")
    p.set_defaults(func=cmd_remove)


def _resource_args(p: argparse.ArgumentParser, patterns: tuple[str, ...], default: str) -> None:
    p.add_argument("--topic", action="append", default=[], metavar="NAME")
    p.add_argument("--group", action="append", default=[], metavar="NAME")
    p.add_argument("--transactional-id", action="append", default=[], metavar="ID")
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument("--resource-pattern-type", choices=patterns, default=default,
                   type=str.lower, help=f"default {default}")


def _binding_args(p: argparse.ArgumentParser, patterns: tuple[str, ...], default: str) -> None:
    _resource_args(p, patterns, default)
    p.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL",
                   help="e.g. User:alice, User:* (repeatable)")
    p.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                   help="address the allowed principals connect from (default *)")
    p.add_argument("--deny-host", action="append", default=[], metavar="HOST")
    p.add_argument("--host", action="append", default=[], metavar="HOST",
                   help="both --allow-host and --deny-host")
    p.add_argument("--operation", action="append", default=[], metavar="OP",
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                        "DescribeConfigs, AlterConfigs, IdempotentWrite, All... (repeatable)")
    add_client_args(p)


def operation_of(text: str) -> acl.Operation:
    """``Read``, ``describe-configs``, ``ALTER_CONFIGS`` -> the operation."""
    key = text.replace("_", "").replace("-", "").upper()
    for op in acl.Operation:
        if op.name.replace("_", "") == key and op not in (acl.Operation.UNKNOWN,
                                                           acl.Operation.ANY):
            return op
    raise CliError(f"unknown operation {text!r}", 2)


def resources(args: argparse.Namespace) -> list[tuple[acl.ResourceType, str]]:
    found = [(acl.ResourceType.TOPIC, n) for n in args.topic]
    found += [(acl.ResourceType.GROUP, n) for n in args.group]
    found += [(acl.ResourceType.TRANSACTIONAL_ID, n) for n in args.transactional_id]
    if args.cluster:
        found.append((acl.ResourceType.CLUSTER, acl.CLUSTER_NAME))
    return found


def _entries(args: argparse.Namespace, default_op: acl.Operation
             ) -> list[tuple[str, str, acl.Operation, acl.Permission]]:
    """(principal, host, operation, permission) of every combination asked."""
    ops = [operation_of(o) for o in args.operation] or [default_op]
    out: list[tuple[str, str, acl.Operation, acl.Permission]] = []
    for principals, hosts, perm in ((args.allow_principal, args.allow_host, acl.Permission.ALLOW),
                                    (args.deny_principal, args.deny_host, acl.Permission.DENY)):
        for principal in principals:
            for host in (hosts + args.host) or [acl.WILDCARD]:
                out.extend((principal, host, op, perm) for op in ops)
    return out


def _connection(args: argparse.Namespace) -> Any:
    from kcompat.cli._kio import Connection

    return Connection.for_args(args, args.timeout_ms / 1000 + 5)


def _pattern(args: argparse.Namespace) -> acl.PatternType:
    return acl.PatternType[args.resource_pattern_type.upper()]


def _describe(b: acl.AclBinding) -> str:
    return (f"{b.permission.name} {b.principal} {b.operation.name} from {b.host} on "
            f"{b.resource_type.name} {b.pattern_type.name} {b.name!r}")


def cmd_add(args: argparse.Namespace) -> int:
    from kio.schema.create_acls.v3 import request as ca
    from kio.static.primitive import i8

    found = resources(args)
    entries = _entries(args, acl.Operation.ALL)
    if not found or not entries:
        raise CliError("name a resource (--topic, --group, --transactional-id, --cluster) and "
                       "a principal (--allow-principal, --deny-principal)", 2)
    bindings = [acl.AclBinding(rt, name, _pattern(args), principal, host, op, perm)
                for rt, name in found for principal, host, op, perm in entries]
    conn = _connection(args)
    try:
        answer = conn.call(ca.CreateAclsRequest(creations=tuple(
            ca.AclCreation(resource_type=i8(b.resource_type), resource_name=b.name,
                           resource_pattern_type=i8(b.pattern_type), principal=b.principal,
                           host=b.host, operation=i8(b.operation),
                           permission_type=i8(b.permission)) for b in bindings)))
    finally:
        conn.close()
    for b, result in zip(bindings, answer.results, strict=True):
        check_code(int(result.error_code), result.error_message, _describe(b))
    _report(args, "added", bindings)
    return 0


def _report(args: argparse.Namespace, verb: str, bindings: list[acl.AclBinding]) -> None:
    if args.json:
        print_json({verb: [_as_json(b) for b in bindings]})
        return
    print(f"{verb} {len(bindings)} ACL(s)")
    _table(bindings)


def _as_json(b: acl.AclBinding) -> dict[str, Any]:
    return {"resource_type": b.resource_type.name, "name": b.name,
            "pattern_type": b.pattern_type.name, "principal": b.principal, "host": b.host,
            "operation": b.operation.name, "permission": b.permission.name}


def _table(bindings: Iterable[acl.AclBinding]) -> None:
    print_table(["RESOURCE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"],
                [[b.resource_type.name, b.name, b.pattern_type.name, b.principal, b.host,
                  b.operation.name, b.permission.name] for b in bindings])


def _filters(args: argparse.Namespace) -> list[Any]:
    """(resource type, name, pattern type) filters of the resources named (all: ANY)."""
    found = resources(args)
    if not found:
        return [(acl.ResourceType.ANY, None, acl.PatternType.ANY)]
    return [(rt, name, _pattern(args)) for rt, name in found]


def cmd_list(args: argparse.Namespace) -> int:
    from kio.schema.describe_acls.v3 import request as da
    from kio.static.primitive import i8

    conn = _connection(args)
    found: list[acl.AclBinding] = []
    try:
        for rt, name, pt in _filters(args):
            answer = conn.call(da.DescribeAclsRequest(
                resource_type_filter=i8(rt), resource_name_filter=name,
                pattern_type_filter=i8(pt), principal_filter=args.principal, host_filter=None,
                operation=i8(acl.Operation.ANY), permission_type=i8(acl.Permission.ANY)))
            check_code(int(answer.error_code), answer.error_message, "listing ACLs")
            found += [acl.AclBinding(acl.resource_type(r.resource_type), r.resource_name,
                                     acl.pattern_type(r.pattern_type), a.principal, a.host,
                                     acl.operation(a.operation), acl.permission(a.permission_type))
                      for r in answer.resources for a in r.acls]
    finally:
        conn.close()
    found = list(dict.fromkeys(found))
    if args.json:
        print_json([_as_json(b) for b in found])
    else:
        _table(found)
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    from kio.schema.delete_acls.v3 import request as dl
    from kio.static.primitive import i8

    found = resources(args)
    if not found:
        raise CliError("name a resource (--topic, --group, --transactional-id, --cluster)", 2)
    entries: list[tuple[str | None, str | None, acl.Operation, acl.Permission]] = list(
        _entries(args, acl.Operation.ANY))
    if not entries:  # no principal: every ACL of the resources
        ops = [operation_of(o) for o in args.operation] or [acl.Operation.ANY]
        entries = [(None, None, op, acl.Permission.ANY) for op in ops]
    filters = [dl.DeleteAclsFilter(
        resource_type_filter=i8(rt), resource_name_filter=name,
        pattern_type_filter=i8(_pattern(args)), principal_filter=principal, host_filter=host,
        operation=i8(op), permission_type=i8(perm))
        for rt, name in found for principal, host, op, perm in entries]
    conn = _connection(args)
    try:
        answer = conn.call(dl.DeleteAclsRequest(filters=tuple(filters)))
    finally:
        conn.close()
    removed: list[acl.AclBinding] = []
    for result in answer.filter_results:
        check_code(int(result.error_code), result.error_message, "removing ACLs")
        removed += [acl.AclBinding(acl.resource_type(m.resource_type), m.resource_name,
                                   acl.pattern_type(m.pattern_type), m.principal, m.host,
                                   acl.operation(m.operation), acl.permission(m.permission_type))
                    for m in result.matching_acls]
    _report(args, "removed", list(dict.fromkeys(removed)))
    return 0
