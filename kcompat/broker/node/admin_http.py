"""The HTTP admin port: ``/metrics`` (Prometheus) and ``/health`` (JSON).

Theory of operation
-------------------
A deliberately tiny HTTP/1.1 server on ``trio.serve_tcp``: read one request
head (at most ``HEAD_BYTES_MAX`` bytes within ``READ_TIMEOUT_S``), answer it
and close (``Connection: close``), so there is no keep-alive or body parsing to
get wrong. Only GET and HEAD are served:

* ``/metrics`` — the broker's own ``CollectorRegistry`` in the Prometheus text
  format (partition and group gauges are computed during the scrape). The
  scrape collects on the event loop (collectors read the broker's state) and
  formats the text in a worker thread (``exposition``): with a few hundred
  topics formatting took ~100 ms, one step that held the loop every scrape;
* ``/health`` — ``{"live": true, "ready": ...}`` plus node and cluster ids;
  200 when ready, 503 while starting or draining. ``/health/live`` and
  ``/health/ready`` answer the two probes separately.

Config: ``admin.port`` (default 9644; 0 picks a free port; -1 disables) and
``admin.host`` (empty = the broker's ``host``). A default port that is taken
only logs a warning — the Kafka listener matters more; an explicitly
configured one that cannot be bound stops the broker with a one-line error.

Security: ``admin.token`` set, every request must carry ``Authorization:
Bearer <token>`` (401 otherwise). When any Kafka listener is secured (SSL or
SASL), an unset ``admin.host`` means 127.0.0.1 — the port answers this
machine only — and binding anything but a loopback address without
``admin.token`` stops the broker naming the key: a secured broker never
serves its metrics to the network unauthenticated by accident.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
from collections.abc import Iterable
from functools import partial
from typing import Any

import trio
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import Metric

from kcompat.broker.config.configdef import ConfigError
from kcompat.broker.host.broker import Broker
from kcompat.broker.loop.loop_monitor import labelled
from kcompat.broker.loop.offload import run_cpu

log = logging.getLogger("kcompat.admin")

HEAD_BYTES_MAX = 8192
READ_TIMEOUT_S = 5.0
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
            405: "Method Not Allowed", 503: "Service Unavailable"}


def health(broker: Broker) -> dict[str, Any]:
    state = broker.state
    return {"live": True, "ready": broker.metrics.ready, "node_id": state.node_id,
            "cluster_id": state.cluster_id}


def route(broker: Broker, method: str, path: str) -> tuple[int, str, bytes]:
    """(status, content type, body) for one request; pure apart from reading state."""
    if method not in ("GET", "HEAD"):
        return 405, "text/plain; charset=utf-8", b"only GET and HEAD\n"
    path = path.split("?", 1)[0].rstrip("/") or "/"
    if path == "/metrics":
        return 200, CONTENT_TYPE_LATEST, generate_latest(broker.metrics.registry)
    if path in ("/health", "/health/live", "/health/ready"):
        body = health(broker)
        ok = body["ready"] or path == "/health/live"
        return (200 if ok else 503), "application/json", json.dumps(body).encode() + b"\n"
    return 404, "text/plain; charset=utf-8", b"not found: try /metrics or /health\n"


async def answer(broker: Broker, method: str, path: str) -> tuple[int, str, bytes]:
    """``route``, the text of ``/metrics`` formatted off the event loop."""
    if method in ("GET", "HEAD") and (path.split("?", 1)[0].rstrip("/") or "/") == "/metrics":
        return 200, CONTENT_TYPE_LATEST, await exposition(broker.metrics.registry)
    return route(broker, method, path)


async def exposition(registry: CollectorRegistry) -> bytes:
    """What ``generate_latest(registry)`` gives: its metrics collected here (the
    collectors read state the loop changes), their text made in a worker
    thread from what was collected (a frozen copy: pure formatting)."""
    collected = _Collected(list(registry.collect()))
    return await run_cpu(generate_latest, collected)


class _Collected:
    """Metrics already collected, as ``generate_latest`` takes a registry."""

    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self.metrics


def _authorized(broker: Broker, head: bytes) -> bool:
    """Without ``admin.token`` every request; else one bearing it."""
    token = broker.config["admin.token"]
    if not token:
        return True
    for line in head.decode("latin-1").splitlines()[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "authorization":
            scheme, _, given = value.strip().partition(" ")
            return scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), token)
    return False


def _response(status: int, content_type: str, body: bytes, head_only: bool,
              extra: str = "") -> bytes:
    head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'OK')}\r\n"
            f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            f"{extra}Connection: close\r\n\r\n")
    return head.encode("latin-1") + (b"" if head_only else body)


async def _read_head(stream: trio.abc.Stream) -> bytes | None:
    buf = b""
    with trio.move_on_after(READ_TIMEOUT_S):
        while b"\r\n\r\n" not in buf and b"\n\n" not in buf and len(buf) <= HEAD_BYTES_MAX:
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            buf += chunk
        return buf
    return None


async def serve_http(stream: trio.SocketStream, broker: Broker) -> None:
    try:
        head = await _read_head(stream)
        if not head:
            return
        parts = head.split(b"\r\n", 1)[0].split(b"\n", 1)[0].decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            out = _response(400, "text/plain; charset=utf-8", b"bad request line\n", False)
        elif not _authorized(broker, head):
            out = _response(401, "text/plain; charset=utf-8", b"admin.token required\n", False,
                            'WWW-Authenticate: Bearer realm="kcompat"\r\n')
        else:
            method, path = parts[0], parts[1]
            with labelled("admin HTTP request"):
                status, ctype, body = await answer(broker, method, path)
            out = _response(status, ctype, body, method == "HEAD")
        await stream.send_all(out)
    except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
        pass
    finally:
        with trio.move_on_after(1) as scope:
            scope.shield = True
            await stream.aclose()


async def open_admin_listeners(broker: Broker) -> list[trio.SocketListener]:
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
        listeners = await trio.open_tcp_listeners(port, host=host)
    except OSError as e:
        if "admin.port" in config.explicit:
            raise OSError(e.errno, f"admin.port {host}:{port}: {e.strerror}") from None
        log.warning("admin HTTP disabled: cannot bind %s:%d (%s); set admin.port", host, port,
                    e.strerror)
        return []
    bound = listeners[0].socket.getsockname()
    log.info("admin HTTP on http://%s:%d (/metrics, /health)", bound[0], bound[1])
    return listeners


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


async def run_admin_http(broker: Broker, listeners: list[trio.SocketListener]) -> None:
    """Serve the admin endpoints on already-bound ``listeners`` until cancelled."""
    if not listeners:
        return
    async with trio.open_nursery() as nursery:
        await trio.serve_listeners(partial(serve_http, broker=broker), listeners,
                                   handler_nursery=nursery)
