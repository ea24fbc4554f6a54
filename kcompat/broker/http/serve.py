"""Serving the HTTP app on the admin port's sockets, in the broker's loop.

``admin_port`` binds the sockets (and says why it would not); this module hands
them to hypercorn's trio worker, which runs its connections in the broker's own
nursery until the node cancels it. It is imported only when there is a socket
to serve (``node.server``), and it alone brings in the HTTP stack.
"""

from __future__ import annotations

import logging
import socket
import ssl

from hypercorn.config import Config, Sockets
from hypercorn.trio.run import worker_serve
from hypercorn.utils import wrap_app

from kcompat.broker.host.broker import Broker
from kcompat.broker.http.admin_port import tls_context
from kcompat.broker.http.app import build_app


class _Config(Config):
    """hypercorn's config with the broker's TLS context."""

    def __init__(self, context: ssl.SSLContext | None) -> None:
        super().__init__()
        self._context = context

    def create_ssl_context(self) -> ssl.SSLContext | None:
        return self._context


async def run_admin_http(broker: Broker, sockets: list[socket.socket]) -> None:
    """Serve the app on already-bound ``sockets`` until cancelled."""
    context = tls_context(broker)
    config = _Config(context)
    config.accesslog = None
    errors = logging.getLogger("kcompat.http.server")
    errors.setLevel(logging.WARNING)  # not its "Running on ... (CTRL + C to quit)"
    config.errorlog = errors
    config.keep_alive_timeout = 60  # REST clients keep their connection between calls
    # one connection serves 1,000 requests (as nginx's keepalive_requests), then is
    # closed after its answer: clients open another
    config.keep_alive_max_requests = 1000
    config.graceful_timeout = 1.0
    app = wrap_app(build_app(broker), config.wsgi_max_body_size, "asgi")
    secure, plain = (sockets, []) if context is not None else ([], sockets)
    await worker_serve(app, config, sockets=Sockets(secure, plain, []))
