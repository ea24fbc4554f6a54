"""SASL/OAUTHBEARER (RFC 7628) with unsecured JWS tokens, for development.

Theory of operation
-------------------
The client's one message is ``n,[a=<authzid>],`` then ``\\x01``-separated
``key=value`` pairs, one of them ``auth=Bearer <token>``, ending ``\\x01\\x01``.
The token here is what Kafka's default (unsecured) validator accepts: a JWS
whose header says ``"alg": "none"`` and whose signature is empty, its claims
a JSON object with the principal's name (``sub``, or the claim
``unsecuredValidatorPrincipalClaimName`` names), ``exp`` (seconds; the token is
refused once expired, give or take ``unsecuredValidatorAllowableClockSkewMs``)
and, if the listener requires scopes (``unsecuredValidatorRequiredScope``), a
``scope`` holding each. Nothing is signed: this is Kafka's development
validator, not a way to trust tokens from the network.

A refused token is answered as RFC 7628 says, with a JSON error
(``{"status":"invalid_token"}``) the client acknowledges with ``\\x01``; that
acknowledgement fails the exchange with the reason. Once complete,
``expires_at_ms`` bounds the session (KIP-368 re-authentication). The clock
is passed in (``now_ms``): this module stays pure.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from typing import Any

from kcompat.security.sasl import OAUTHBEARER, SaslError


def _b64url(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def unsecured_claims(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(header, claims) of an unsecured JWS; ValueError naming what is wrong."""
    parts = token.split(".")
    if len(parts) != 3:
        raise ValueError("the token is not a JWS (header.claims.signature)")
    try:
        header, claims = (json.loads(_b64url(p)) for p in parts[:2])
    except (binascii.Error, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"the token's header or claims are not base64url JSON: {e}") from None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise ValueError("the token's header and claims must be JSON objects")
    if header.get("alg") != "none" or parts[2]:
        raise ValueError("only unsecured tokens are accepted (alg none, no signature)")
    return header, claims


class OAuthBearerServer:
    mechanism = OAUTHBEARER

    def __init__(self, now_ms: Callable[[], float], required_scope: Sequence[str] = (),
                 clock_skew_ms: int = 0, principal_claim: str = "sub") -> None:
        self._now_ms = now_ms
        self._required = tuple(required_scope)
        self._skew = clock_skew_ms
        self._claim = principal_claim
        self._refused = ""
        self.complete = False
        self.authorization_id = ""
        self.expires_at_ms: float | None = None

    def step(self, token: bytes) -> bytes:
        if self._refused:  # the client's \x01 after our error: fail with the reason
            raise SaslError(f"Authentication failed: {self._refused}")
        if self.complete:
            raise SaslError("Unexpected SASL request after OAUTHBEARER authentication completed")
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslError("Invalid OAUTHBEARER client first message: not UTF-8") from None
        gs2, sep, rest = text.partition("\x01")
        if not sep or not gs2.startswith("n,") or not rest.endswith("\x01\x01"):
            raise SaslError("Invalid OAUTHBEARER client first message")
        authzid = gs2[2:].rstrip(",").removeprefix("a=") if gs2 != "n,," else ""
        pairs = dict(kv.partition("=")[::2] for kv in rest[:-2].split("\x01") if kv)
        scheme, _, bearer = pairs.get("auth", "").partition(" ")
        if scheme.lower() != "bearer" or not bearer.strip():
            raise SaslError("Invalid OAUTHBEARER client first message: no auth=Bearer token")
        problem, name, exp = self._validate(bearer.strip())
        if problem:
            self._refused = problem
            return json.dumps({"status": "invalid_token"}).encode()
        if authzid and authzid != name:
            raise SaslError(f"Authentication failed: Authorization ID {authzid} is not the "
                            f"principal {name}")
        self.complete, self.authorization_id, self.expires_at_ms = True, name, exp
        return b""

    def _validate(self, token: str) -> tuple[str, str, float]:
        try:
            _, claims = unsecured_claims(token)
        except ValueError as e:
            return str(e), "", 0.0
        name = claims.get(self._claim)
        if not isinstance(name, str) or not name.strip():
            return f"the token has no {self._claim} claim naming the principal", "", 0.0
        exp = claims.get("exp")
        if not isinstance(exp, int | float) or isinstance(exp, bool):
            return "the token has no numeric exp claim", "", 0.0
        if exp * 1000 + self._skew <= self._now_ms():
            return "the token expired", "", 0.0
        scope = claims.get("scope", [])
        granted = set(scope.split() if isinstance(scope, str) else scope or [])
        missing = [s for s in self._required if s not in granted]
        if missing:
            return f"the token's scope lacks {', '.join(missing)}", "", 0.0
        return "", name, float(exp * 1000)
