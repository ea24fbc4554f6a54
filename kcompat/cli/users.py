"""``kcompat users add|remove|list`` — SCRAM users, as ``kafka-configs.sh
--entity-type users`` manages them (KIP-554).

``add USER --password P [--mechanism SCRAM-SHA-512] [--iterations 4096]``
creates or replaces the user's credential for each mechanism named
(repeatable; default SCRAM-SHA-512). As Kafka's admin client does, the
password never leaves this process: it draws a salt (130 random bits in base
36, the ASCII of Kafka's ``ScramFormatter.secureRandomBytes``), salts the
password (PBKDF2-HMAC, ``iterations`` rounds) and sends the salted password
(AlterUserScramCredentials v0). ``--password -`` reads it from stdin.
``remove USER [--mechanism M]`` deletes the credentials named, or every one
the user has. ``list [USER...]`` shows users and their mechanisms and
iterations (DescribeUserScramCredentials v0): every user by default; a user
named without credentials is an error.

One raw request each, sent with kio to the bootstrap broker (any broker:
it forwards changes to the controller); Kafka's error messages are kept
("Too few iterations", "Attempt to delete a user credential that does not
exist").
"""

from __future__ import annotations

import argparse
import secrets
import sys
from typing import Any

from kcompat.cli._common import CliError, add_client_args, check_code, print_json, print_table
from kcompat.security import scram
from kcompat.security.sasl import SCRAM_SHA_256, SCRAM_SHA_512

DEFAULT_ITERATIONS = 4096  # kafka-configs.sh's when iterations= is not given
_MECHANISMS = (SCRAM_SHA_256, SCRAM_SHA_512)
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def register(sub: Any) -> None:
    users = sub.add_parser("users", help="add, remove and list SCRAM users (kafka-configs.sh "
                                         "--entity-type users)")
    usub = users.add_subparsers(dest="users_command", required=True, metavar="COMMAND")
    p = usub.add_parser("add", help="create or replace a user's SCRAM credential")
    p.add_argument("user")
    p.add_argument("--password", required=True, help="the password ('-': read it from stdin)")
    _mechanism_arg(p, "the mechanism (repeatable; default SCRAM-SHA-512)")
    p.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                   help=f"PBKDF2 rounds, 4096..16384 (default {DEFAULT_ITERATIONS})")
    add_client_args(p)
    p.set_defaults(func=cmd_add)
    p = usub.add_parser("remove", help="delete a user's SCRAM credentials")
    p.add_argument("user")
    _mechanism_arg(p, "the mechanism to delete (repeatable; default every one the user has)")
    add_client_args(p)
    p.set_defaults(func=cmd_remove)
    p = usub.add_parser("list", help="list SCRAM users, their mechanisms and iterations")
    p.add_argument("users", nargs="*", metavar="USER", help="only these users")
    add_client_args(p)
    p.set_defaults(func=cmd_list)


def _mechanism_arg(p: argparse.ArgumentParser, help_text: str) -> None:
    p.add_argument("--mechanism", action="append", default=[], type=str.upper,
                   choices=_MECHANISMS, help=help_text)


def random_salt() -> bytes:
    """Kafka's: a 130-bit random number written in base 36, as ASCII."""
    value, digits = secrets.randbits(130), []
    while value:
        value, digit = divmod(value, 36)
        digits.append(_DIGITS[digit])
    return "".join(reversed(digits or ["0"])).encode()


def _connection(args: argparse.Namespace) -> Any:
    from kcompat.cli._kio import Connection

    return Connection.for_args(args, args.timeout_ms / 1000 + 5)


def _alter(args: argparse.Namespace, deletions: tuple[Any, ...],
           upsertions: tuple[Any, ...]) -> None:
    from kio.schema.alter_user_scram_credentials.v0 import request as au

    conn = _connection(args)
    try:
        answer = conn.call(au.AlterUserScramCredentialsRequest(deletions=deletions,
                                                               upsertions=upsertions))
    finally:
        conn.close()
    for result in answer.results:
        check_code(int(result.error_code), result.error_message, f"user {result.user!r}")


def _describe(args: argparse.Namespace, users: list[str] | None
              ) -> list[tuple[str, list[tuple[str, int]]]]:
    """(user, [(mechanism, iterations)]) of the users named (None: all)."""
    from kio.schema.describe_user_scram_credentials.v0 import request as du

    conn = _connection(args)
    try:
        answer = conn.call(du.DescribeUserScramCredentialsRequest(
            users=None if users is None else tuple(du.UserName(name=u) for u in users)))
    finally:
        conn.close()
    check_code(int(answer.error_code), answer.error_message, "listing users")
    found = []
    for result in answer.results:
        check_code(int(result.error_code), result.error_message, f"user {result.user!r}")
        found.append((result.user, [(scram.mechanism_of_type(int(i.mechanism)) or
                                     f"UNKNOWN({int(i.mechanism)})", int(i.iterations))
                                    for i in result.credential_infos]))
    return sorted(found)


def _password(args: argparse.Namespace) -> bytes:
    text = sys.stdin.readline().rstrip("\r\n") if args.password == "-" else args.password
    if not text:
        raise CliError("the password must not be empty", 2)
    return text.encode()


def cmd_add(args: argparse.Namespace) -> int:
    from kio.schema.alter_user_scram_credentials.v0 import request as au
    from kio.static.primitive import i8, i32

    password = _password(args)
    mechanisms = list(dict.fromkeys(args.mechanism)) or [SCRAM_SHA_512]
    for mechanism in mechanisms:  # one request per mechanism: a user once per request
        salt = random_salt()
        salted = scram.salted_password(mechanism, password, salt, args.iterations)
        _alter(args, (), (au.ScramCredentialUpsertion(
            name=args.user, mechanism=i8(scram.MECHANISM_TYPES[mechanism]),
            iterations=i32(args.iterations), salt=salt, salted_password=salted),))
    _report(args, "added", [(args.user, m, args.iterations) for m in mechanisms])
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    from kio.schema.alter_user_scram_credentials.v0 import request as au
    from kio.static.primitive import i8

    mechanisms = list(dict.fromkeys(args.mechanism))
    if not mechanisms:
        mechanisms = [m for _, infos in _describe(args, [args.user]) for m, _ in infos]
    for mechanism in mechanisms:
        _alter(args, (au.ScramCredentialDeletion(
            name=args.user, mechanism=i8(scram.MECHANISM_TYPES[mechanism])),), ())
    _report(args, "removed", [(args.user, m, None) for m in mechanisms])
    return 0


def _report(args: argparse.Namespace, verb: str,
            rows: list[tuple[str, str, int | None]]) -> None:
    if args.json:
        print_json({verb: [{"user": u, "mechanism": m, **({"iterations": i} if i else {})}
                           for u, m, i in rows]})
        return
    print(f"{verb} {len(rows)} SCRAM credential(s) of user {args.user!r}: "
          + ", ".join(m for _, m, _ in rows))


def cmd_list(args: argparse.Namespace) -> int:
    found = _describe(args, args.users or None)
    rows = [(user, mechanism, iterations) for user, infos in found
            for mechanism, iterations in infos]
    if args.json:
        print_json([{"user": u, "mechanism": m, "iterations": i} for u, m, i in rows])
    else:
        print_table(["USER", "MECHANISM", "ITERATIONS"], rows)
    return 0
