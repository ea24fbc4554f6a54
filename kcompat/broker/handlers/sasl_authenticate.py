"""SaslAuthenticate (key 36), versions 0–2: one SASL token each way.

Quirks: the mechanism chosen by SaslHandshake steps the token
(``kcompat.security.sasl``); once complete the connection's principal is
``User:<authorization id>``. v1+ answers ``session_lifetime_ms``
(``connections.max.reauth.ms``, KIP-368): the client re-authenticates before
it ends, as the same principal, or the connection closes at its next
request. A failure answers SASL_AUTHENTICATION_FAILED with the reason,
after ``connection.failed.authentication.delay.ms``, and closes the
connection. Without a SaslHandshake first, or on a listener without SASL,
ILLEGAL_SASL_STATE (and, on a SASL listener, the connection closes).
"""

from __future__ import annotations

import datetime
import logging
import time
from typing import Any

import trio
from kio.schema.errors import ErrorCode

from kcompat.broker.handlers._common import OK
from kcompat.broker.host.broker import Broker
from kcompat.broker.host.context import RequestContext
from kcompat.broker.net.session import Session
from kcompat.security import principal
from kcompat.security.sasl import SaslError

log = logging.getLogger("kcompat.auth")


def step(broker: Broker, session: Session, token: bytes) -> tuple[bytes, str | None]:
    """Step the session's mechanism: (the reply, None) or (b"", why it failed);
    on completion the session is authenticated."""
    mechanism = session.mechanism
    if mechanism is None:
        session.failed = "SaslAuthenticate without a SaslHandshake first"
        return b"", session.failed
    try:
        reply = mechanism.step(bytes(token))
    except SaslError as e:
        session.failed = str(e)
        log.info("authentication of %s on %s with %s failed: %s", session.client_host,
                 session.listener.name, mechanism.mechanism, getattr(e, "reason", None) or e)
        return b"", session.failed
    if mechanism.complete:
        who = principal.user(mechanism.authorization_id)
        if session.authenticated and who != session.principal:
            session.failed = (f"Cannot change principals during re-authentication from "
                              f"{session.principal}: {who}")
            return b"", session.failed
        session.principal, session.authenticated = who, True
        lifetime = broker.config.for_listener(session.listener.prefix,
                                              "connections.max.reauth.ms")
        expires = getattr(mechanism, "expires_at_ms", None)  # a token's own expiry
        if lifetime and expires is not None:
            lifetime = max(0.0, min(lifetime, expires - time.time() * 1000))
        session.reauth_deadline = trio.current_time() + lifetime / 1000 if lifetime else None
        session.mechanism = mechanism if lifetime else None  # kept to check a re-authentication
    return reply, None


async def handle(ctx: RequestContext, request: Any) -> Any:
    session = ctx.session
    assert session is not None  # a client connection's request
    fields: dict[str, Any] = {}
    if ctx.version >= 1:
        fields["session_lifetime"] = datetime.timedelta(0)
    if not session.listener.sasl or (session.mechanism is None and session.authenticated):
        return ctx.response(error_code=ErrorCode.illegal_sasl_state,
                            error_message="Unexpected SaslAuthenticate request: no SASL "
                            "handshake in progress", auth_bytes=b"", **fields)
    reply, error = step(ctx.broker, session, request.auth_bytes)
    if error is not None:
        code = (ErrorCode.illegal_sasl_state if "SaslHandshake" in error
                else ErrorCode.sasl_authentication_failed)
        return ctx.response(error_code=code, error_message=error, auth_bytes=b"", **fields)
    if ctx.version >= 1 and session.reauth_deadline is not None:
        remaining = max(0.0, session.reauth_deadline - trio.current_time())
        fields["session_lifetime"] = datetime.timedelta(seconds=remaining)
    return ctx.response(error_code=OK, error_message=None, auth_bytes=reply, **fields)
