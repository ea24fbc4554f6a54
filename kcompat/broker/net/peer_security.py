"""The inter-broker link on a secured listener: TLS and SASL as a client.

Theory of operation
-------------------
Brokers dial each other's inter-broker listener (``listeners``: the one
``inter.broker.listener.name`` names) and send one-way Raft frames on that
connection (``replication.transport``). When that listener is secured, the
dialling broker speaks its protocol first, exactly as a Kafka client would:

- SSL / SASL_SSL: TLS, trusting the listener's truststore, presenting the
  listener's keystore as its own certificate (so ``ssl.client.auth=required``
  works between brokers: mutual TLS), checking the peer's host name unless
  ``ssl.endpoint.identification.algorithm`` is empty;
- SASL_PLAINTEXT / SASL_SSL: SaslHandshake v1 and SaslAuthenticate v1 with
  ``sasl.mechanism.inter.broker.protocol``, as the ``username``/``password``
  of that mechanism's JAAS config on the listener (Kafka's own broker
  settings). PLAIN only: SCRAM credentials live in the metadata log the
  brokers replicate over this very link, so a cluster could never start
  with them (Kafka bootstraps them at format time; kcompat has no format
  step) — a clear error at start-up instead.

The receiving broker treats the connection as any client's: authenticated
before anything but ApiVersions and SASL, and (with an authorizer) its
principal must be allowed CLUSTER_ACTION on the cluster to send Raft frames
(``connection``).
"""

from __future__ import annotations

import ssl
import struct
from collections.abc import Awaitable, Callable

import trio

from kcompat.broker.config.broker_config import BrokerConfig
from kcompat.broker.config.configdef import ConfigError
from kcompat.broker.net import listeners
from kcompat.broker.net.listeners import Listener
from kcompat.security import sasl

CLIENT_ID = "kcompat-inter-broker"
HANDSHAKE_S = 5.0

Secure = Callable[[trio.SocketStream, str], Awaitable[trio.abc.Stream]]


class PeerAuthError(Exception):
    """The peer refused this broker (its reason)."""


def client_context(config: BrokerConfig, listener: Listener) -> ssl.SSLContext:
    def get(key: str) -> str:
        return str(config.for_listener(listener.prefix, key) or "")

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    trust_file, trust_pem = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    if trust_file or trust_pem:
        ctx.load_verify_locations(cafile=trust_file or None, cadata=trust_pem or None)
    else:
        ctx.load_default_certs()
    ctx.check_hostname = bool(get("ssl.endpoint.identification.algorithm"))
    keystore = get("ssl.keystore.location")
    if keystore:
        ctx.load_cert_chain(keystore, password=get("ssl.key.password")
                            or get("ssl.keystore.password") or None)
    return ctx


def credentials(config: BrokerConfig, listener: Listener) -> tuple[str, str, str]:
    """(mechanism, username, password) this broker authenticates with."""
    mechanism = str(config.for_listener(listener.prefix,
                                        "sasl.mechanism.inter.broker.protocol")).upper()
    key = f"listener.name.{listener.prefix}.{mechanism.lower()}.sasl.jaas.config"
    if mechanism != sasl.PLAIN:
        raise ConfigError("sasl.mechanism.inter.broker.protocol",
                          f"the inter-broker listener {listener.name} uses SASL: kcompat "
                          f"brokers authenticate to each other with PLAIN (or use an SSL "
                          f"listener with client certificates), not {mechanism}")
    if mechanism not in listeners.mechanisms(config, listener):
        raise ConfigError("sasl.enabled.mechanisms",
                          f"{mechanism} (sasl.mechanism.inter.broker.protocol) is not enabled "
                          f"on the inter-broker listener {listener.name}")
    entry = listeners.jaas_entry(config, listener, mechanism)
    if entry is None or "username" not in entry.options or "password" not in entry.options:
        raise ConfigError(key, "the inter-broker listener's JAAS config must name this "
                          "broker's own username=\"...\" password=\"...\"")
    return mechanism, entry.options["username"], entry.options["password"]


def dialer(config: BrokerConfig, listener: Listener, strict: bool = True) -> Secure | None:
    """How to secure a connection to a peer's inter-broker listener (None:
    plain). Not ``strict`` (a quorum of one, which dials a peer only once a
    broker joins it), a setting it cannot use fails each dial, logged, instead
    of the start."""
    if listener.protocol == "PLAINTEXT":
        return None
    try:
        tls = client_context(config, listener) if listener.tls else None
        creds = credentials(config, listener) if listener.sasl else None
    except (ConfigError, OSError, ssl.SSLError) as e:
        if strict:
            raise ConfigError("inter.broker.listener.name", str(e)) from None
        problem = str(e)

        async def refuse(stream: trio.SocketStream, host: str) -> trio.abc.Stream:
            raise PeerAuthError(problem)

        return refuse

    async def secure(stream: trio.SocketStream, host: str) -> trio.abc.Stream:
        conn: trio.abc.Stream = stream
        with trio.fail_after(HANDSHAKE_S):
            if tls is not None:
                conn = trio.SSLStream(stream, tls, server_hostname=host)
                await conn.do_handshake()
            if creds is not None:
                await _authenticate(conn, *creds)
        return conn

    return secure


def _frame(api_key: int, correlation_id: int, body: bytes) -> bytes:
    client = CLIENT_ID.encode()
    header = struct.pack(">hhih", api_key, 1, correlation_id, len(client)) + client
    return struct.pack(">i", len(header) + len(body)) + header + body


async def _read_frame(conn: trio.abc.Stream) -> bytes:
    buf = b""
    while len(buf) < 4 or len(buf) < 4 + struct.unpack_from(">i", buf)[0]:
        chunk = await conn.receive_some(65536)
        if not chunk:
            raise PeerAuthError("the peer closed the connection during SASL authentication")
        buf += chunk
    return buf[4:]


async def _authenticate(conn: trio.abc.Stream, mechanism: str, user: str, password: str
                        ) -> None:
    """SaslHandshake v1 then SaslAuthenticate v1 (PLAIN), as a Kafka client sends them."""
    name = mechanism.encode()
    await conn.send_all(_frame(17, 1, struct.pack(">h", len(name)) + name))
    answer = await _read_frame(conn)
    (error,) = struct.unpack_from(">h", answer, 4)
    if error:
        raise PeerAuthError(f"SaslHandshake {mechanism}: error {error}")
    token = b"\0" + user.encode() + b"\0" + password.encode()
    await conn.send_all(_frame(36, 2, struct.pack(">i", len(token)) + token))
    answer = await _read_frame(conn)
    error, size = struct.unpack_from(">hh", answer, 4)
    if error:
        message = answer[8:8 + size].decode(errors="replace") if size > 0 else ""
        raise PeerAuthError(f"SaslAuthenticate: error {error} {message}")
