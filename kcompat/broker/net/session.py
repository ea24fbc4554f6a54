"""What one client connection knows about its peer: the listener it came
in on, who it is, how far its SASL authentication got.

Theory of operation
-------------------
A connection starts as ``User:ANONYMOUS``; on a TLS listener a verified
client certificate names it instead (``ssl.principal.mapping.rules``). On a
SASL listener it must authenticate before anything but ApiVersions,
SaslHandshake and SaslAuthenticate: SaslHandshake picks a mechanism
(``mechanism``), SaslAuthenticate steps it until complete, and the principal
becomes ``User:<authorization id>``. With ``connections.max.reauth.ms`` set,
an authentication holds until ``reauth_deadline`` (KIP-368): the client must
authenticate again on the same connection before then — as the same
principal — or its next request closes the connection. A failed
authentication answers with the reason and closes the connection after
``connection.failed.authentication.delay.ms``.

``mute_until`` is when the connection may read its next request: quotas
(KIP-219) mute a throttled client's connection after its answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from kcompat.broker.net.listeners import Listener
from kcompat.security.principal import ANONYMOUS
from kcompat.security.sasl import SaslServer


@dataclass
class Session:
    listener: Listener
    client_host: str = ""
    principal: str = ANONYMOUS
    authenticated: bool = False  # SASL done (always True off SASL listeners)
    mechanism: SaslServer | None = None  # chosen by SaslHandshake, until complete
    raw_tokens: bool = False  # SaslHandshake v0: tokens come as bare frames
    reauth_deadline: float | None = None  # trio time after which it must re-authenticate
    failed: str = ""  # why authentication failed: close after the delay
    mute_until: float = 0.0  # trio time: read nothing before (quota throttling)
    cluster_action_checked: bool = False  # a peer broker's Raft frames were authorized
    # a handler may answer ``Later`` (a client's connection; not an internal call)
    pipelined: bool = False

    @classmethod
    def open(cls, listener: Listener, client_host: str = "") -> Session:
        return cls(listener, client_host, authenticated=not listener.sasl)
