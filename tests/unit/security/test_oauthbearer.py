"""OAUTHBEARER's server side with unsecured tokens, driven by kafka-python's
client mechanism (an independent implementation of RFC 7628's messages)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from kafka.net.sasl.oauth import AbstractTokenProvider, SaslMechanismOAuth

from kcompat.security.oauthbearer import OAuthBearerServer
from kcompat.security.sasl import SaslError

NOW_MS = 1_800_000_000_000


def _part(obj: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")


def unsecured(claims: dict[str, Any], alg: str = "none", signature: str = "") -> str:
    return f"{_part({'alg': alg})}.{_part(claims)}.{signature}"


class Provider(AbstractTokenProvider):
    def __init__(self, token: str, extensions: dict[str, str] | None = None) -> None:
        self._token, self._ext = token, extensions or {}

    def token(self) -> str:
        return self._token

    def extensions(self) -> dict[str, str]:
        return self._ext


def exchange(server: OAuthBearerServer, token: str, **ext: str) -> SaslMechanismOAuth:
    client = SaslMechanismOAuth(sasl_oauth_token_provider=Provider(token, ext))
    while not client.is_done():
        reply = server.step(client.auth_bytes())
        client.receive(reply)
    return client


def server(**kw: Any) -> OAuthBearerServer:
    return OAuthBearerServer(lambda: NOW_MS, **kw)


def test_a_valid_unsecured_token_names_the_principal_and_its_expiry() -> None:
    s = server()
    client = exchange(s, unsecured({"sub": "alice", "exp": NOW_MS // 1000 + 60}), traceId="1")
    assert client.is_authenticated()
    assert (s.complete, s.authorization_id, s.expires_at_ms) == (True, "alice", NOW_MS + 60_000)


@pytest.mark.parametrize("claims,alg,signature,reason", [
    ({"sub": "alice", "exp": NOW_MS // 1000 - 1}, "none", "", "the token expired"),
    ({"exp": NOW_MS // 1000 + 60}, "none", "", "no sub claim"),
    ({"sub": "alice"}, "none", "", "no numeric exp claim"),
    ({"sub": "alice", "exp": NOW_MS // 1000 + 60}, "RS256", "", "only unsecured tokens"),
    ({"sub": "alice", "exp": NOW_MS // 1000 + 60}, "none", "c2ln", "only unsecured tokens"),
])
def test_a_refused_token_gets_the_json_error_then_fails(
        claims: dict[str, Any], alg: str, signature: str, reason: str) -> None:
    s = server()
    client = SaslMechanismOAuth(sasl_oauth_token_provider=Provider(
        unsecured(claims, alg, signature)))
    reply = s.step(client.auth_bytes())
    assert json.loads(reply) == {"status": "invalid_token"}
    client.receive(reply)
    with pytest.raises(SaslError, match=reason):
        s.step(client.auth_bytes())  # the client's \x01 acknowledgement
    assert not s.complete


def test_required_scope_clock_skew_and_principal_claim() -> None:
    token = unsecured({"user": "bob", "exp": NOW_MS // 1000 - 1, "scope": "read write"})
    s = server(required_scope=["write"], clock_skew_ms=5000, principal_claim="user")
    assert exchange(s, token).is_authenticated() and s.authorization_id == "bob"
    s = server(required_scope=["admin"], clock_skew_ms=5000, principal_claim="user")
    with pytest.raises(SaslError, match="scope lacks admin"):
        exchange(s, token)


@pytest.mark.parametrize("message", [b"", b"y,,\x01auth=Bearer x\x01\x01", b"n,,\x01\x01",
                                     b"n,,\x01auth=Basic abc\x01\x01", b"\xff\xfe"])
def test_malformed_client_messages(message: bytes) -> None:
    with pytest.raises(SaslError, match="Invalid OAUTHBEARER"):
        server().step(message)


def test_garbage_tokens_are_refused_not_crashed_on() -> None:
    for token in ("a.b", "!!!.???.", f"{_part([1])}.{_part({})}."):
        s = server()
        assert json.loads(s.step(f"n,,\x01auth=Bearer {token}\x01\x01".encode()))
