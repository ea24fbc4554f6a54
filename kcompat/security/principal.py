"""Principals as Kafka names them: ``<type>:<name>``, e.g. ``User:alice``.

A connection nobody authenticated (a PLAINTEXT listener, or an SSL one
without a client certificate) is ``User:ANONYMOUS``, as in Kafka; SASL gives
``User:<authorization id>``, a client certificate ``User:<mapped DN>``.
"""

from __future__ import annotations

USER = "User"
ANONYMOUS = "User:ANONYMOUS"


def user(name: str) -> str:
    return f"{USER}:{name}"


def split(principal: str) -> tuple[str, str]:
    """``"User:alice"`` -> ``("User", "alice")``; a principal must have a type."""
    kind, sep, name = principal.partition(":")
    if not sep or not kind:
        raise ValueError(f"{principal!r} is not a principal (expected TYPE:NAME)")
    return kind, name
