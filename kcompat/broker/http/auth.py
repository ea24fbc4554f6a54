"""Who an HTTP request acts for: HTTP basic auth checked as SASL would check it.

A REST request may carry ``Authorization: Basic base64(user:password)``. The
pair is checked against what the broker's SASL listeners accept: PLAIN's users
(a SASL listener's JAAS config with PLAIN enabled) and the SCRAM credentials
in the metadata (AlterUserScramCredentials, a SCRAM mechanism enabled on a
SASL listener) — the salted password recomputed from the one given, off the
event loop, and compared with the stored key. The request then acts as
``User:<user>``, the principal a Kafka client logging in with that pair gets,
under the same ACLs. A broker with any SASL listener requires it on the REST
API (401, error 40101, without); one without serves REST requests as
``User:ANONYMOUS``, as its PLAINTEXT listener serves Kafka clients.

A checked pair is remembered for ``CACHE_S`` (keyed by a hash of the
password and, for SCRAM, the stored key, so a changed credential is checked
again), because PBKDF2 with thousands of rounds per request would cost more
than the request.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time

from kcompat.broker.host.broker import Broker
from kcompat.broker.loop.offload import run_cpu
from kcompat.broker.net import listeners
from kcompat.security import sasl
from kcompat.security.scram import credential_from_salted, salted_password

CACHE_S = 60.0
CACHE_MAX = 1024
SCRAMS = (sasl.SCRAM_SHA_512, sasl.SCRAM_SHA_256)


class BasicAuth:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._checked: dict[tuple[str, bytes, bytes], float] = {}  # -> valid until

    def _mechanisms(self) -> dict[str, list[listeners.Listener]]:
        out: dict[str, list[listeners.Listener]] = {}
        for item in self.broker.listeners:
            for mechanism in self.broker.sasl_mechanisms(item):
                out.setdefault(mechanism, []).append(item)
        return out

    @property
    def required(self) -> bool:
        """Whether the broker authenticates its clients (any SASL listener)."""
        return any(item.sasl for item in self.broker.listeners)

    async def principal(self, header: str) -> str | None:
        """``User:<name>`` for a valid ``Basic`` credential, else None."""
        scheme, _, encoded = header.strip().partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            user, sep, password = base64.b64decode(encoded.strip(), validate=True).decode(
                ).partition(":")
        except (binascii.Error, ValueError):
            return None
        if not sep or not user:
            return None
        return f"User:{user}" if await self._valid(user, password) else None

    async def _valid(self, user: str, password: str) -> bool:
        enabled = self._mechanisms()
        secret = password.encode()
        for item in enabled.get(sasl.PLAIN, ()):
            known = listeners.plain_users(self.broker.config, item).get(user)
            if known is not None and hmac.compare_digest(known.encode(), secret):
                return True
        for mechanism in SCRAMS:
            if mechanism not in enabled:
                continue
            stored = self.broker.scram_credential(mechanism, user)
            if stored is None:
                continue
            key = (f"{mechanism}/{user}", hashlib.sha256(secret).digest(), stored.stored_key)
            now = time.monotonic()
            if self._checked.get(key, 0.0) > now:
                return True
            salted = await run_cpu(salted_password, mechanism, secret, stored.salt,
                                   stored.iterations)
            made = credential_from_salted(mechanism, stored.salt, salted, stored.iterations)
            if hmac.compare_digest(made.stored_key, stored.stored_key):
                if len(self._checked) >= CACHE_MAX:
                    self._checked = {k: t for k, t in self._checked.items() if t > now}
                    if len(self._checked) >= CACHE_MAX:
                        self._checked.clear()
                self._checked[key] = now + CACHE_S
                return True
        return False
