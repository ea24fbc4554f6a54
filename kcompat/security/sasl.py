"""SASL server mechanisms: the exchange, one token in, one token out.

Theory of operation
-------------------
A connection on a SASL listener first names a mechanism (SaslHandshake), then
sends tokens (SaslAuthenticate, or raw length-prefixed tokens after a
SaslHandshake v0) until the mechanism is ``complete``. Each mechanism is a
small state machine: ``step(token)`` returns the server's answer or raises
``SaslError`` with the message the client sees (Kafka's
``SaslAuthenticationException`` texts); once ``complete``,
``authorization_id`` names the user (the principal is ``User:<id>``).
Mechanisms hold no secrets of their own: they look credentials up through
the callables they are built with (PLAIN: the JAAS users of the listener;
SCRAM: the credentials in the metadata log), so they stay pure.

PLAIN (RFC 4616): one message ``authzid NUL authcid NUL passwd``; an authzid,
if given, must equal the authcid (Kafka refuses impersonation).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Protocol

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
OAUTHBEARER = "OAUTHBEARER"


class SaslError(Exception):
    """Authentication failed; ``str(e)`` is what the client is told."""


class SaslServer(Protocol):
    mechanism: str
    complete: bool
    authorization_id: str

    def step(self, token: bytes) -> bytes: ...


class PlainServer:
    mechanism = PLAIN

    def __init__(self, password_of: Callable[[str], str | None]) -> None:
        self._password_of = password_of
        self.complete = False
        self.authorization_id = ""

    def step(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslError("Unexpected SASL request after PLAIN authentication completed")
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise SaslError("Invalid SASL/PLAIN response: expected 3 tokens, got "
                            f"{len(parts)}")
        try:
            authzid, authcid, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise SaslError("Invalid SASL/PLAIN response: not UTF-8") from None
        if not authcid:
            raise SaslError("Authentication failed: username not specified")
        if not password:
            raise SaslError("Authentication failed: password not specified")
        if authzid and authzid != authcid:
            raise SaslError("Authentication failed: Client requested an authorization id "
                            "that is different from username")
        expected = self._password_of(authcid)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise SaslError("Authentication failed: Invalid username or password")
        self.complete = True
        self.authorization_id = authcid
        return b""
