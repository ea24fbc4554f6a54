"""Binding the admin port: where, whether, and with which TLS context.

Config: ``admin.port`` (default 9644; 0 picks a free port; -1 disables) and
``admin.host`` (empty = the broker's ``host``). A default port that is taken
only logs a warning — the Kafka listener matters more; an explicitly
configured one that cannot be bound stops the broker with a one-line error.

When any Kafka listener is secured (SSL or SASL), an unset ``admin.host``
means 127.0.0.1 — the port answers this machine only — and binding anything
but a loopback address without ``admin.token`` stops the broker naming the
key: a secured broker never serves its metrics or its API to the network
unauthenticated by accident.

TLS (``admin.tls``): ``auto`` (the default) serves HTTPS when a Kafka
listener speaks TLS (SSL or SASL_SSL), with that listener's keystore and
protocols — a client listener's rather than the inter-broker one's when both
exist; ``true`` requires such a listener; ``false`` serves plain HTTP. The
admin port asks no client certificate (its callers authenticate with HTTP
basic auth or the bearer token), whatever the listener asks.

The socket is bound here (so a bind failure is the broker's one-line error)
and handed to ``serve.run_admin_http``. This module imports nothing of the HTTP
stack: a broker whose admin port is off or taken (most brokers of a test
suite, where the first one takes the default port) never loads hypercorn and
starlette, about 85 ms of its start and 5 MiB of its memory.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import ssl

from kcompat.broker.config.configdef import ConfigError
from kcompat.broker.host.broker import Broker
from kcompat.broker.net.listeners import inter_broker_name, server_context

log = logging.getLogger("kcompat.admin")


def open_admin_sockets(broker: Broker) -> list[socket.socket]:
    """Bind the admin port per config; [] when disabled or (default port) taken."""
    config = broker.config
    port = config["admin.port"]
    if port < 0:
        return []
    secured = any(item.protocol != "PLAINTEXT" for item in broker.listeners)
    host = config["admin.host"] or ("127.0.0.1" if secured else config["host"])
    if secured and not config["admin.token"] and not _loopback(host):
        raise ConfigError("admin.token", f"the Kafka listeners are secured but the admin HTTP "
                          f"port would serve {host} to anyone: set admin.token (a bearer "
                          "token) or bind admin.host to a loopback address")
    try:
        sockets = _bind(host, port)
    except OSError as e:
        if "admin.port" in config.explicit:
            raise OSError(e.errno, f"admin.port {host}:{port}: {e.strerror}") from None
        log.warning("admin HTTP disabled: cannot bind %s:%d (%s); set admin.port", host, port,
                    e.strerror)
        return []
    bound = sockets[0].getsockname()
    scheme = "https" if tls_context(broker) is not None else "http"
    log.info("admin HTTP on %s://%s:%d (/metrics, /health, /v3)", scheme, bound[0], bound[1])
    return sockets


def tls_context(broker: Broker) -> ssl.SSLContext | None:
    """The admin port's TLS context per ``admin.tls``; None for plain HTTP."""
    mode = broker.config["admin.tls"]
    if mode == "false":
        return None
    tls = [item for item in broker.listeners if item.tls]
    if not tls:
        if mode == "true":
            raise ConfigError("admin.tls", "admin.tls=true needs a Kafka listener with TLS "
                                           "(SSL or SASL_SSL) whose keystore it can use")
        return None
    inter = inter_broker_name(broker.config, broker.listeners)
    chosen = next((item for item in tls if item.name != inter), tls[0])
    ctx = server_context(broker.config, chosen)
    ctx.verify_mode = ssl.CERT_NONE  # callers authenticate over HTTP, not by certificate
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    return ctx


def _bind(host: str, port: int) -> list[socket.socket]:
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                               flags=socket.AI_PASSIVE)
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return [sock]


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
