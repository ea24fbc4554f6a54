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

import ipaddress
from dataclasses import dataclass

from kcompat.broker.listeners import Listener
from kcompat.security.principal import ANONYMOUS
from kcompat.security.sasl import SaslServer


def host_address(ip: str) -> str:
    """A peer's address as Kafka (Java's ``InetAddress.getHostAddress``) writes
    it — what ACL hosts, client hosts and per-IP limits name: an IPv4-mapped
    IPv6 address as IPv4, IPv6 as eight groups without ``::`` compression
    (``0:0:0:0:0:0:0:1``), a zone kept after ``%``."""
    address, sep, zone = ip.partition("%")
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return ip
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        groups = parsed.packed
        text = ":".join(f"{int.from_bytes(groups[i:i + 2], 'big'):x}" for i in range(0, 16, 2))
        return text + sep + zone
    return str(parsed)


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

    @classmethod
    def open(cls, listener: Listener, client_host: str = "") -> Session:
        return cls(listener, client_host, authenticated=not listener.sasl)
