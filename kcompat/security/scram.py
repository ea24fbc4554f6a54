"""SCRAM-SHA-256 / SCRAM-SHA-512: credentials and the server side of the exchange.

Theory of operation
-------------------
RFC 5802 (SCRAM) with RFC 7677's SHA-256 and Kafka's SHA-512, as Kafka's
``ScramSaslServer`` speaks it. A user's password never reaches the broker:
the client salts it (``Hi``, i.e. PBKDF2-HMAC, ``iterations`` rounds) and
the broker keeps only a ``ScramCredential`` — the salt, the iterations,
``StoredKey = H(HMAC(salted, "Client Key"))`` and ``ServerKey =
HMAC(salted, "Server Key")`` (``credential_from_salted``, Kafka's
``ScramFormatter``). Nothing stored lets anyone log in: the client proves it
knows ``ClientKey`` (``ClientProof = ClientKey XOR HMAC(StoredKey,
AuthMessage)``; the server checks ``H(proof XOR signature) == StoredKey``),
the server proves it knows ``ServerKey`` (``v=HMAC(ServerKey, AuthMessage)``).

``ScramServer`` is one exchange, a small state machine driven by ``step``:

1. client-first ``n,[a=AUTHZID],n=SASLNAME,r=CNONCE[,ext=value...]``: only the
   gs2 header ``n`` (Kafka supports no channel binding: ``y`` or ``p=`` is a
   malformed message); the user is SASLNAME unescaped (``=2C`` is ``,``,
   ``=3D`` is ``=``; like Kafka, ASCII only); an authzid, if given, must name
   the user; extensions are ignored except ``tokenauth=true`` (a delegation
   token: kcompat has none, so it fails). The user's credential is looked
   up; none, or one with fewer iterations than 4096, fails.
2. server-first ``r=CNONCE+SNONCE,s=base64(salt),i=iterations``.
3. client-final ``c=base64(gs2 header),r=NONCE,p=base64(proof)``: the nonce
   must be the server-first one and the proof must verify.
4. server-final ``v=base64(ServerSignature)``; the exchange is ``complete``
   and ``authorization_id`` is the user.

Any other token, or a token after completion or failure, fails. Failures
tell the client only what Kafka tells it: Kafka's ``SaslServerAuthenticator``
replaces every SCRAM failure by "Authentication failed during
authentication due to invalid credentials with SASL mechanism
SCRAM-SHA-512" ("re-authentication" on a re-authentication, KIP-368), so an
unknown user, a wrong password, a bad nonce and a malformed message read the
same; ``ScramFailure.reason`` keeps the cause for the broker's log. The one
exception is Kafka's too: an authzid other than the (known) user is told so.
Like Kafka, an unknown user fails at client-first (a wrong password only at
client-final).

The AuthMessage is ``client-first-bare,server-first,client-final-without-proof``
as the client sent them (Kafka rebuilds the first and last from their
parsed fields; both are the same for every client that sends no extensions
in its final message).

Pure: the credentials come through ``credential_of`` and the server nonce
(random, from the caller) through the constructor.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kcompat.security.sasl import SCRAM_SHA_256, SCRAM_SHA_512, SaslError

#: mechanism name -> hashlib name (the HMAC and H of RFC 5802)
HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
#: KIP-554's mechanism type numbers (Describe/AlterUserScramCredentials), 0 is UNKNOWN
MECHANISM_TYPES = {SCRAM_SHA_256: 1, SCRAM_SHA_512: 2}
#: Kafka's ``ScramMechanism.minIterations`` (both mechanisms): fewer never log in
MIN_ITERATIONS = 4096


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the broker stores for one user and mechanism (never the password)."""

    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int

    def to_json(self) -> dict[str, Any]:
        """As the metadata log and its checkpoints keep it (keys in base64)."""
        return {"salt": base64.b64encode(self.salt).decode(),
                "stored_key": base64.b64encode(self.stored_key).decode(),
                "server_key": base64.b64encode(self.server_key).decode(),
                "iterations": self.iterations}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ScramCredential:
        return cls(base64.b64decode(doc["salt"]), base64.b64decode(doc["stored_key"]),
                   base64.b64decode(doc["server_key"]), int(doc["iterations"]))


def mechanism_of_type(mechanism_type: int) -> str | None:
    """KIP-554's type number -> mechanism name; None for UNKNOWN or anything else."""
    for name, number in MECHANISM_TYPES.items():
        if number == mechanism_type:
            return name
    return None


def _hmac(mechanism: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, HASHES[mechanism]).digest()


def salted_password(mechanism: str, password: bytes, salt: bytes, iterations: int) -> bytes:
    """RFC 5802 ``Hi(Normalize(password), salt, i)`` (Kafka normalizes nothing: UTF-8)."""
    return hashlib.pbkdf2_hmac(HASHES[mechanism], password, salt, iterations)


def credential_from_salted(mechanism: str, salt: bytes, salted: bytes,
                           iterations: int) -> ScramCredential:
    """The stored credential for a salted password (what AlterUserScramCredentials
    sends); ValueError for an empty salted password (an HMAC key must not be
    empty: Kafka's ``SecretKeySpec`` refuses it too)."""
    if not salted:
        raise ValueError("Empty key")
    client_key = _hmac(mechanism, salted, b"Client Key")
    stored_key = hashlib.new(HASHES[mechanism], client_key).digest()
    return ScramCredential(salt, stored_key, _hmac(mechanism, salted, b"Server Key"),
                           iterations)


def sasl_name(username: str) -> str:
    """RFC 5802 ``saslname``: ``=`` as ``=3D``, ``,`` as ``=2C``."""
    return username.replace("=", "=3D").replace(",", "=2C")


def username(saslname: str) -> str:
    """The user a (well-formed) ``saslname`` names."""
    return re.sub("=2C|=3D", lambda m: "," if m.group() == "=2C" else "=", saslname)


# Kafka's ScramMessages grammar (ASCII only; ``,`` separates attributes)
_ALPHA = "[A-Za-z]+"
_VALUE = "[\\x01-\\x2b\\x2d-\\x7f]+"
_PRINTABLE = "[\\x21-\\x2b\\x2d-\\x7e]+"
_SASLNAME = "(?:[\\x01-\\x2b\\x2d-\\x3c\\x3e-\\x7f]|=2C|=3D)+"
_B64 = "[A-Za-z0-9/+]"
_BASE64 = f"(?:{_B64}{{4}})*(?:{_B64}{{3}}=|{_B64}{{2}}==)?"
_EXTENSIONS = f"(?:,{_ALPHA}={_VALUE})*"
_CLIENT_FIRST = re.compile(
    f"n,(?:a=(?P<authzid>{_SASLNAME}))?,(?P<bare>(?:m={_VALUE},)?n=(?P<saslname>{_SASLNAME}),"
    f"r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS}))")
_CLIENT_FINAL = re.compile(
    f"(?P<without_proof>c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS}),"
    f"p=(?P<proof>{_BASE64})")
_SERVER_NONCE = re.compile(_PRINTABLE)

_RECEIVE_CLIENT_FIRST, _RECEIVE_CLIENT_FINAL, _COMPLETE, _FAILED = range(4)


class ScramFailure(SaslError):
    """A failed SCRAM exchange: ``str(e)`` is Kafka's text for the client,
    ``reason`` the cause, for the broker's log only."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def failure_message(mechanism: str, reauthentication: bool = False) -> str:
    """What Kafka tells a client whose SCRAM exchange failed."""
    phase = "re-authentication" if reauthentication else "authentication"
    return (f"Authentication failed during {phase} due to invalid credentials with SASL "
            f"mechanism {mechanism}")


def _extensions(text: str) -> dict[str, str]:
    pairs = (item.partition("=") for item in text.split(",") if item)
    return {key: value for key, _, value in pairs}


class ScramServer:
    """One SCRAM exchange on the server side (``kcompat.security.sasl.SaslServer``)."""

    def __init__(self, mechanism: str, credential_of: Callable[[str], ScramCredential | None],
                 server_nonce: str, *, reauthentication: bool = False) -> None:
        if mechanism not in HASHES:
            raise ValueError(f"{mechanism} is not a SCRAM mechanism")
        if not _SERVER_NONCE.fullmatch(server_nonce):
            raise ValueError("a server nonce is printable ASCII without ','")
        self.mechanism = mechanism
        self.complete = False
        self.authorization_id = ""
        self._credential_of = credential_of
        self._server_nonce = server_nonce
        self._reauthentication = reauthentication
        self._state = _RECEIVE_CLIENT_FIRST
        self._credential: ScramCredential | None = None
        self._user = ""
        self._client_first_bare = ""
        self._server_first = ""

    def step(self, token: bytes) -> bytes:
        try:
            if self._state == _RECEIVE_CLIENT_FIRST:
                answer = self._client_first(token)
                self._state = _RECEIVE_CLIENT_FINAL
            elif self._state == _RECEIVE_CLIENT_FINAL:
                answer = self._client_final(token)
                self._state = _COMPLETE
                self.complete = True
            else:
                state = "COMPLETE" if self.complete else "FAILED"
                raise SaslError(f"Unexpected SASL request in {self.mechanism} server state "
                                f"{state}")
        except SaslError:
            if not self.complete:
                self._state = _FAILED
            self._credential = None
            raise
        return answer

    def _fail(self, reason: str) -> ScramFailure:
        return ScramFailure(failure_message(self.mechanism, self._reauthentication), reason)

    def _client_first(self, token: bytes) -> bytes:
        found = _CLIENT_FIRST.fullmatch(token.decode("utf-8", errors="replace"))
        if found is None:
            raise self._fail("invalid SCRAM client first message format")
        user = username(found["saslname"])
        if _extensions(found["extensions"]).get("tokenauth", "").lower() == "true":
            raise self._fail(f"token authentication for {user!r}: no delegation tokens")
        credential = self._credential_of(user)
        if credential is None:
            raise self._fail(f"no {self.mechanism} credential for user {user!r}")
        authzid = found["authzid"]
        if authzid is not None and username(authzid) != user:
            raise SaslError("Authentication failed: Client requested an authorization id "
                            "that is different from username")
        if credential.iterations < MIN_ITERATIONS:
            raise self._fail(f"iterations {credential.iterations} is less than the minimum "
                             f"{MIN_ITERATIONS} for {self.mechanism}")
        self._credential = credential
        self._user = user
        self._client_first_bare = found["bare"]
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = (f"r={found['nonce']}{self._server_nonce},s={salt},"
                              f"i={credential.iterations}")
        return self._server_first.encode()

    def _client_final(self, token: bytes) -> bytes:
        found = _CLIENT_FINAL.fullmatch(token.decode("utf-8", errors="replace"))
        if found is None:
            raise self._fail("invalid SCRAM client final message format")
        if found["nonce"] != self._server_first[2:].partition(",")[0]:
            raise self._fail("invalid client nonce in the final client message")
        credential = self._credential
        assert credential is not None
        auth_message = ",".join((self._client_first_bare, self._server_first,
                                 found["without_proof"])).encode()
        signature = _hmac(self.mechanism, credential.stored_key, auth_message)
        try:
            proof = base64.b64decode(found["proof"], validate=True)
        except binascii.Error:
            raise self._fail("invalid client proof encoding") from None
        if len(proof) != len(signature):
            raise self._fail("client proof of the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        computed = hashlib.new(HASHES[self.mechanism], client_key).digest()
        if not hmac.compare_digest(computed, credential.stored_key):
            raise self._fail("invalid client credentials (wrong password)")
        server_signature = _hmac(self.mechanism, credential.server_key, auth_message)
        self.authorization_id = self._user
        return b"v=" + base64.b64encode(server_signature)
