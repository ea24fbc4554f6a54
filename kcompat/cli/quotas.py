"""``kcompat quotas describe|alter`` — client quotas, as ``kafka-configs.sh
--entity-type users|clients|ips`` manages them (KIP-546).

An entity is named by ``--user NAME`` / ``--user-default``, ``--client-id
NAME`` / ``--client-default`` (either or both) or ``--ip ADDRESS`` /
``--ip-default``. ``alter`` sets values with ``--add KEY=VALUE`` (repeatable:
``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``,
``controller_mutation_rate``, ``connection_creation_rate``) and removes them
with ``--delete KEY``; ``describe`` lists the quotas of the entity named
(exactly it with ``--strict``), or every one when none is named. One raw
request each (AlterClientQuotas / DescribeClientQuotas v1), to the bootstrap
broker; the broker's validation messages are Kafka's.
"""

from __future__ import annotations

import argparse
from typing import Any

from kcompat.cli._common import (
    CliError,
    add_client_args,
    check_code,
    parse_pairs,
    print_json,
    print_table,
)

MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2
_ORDER = {"user": 0, "client-id": 1, "ip": 2}  # how entities are shown


def register(sub: Any) -> None:
    quotas = sub.add_parser("quotas", help="describe and alter client quotas (kafka-configs.sh "
                                           "--entity-type users|clients|ips)")
    qsub = quotas.add_subparsers(dest="quotas_command", required=True, metavar="COMMAND")
    p = qsub.add_parser("describe", help="the quotas of an entity, or of all")
    _entity_args(p)
    p.add_argument("--strict", action="store_true",
                   help="only the entity exactly as named (no entity with other types)")
    add_client_args(p)
    p.set_defaults(func=cmd_describe)
    p = qsub.add_parser("alter", help="set (--add) or remove (--delete) an entity's quotas")
    _entity_args(p)
    p.add_argument("--add", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--delete", action="append", default=[], metavar="KEY")
    p.add_argument("--validate-only", action="store_true")
    add_client_args(p)
    p.set_defaults(func=cmd_alter)


def _entity_args(p: argparse.ArgumentParser) -> None:
    for kind, help_name in (("user", "a user"), ("client-id", "a client id"),
                            ("ip", "an IP address")):
        group = p.add_mutually_exclusive_group()
        group.add_argument(f"--{kind}", metavar="NAME", help=f"{help_name}")
        short = "client" if kind == "client-id" else kind
        group.add_argument(f"--{short}-default", action="store_true",
                           help=f"the default {kind} entity")


def _entity(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """(entity type, name or None for the default) pairs named on the command line."""
    out: list[tuple[str, str | None]] = []
    for kind, attr, default in (("user", "user", "user_default"),
                                ("client-id", "client_id", "client_default"),
                                ("ip", "ip", "ip_default")):
        if getattr(args, default):
            out.append((kind, None))
        elif getattr(args, attr) is not None:
            out.append((kind, getattr(args, attr)))
    return out


def _connection(args: argparse.Namespace) -> Any:
    from kcompat.cli._kio import Connection

    return Connection.for_args(args, args.timeout_ms / 1000 + 5)


def _name(kind: str, name: str | None) -> str:
    return f"{kind}=<default>" if name is None else f"{kind}={name}"


def cmd_describe(args: argparse.Namespace) -> int:
    from kio.schema.describe_client_quotas.v1 import request as dq
    from kio.static.primitive import i8

    components = tuple(
        dq.ComponentData(entity_type=kind, match_type=i8(MATCH_DEFAULT if name is None
                                                         else MATCH_EXACT), match=name)
        for kind, name in _entity(args))
    conn = _connection(args)
    try:
        answer = conn.call(dq.DescribeClientQuotasRequest(components=components,
                                                          strict=args.strict))
    finally:
        conn.close()
    check_code(int(answer.error_code), answer.error_message, "describing quotas")
    rows: list[tuple[str, str, float]] = []
    for entry in answer.entries or ():
        parts = sorted(entry.entity, key=lambda e: _ORDER.get(e.entity_type, 9))
        entity = ",".join(_name(e.entity_type, e.entity_name) for e in parts)
        rows.extend((entity, v.key, float(v.value)) for v in entry.values)
    rows.sort()
    if args.json:
        print_json([{"entity": e, "key": k, "value": v} for e, k, v in rows])
    else:
        print_table(["ENTITY", "KEY", "VALUE"], [(e, k, f"{v:g}") for e, k, v in rows])
    return 0


def cmd_alter(args: argparse.Namespace) -> int:
    from kio.schema.alter_client_quotas.v1 import request as aq
    from kio.static.primitive import f64

    entity = _entity(args)
    if not entity:
        raise CliError("name the entity: --user/--user-default, --client-id/--client-default "
                       "or --ip/--ip-default", 2)
    if not args.add and not args.delete:
        raise CliError("nothing to alter: give --add KEY=VALUE or --delete KEY", 2)
    ops = []
    for key, value in parse_pairs(args.add, "--add"):
        try:
            number = float(value)
        except ValueError:
            raise CliError(f"--add {key}={value}: the value must be a number", 2) from None
        ops.append(aq.OpData(key=key, value=f64(number), remove=False))
    ops.extend(aq.OpData(key=key, value=f64(0.0), remove=True) for key in args.delete)
    conn = _connection(args)
    try:
        answer = conn.call(aq.AlterClientQuotasRequest(entries=(aq.EntryData(
            entity=tuple(aq.EntityData(entity_type=k, entity_name=n) for k, n in entity),
            ops=tuple(ops)),), validate_only=args.validate_only))
    finally:
        conn.close()
    for result in answer.entries:
        check_code(int(result.error_code), result.error_message, "altering quotas")
    name = ",".join(_name(k, n) for k, n in entity)
    if args.json:
        print_json({"entity": name, "altered": [op.key for op in ops],
                    "validate_only": args.validate_only})
    else:
        verb = "validated" if args.validate_only else "altered"
        print(f"{verb} the quotas of {name}: " + ", ".join(
            f"-{op.key}" if op.remove else f"{op.key}={float(op.value):g}" for op in ops))
    return 0
