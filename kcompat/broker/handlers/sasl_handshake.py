"""SaslHandshake (key 17), versions 0–1: pick the SASL mechanism.

Quirks: v0 means the client then sends bare tokens, not SaslAuthenticate
requests (``connection`` handles those frames); v1 is followed by
SaslAuthenticate. A mechanism the listener does not enable answers
UNSUPPORTED_SASL_MECHANISM with the enabled ones, then the connection
closes (Kafka's SaslServerAuthenticator does the same). On a listener
without SASL, or on an authenticated connection that may not
re-authenticate (``connections.max.reauth.ms`` unset), ILLEGAL_SASL_STATE
and the connection stays open, as Kafka's request handler answers. A
re-authentication (KIP-368) must keep the first mechanism.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers._common import OK
from kcompat.broker.host.context import RequestContext


async def handle(ctx: RequestContext, request: Any) -> Any:
    session = ctx.session
    assert session is not None  # a client connection's request
    enabled = ctx.broker.sasl_mechanisms(session.listener)
    mechanism = request.mechanism.upper()
    reauthenticating = session.authenticated and session.reauth_deadline is not None
    if not session.listener.sasl or (session.authenticated and not reauthenticating):
        return ctx.response(error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    if mechanism not in enabled or (reauthenticating and session.mechanism is not None
                                    and session.mechanism.mechanism != mechanism):
        session.failed = (f"Unsupported SASL mechanism {request.mechanism}"
                          if mechanism not in enabled else
                          "a re-authentication must use the mechanism of the first one")
        return ctx.response(error_code=ErrorCode.unsupported_sasl_mechanism,
                            mechanisms=tuple(enabled))
    session.mechanism = ctx.broker.sasl_server(session.listener, mechanism, reauthenticating)
    session.raw_tokens = ctx.version == 0
    return ctx.response(error_code=OK, mechanisms=tuple(enabled))
