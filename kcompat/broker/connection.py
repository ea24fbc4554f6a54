"""One client connection: frames in, responses out, strictly in order.

Theory of operation
-------------------
Like Kafka's network layer, a connection handles one request at a time: the
next frame is not read until the current response is written, so responses go
back in request order without bookkeeping (clients pipeline, we queue in the
socket). A Fetch answer comes as chunks — framing bytes and the records'
segment-file ranges, sent with ``sendfile`` (``zero_copy``) — written in
order before the next frame is read. ``acks=0`` produces get no response. Anything a client can send that
we cannot serve — an unknown API key, an unsupported version, a malformed
header or body, an oversized frame — closes only this connection, with one
logged line saying why. An unexpected exception in a handler is logged with its
traceback and also closes just this connection; the broker keeps running.

On SIGTERM the broker drains: a connection waiting for its next request is
closed at once (``Broker.close_idle_connections``), one serving a request
answers it first (bounded by the server's drain deadline), as Kafka closes its
connections after their in-flight requests.
"""

from __future__ import annotations

import logging
from collections.abc import Sized
from typing import Any

import trio

from kcompat.broker.broker import Broker
from kcompat.broker.context import RequestContext
from kcompat.broker.handlers import HANDLERS
from kcompat.broker.handlers.api_versions import unsupported_version_response
from kcompat.broker.zero_copy import send_response, with_bytes
from kcompat.wire import codec
from kcompat.wire.fetch_writer import encode_fetch_response
from kcompat.wire.framing import FrameError, FrameReader
from kcompat.wire.headers import HeaderError, parse_request_header, peek_api
from kcompat.wire.versions import API_RANGES, API_VERSIONS, FETCH, KCOMPAT_RAFT, api_name

log = logging.getLogger("kcompat.conn")

RECEIVE_BYTES = 256 * 1024


class CloseConnection(Exception):
    pass


async def serve_connection(stream: trio.SocketStream, broker: Broker) -> None:
    try:
        peer = stream.socket.getpeername()
    except OSError:
        peer = ("?", 0)
    host = f"/{peer[0]}"
    reader = FrameReader(broker.config["socket.request.max.bytes"])
    broker.metrics.connections.inc()
    idle = broker.idle_reads
    try:
        while not broker.draining:
            with trio.CancelScope() as waiting:  # cancelled by a drain: nothing in flight
                idle.add(waiting)
                try:
                    data = await stream.receive_some(RECEIVE_BYTES)
                finally:
                    idle.discard(waiting)
            if waiting.cancelled_caught or not data:
                return
            for frame in reader.feed(data):
                with broker.metrics.request(frame):  # count, time, errors = CloseConnection
                    out = await handle_frame(frame, broker, host)
                if isinstance(out, list):  # a Fetch answer: bytes and file ranges
                    await send_response(stream, out)
                elif out is not None:
                    await stream.send_all(out)
    except FrameError as e:
        log.warning("closing connection from %s: %s", peer, e)
    except CloseConnection as e:
        log.warning("closing connection from %s: %s", peer, e)
    except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
        pass
    finally:
        broker.metrics.connections.dec()
        with trio.move_on_after(1) as scope:
            scope.shield = True
            await stream.aclose()


async def handle_frame(frame: bytes, broker: Broker,
                       client_host: str = "") -> bytes | list[Sized] | None:
    try:
        api_key, version, cid = peek_api(frame)
    except HeaderError as e:
        raise CloseConnection(str(e)) from None
    if api_key == KCOMPAT_RAFT:  # a one-way Raft frame from a peer broker
        if not broker.cluster.peers:
            raise CloseConnection("inter-broker frame, but this broker has no peers")
        broker.cluster.receive(frame)
        return None
    rng = API_RANGES.get(api_key)
    if rng is None:
        raise CloseConnection(f"unknown API key {api_key} (version {version})")
    if api_key == API_VERSIONS and version > rng.max_version:
        return unsupported_version_response(cid)
    if not rng.parse_min <= version <= rng.max_version:
        raise CloseConnection(
            f"{rng.name} v{version} is not supported (serving {rng.parse_min}-{rng.max_version})"
        )
    try:
        header = parse_request_header(frame, codec.is_flexible(api_key, version))
        request = codec.read_request(api_key, version, frame, header.size)
    except (HeaderError, codec.BodyError) as e:
        raise CloseConnection(f"malformed {api_name(api_key)} v{version} request: {e}") from None
    log.debug("request %s v%d cid=%d client=%s", rng.name, version, cid, header.client_id)
    ctx = RequestContext(broker, api_key, version, cid, header.client_id, client_host)
    try:
        response: Any = await HANDLERS[api_key](ctx, request)
    except Exception as e:
        log.exception("%s v%d handler failed", rng.name, version)
        raise CloseConnection(f"internal error in {rng.name}: {e!r}") from None
    if response is None:
        return None
    if api_key == FETCH:
        chunks = encode_fetch_response(version, cid, response)
        if chunks is not None:
            return chunks
        response = with_bytes(response)  # kio's writer takes bytes only
    return codec.encode_response(api_key, version, cid, response)
