"""Binding the admin port and serving the HTTP app on the broker's loop.

Config: ``admin.port`` (default 9644; 0 picks a free port; -1 disables) and
``admin.host`` (empty = the broker's ``host``). A default port that is taken
only logs a warning — the Kafka listener matters more; an explicitly
configured one that cannot be bound stops the broker with a one-line error.

When any Kafka listener is secured (SSL or SASL), an unset ``admin.host``
means 127.0.0.1 — the port answers this machine only — and binding anything
but a loopback address without ``admin.token`` stops the broker naming the
key: a secured broker never serves its metrics or its API to the network
unauthenticated by accident.

The socket is bound here (so a bind failure is the broker's one-line error)
and handed to hypercorn's trio worker, which runs its connections in the
broker's own nursery until the node cancels it.
"""

from __future__ import annotations

import ipaddress
import logging
import socket

from hypercorn.config import Config, Sockets
from hypercorn.trio.run import worker_serve
from hypercorn.utils import wrap_app

from kcompat.broker.config.configdef import ConfigError
from kcompat.broker.host.broker import Broker
from kcompat.broker.http.app import build_app

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
    log.info("admin HTTP on http://%s:%d (/metrics, /health, /v3)", bound[0], bound[1])
    return sockets


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


async def run_admin_http(broker: Broker, sockets: list[socket.socket]) -> None:
    """Serve the app on already-bound ``sockets`` until cancelled."""
    if not sockets:
        return
    config = Config()
    config.accesslog = None
    errors = logging.getLogger("kcompat.http.server")
    errors.setLevel(logging.WARNING)  # not its "Running on ... (CTRL + C to quit)"
    config.errorlog = errors
    config.keep_alive_timeout = 60  # REST clients keep their connection between calls
    config.graceful_timeout = 1.0
    app = wrap_app(build_app(broker), config.wsgi_max_body_size, "asgi")
    await worker_serve(app, config, sockets=Sockets([], sockets, []))
