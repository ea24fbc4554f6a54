"""One client connection: frames in, responses out, strictly in order.

Theory of operation
-------------------
A connection has a reader and a sender. The reader handles one request at
a time, in order, as Kafka's network layer does; an answer ready at once
with nothing queued before it is written by the reader itself (no hand-off
between tasks on the hot path), any other goes to the sender, which writes
them in the same order. One kind of answer is
finished later (``context.Later``): a produce that was appended and now
waits for its replicas (acks=all) or its fsync. Kafka mutes a connection
until such an answer is written, so a client that pipelines small produces
(librdkafka sends one per ``linger.ms``) gets at most one commit wait's worth
of records through per round trip, and falls behind whenever a commit takes
longer than its linger — as it does on a loaded machine. Here the reader
goes on meanwhile: the next produces are appended, in request order, while
the earlier ones wait, and the answers still go back in request order (at
most ``PIPELINE_DEPTH`` waiting: then the reader waits). A produce whose
delayed (or retried) records were taken out waits the same way, then has
them scheduled: the sender finishes its answers one after another, so the
schedules go in request order while the next produces are appended. If the
connection breaks, answers not yet finished are dropped unanswered; their
records were not acknowledged, and a producer's retry is scheduled then
(the idempotent one's as a duplicate, ``ext.delays``). A Fetch answer comes as chunks —
framing bytes and the records' segment-file ranges, sent with ``sendfile``
(``zero_copy``). ``acks=0`` produces get no response. Anything a client can send that
we cannot serve — an unknown API key, an unsupported version, a malformed
header or body, an oversized frame, on a controller-only node an API Kafka's
controller listener does not serve (``versions.CONTROLLER_APIS``) — closes
only this connection, with one logged line saying why. A Kafka broker opens
its client listeners only once its metadata has caught up; this one listens
from the start (its Raft peers need it), so until it first serves
(``lifecycle.served``) a client request waits for that, ``START_HOLD_S`` at
most — all but the handshake and the quorum's own APIs (``_WHILE_STARTING``).
Answered early, a restarted broker said UNKNOWN_TOPIC_ID or
UNKNOWN_TOPIC_OR_PARTITION of topics that exist, and librdkafka's share
consumer dropped such a partition from its session for good. An unexpected exception in a handler is logged with its
traceback and answered as Kafka answers it: the API's response with
UNKNOWN_SERVER_ERROR in its error fields, the request's items named back
(``broker.net.error_answers``); the connection stays open. Only if that answer
cannot be built is the connection closed; the broker keeps running.

On SIGTERM the broker drains: a connection waiting for its next request is
closed at once (``Broker.close_idle_connections``), one serving requests
answers them first (bounded by the server's drain deadline), as Kafka closes
its connections after their in-flight requests. A connection closed for a
bad frame or a failed login sends the answers before that one first.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Sized
from functools import partial
from typing import Any

import trio
from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import HANDLERS
from kcompat.broker.handlers.api_versions import unsupported_version_response
from kcompat.broker.handlers.sasl_authenticate import step
from kcompat.broker.host.broker import Broker
from kcompat.broker.host.context import Later, RequestContext
from kcompat.broker.net.connection_quotas import ConnectionRefused
from kcompat.broker.net.error_answers import error_answer
from kcompat.broker.net.listeners import Listener
from kcompat.broker.net.session import Session
from kcompat.broker.net.tls_stream import TlsStream
from kcompat.broker.net.zero_copy import close_all, send_response, with_bytes
from kcompat.broker.storage.state import UNKNOWN_SERVER_ERROR_MESSAGE
from kcompat.security import acl, principal, ssl_principal
from kcompat.security.hosts import host_address
from kcompat.wire import codec
from kcompat.wire.fetch_writer import encode_fetch_response
from kcompat.wire.framing import FrameError, FrameReader
from kcompat.wire.headers import HeaderError, parse_request_header, peek_api
from kcompat.wire.versions import (
    ADD_RAFT_VOTER,
    API_RANGES,
    API_VERSIONS,
    DESCRIBE_QUORUM,
    FETCH,
    KCOMPAT_RAFT,
    REMOVE_RAFT_VOTER,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    UNREGISTER_BROKER,
    api_name,
    served,
)

log = logging.getLogger("kcompat.conn")

RECEIVE_BYTES = 256 * 1024
PIPELINE_DEPTH = 64  # answers waiting to be sent, at most: then the reading waits
TLS_HANDSHAKE_S = 10.0


class CloseConnection(Exception):
    pass


async def serve_connection(stream: trio.SocketStream, broker: Broker,
                           listener: Listener | None = None) -> None:
    try:
        peer = stream.socket.getpeername()
    except OSError:
        peer = ("?", 0)
    ip = host_address(str(peer[0]))
    session = Session.open(listener or broker.listeners[0], f"/{ip}")
    limits = broker.connection_quotas
    try:
        await limits.admit(session.listener.name, ip)
    except ConnectionRefused as e:  # Kafka's acceptor: closed (after a throttle), unread
        log.info("closing connection from %s (%s): %s", peer, session.listener.name, e)
        await trio.sleep(e.close_after_s)
        with trio.move_on_after(1) as scope:
            scope.shield = True
            await stream.aclose()
        return
    try:
        await _serve(stream, broker, session, peer)
    finally:
        limits.release(session.listener.name, ip)


async def _serve(stream: trio.SocketStream, broker: Broker, session: Session,
                 peer: Any) -> None:
    broker.metrics.connections.inc()
    conn: trio.abc.Stream = stream
    try:
        if session.listener.tls:
            conn = await _tls_handshake(stream, broker, session)
        session.pipelined = True
        send, receive = trio.open_memory_channel(PIPELINE_DEPTH)
        answers = _Answers(conn, send)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(answers.run, receive, nursery.cancel_scope)
            async with send:
                try:
                    await _read_requests(conn, broker, session, peer, answers)
                except _ENDS as e:
                    answers.error = answers.error or e  # after the answers before it
        if answers.error is not None:
            raise answers.error
    except FrameError as e:
        log.warning("closing connection from %s: %s", peer, e)
    except CloseConnection as e:
        log.warning("closing connection from %s (%s, %s): %s", peer, session.listener.name,
                    session.principal, e)
    except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
        pass
    finally:
        broker.metrics.connections.dec()
        with trio.move_on_after(1) as scope:
            scope.shield = True
            await conn.aclose()


_ENDS = (FrameError, CloseConnection, trio.BrokenResourceError, trio.ClosedResourceError,
         ConnectionError)


async def _read_requests(conn: trio.abc.Stream, broker: Broker, session: Session, peer: Any,
                         answers: _Answers) -> None:
    """Read and handle requests in order until the peer closes, idles out or
    the broker drains; each answer (bytes, Fetch chunks or ``Later``) goes
    to the sender in that order (``_Answers.submit``). A full pipeline stops
    the reading."""
    reader = FrameReader(broker.config["socket.request.max.bytes"])
    idle = broker.idle_reads
    idle_s = broker.config.for_listener(session.listener.name, "connections.max.idle.ms") / 1000
    while not broker.draining:
        # one scope per receive (a hot path): its deadline is Kafka's
        # connections.max.idle.ms, and a drain cancels it (nothing in flight)
        with trio.move_on_after(idle_s) as waiting:
            idle.add(waiting)
            try:
                data = await conn.receive_some(RECEIVE_BYTES)
            finally:
                idle.discard(waiting)
        if waiting.cancelled_caught:
            if not broker.draining:
                log.info("closing connection from %s (%s): idle for %.0f ms", peer,
                         session.listener.name, idle_s * 1000)
            return
        if not data:
            return
        _limit_frames(reader, broker, session)
        for frame in reader.feed(data):
            if session.mute_until > trio.current_time():  # throttled (quotas, KIP-219)
                await trio.sleep_until(session.mute_until)
            with broker.metrics.request(frame):  # count, time, errors = CloseConnection
                out = await handle_frame(frame, broker, session)
            if session.failed:  # answered late, then closed (failed-login delay)
                await trio.sleep(
                    broker.config["connection.failed.authentication.delay.ms"] / 1000)
            if out is not None:
                await answers.submit(out)
            if session.failed:
                raise CloseConnection(f"authentication failed: {session.failed}")


class _Answers:
    """The connection's sender: writes each answer in request order, waiting
    for a ``Later`` one to finish first (Kafka's clients pipeline; so does
    the broker, for produces waiting on their replicas). Its failure ends
    the connection (``error``), the reading too."""

    def __init__(self, conn: trio.abc.Stream,
                 queue: trio.MemorySendChannel[Any] | None = None) -> None:
        self.conn = conn
        self.queue = queue  # to ``run``, the answers that wait their turn
        self.error: BaseException | None = None
        self.queued = 0  # answers handed to ``run`` and not yet written

    async def submit(self, out: Any) -> None:
        """The reader's answer: written by the reader itself when nothing is
        queued before it (an answer ready now, the sender idle), else queued
        for ``run``. A request answered at once then costs no hand-off to
        the sender's task and back (a task step each, on the produce path);
        like Kafka's, the connection reads its next request once the answer
        is written."""
        if self.queued == 0 and not isinstance(out, Later):
            await self._write(out)
        else:
            assert self.queue is not None, "no sender runs"
            self.queued += 1
            await self.queue.send(out)

    async def _write(self, out: Any) -> None:
        if isinstance(out, list):  # a Fetch answer: bytes and file ranges
            await send_response(self.conn, out)
        else:
            await self.conn.send_all(out)

    async def run(self, answers: trio.MemoryReceiveChannel[Any],
                  reading: trio.CancelScope) -> None:
        try:
            async for out in answers:
                try:
                    if isinstance(out, Later):
                        out = await out.finish()
                    if out is not None:
                        await self._write(out)
                finally:
                    self.queued -= 1
        except _ENDS as e:
            self.error = e
            reading.cancel()
        finally:
            _drop_unsent(answers)
            answers.close()


def _drop_unsent(answers: trio.MemoryReceiveChannel[Any]) -> None:
    """Answers left when the connection ends: a Fetch answer's file ranges
    own descriptors (``zero_copy``), closed here as a send would."""
    while True:
        try:
            out = answers.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel):
            return
        if isinstance(out, list):
            close_all(out)


def _limit_frames(reader: FrameReader, broker: Broker, session: Session) -> None:
    """Before authentication, frames are SASL tokens: ``sasl.server.max.receive.size``."""
    key = "socket.request.max.bytes" if session.authenticated else "sasl.server.max.receive.size"
    reader.max_frame_bytes, reader.limit_key = broker.config[key], key


async def _tls_handshake(stream: trio.SocketStream, broker: Broker,
                         session: Session) -> TlsStream:
    """TLS first; a verified client certificate names the principal."""
    tls = TlsStream(stream, broker.tls_contexts[session.listener.name])
    with trio.move_on_after(TLS_HANDSHAKE_S) as scope:
        try:
            await tls.do_handshake()
        except trio.BrokenResourceError as e:
            raise CloseConnection(f"TLS handshake failed: {e}") from None
    if scope.cancelled_caught:
        raise CloseConnection(f"no TLS handshake in {TLS_HANDSHAKE_S:.0f} s")
    cert = tls.getpeercert()
    if cert:
        dn = ssl_principal.subject_dn(cert.get("subject", ()))
        try:
            session.principal = principal.user(
                ssl_principal.map_dn(broker.principal_rules[session.listener.name], dn))
        except ssl_principal.MappingError as e:
            raise CloseConnection(str(e)) from None
    return tls


#: requests a SASL listener serves before authentication (Kafka's SaslServerAuthenticator)
_BEFORE_AUTH = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})
#: answered before this process first serves: the handshake, and the quorum's
#: APIs (a controller answers them whether or not its broker side serves)
_WHILE_STARTING = _BEFORE_AUTH | {DESCRIBE_QUORUM, ADD_RAFT_VOTER, REMOVE_RAFT_VOTER,
                                  UNREGISTER_BROKER}
START_HOLD_S = 5.0  # as long as Metadata holds a not-serving broker's answer


def _gate(session: Session, api_key: int, broker: Broker) -> None:
    """Refuse what this connection may not ask yet (closing it)."""
    if not session.authenticated and api_key not in _BEFORE_AUTH:
        raise CloseConnection(f"Unexpected Kafka request of type {api_name(api_key)} during "
                              "SASL handshake")
    deadline = session.reauth_deadline
    if (deadline is not None and api_key not in _BEFORE_AUTH
            and trio.current_time() >= deadline):
        raise CloseConnection("the authentication expired (connections.max.reauth.ms) and the "
                              "client did not authenticate again")


async def _raw_token(frame: bytes, broker: Broker, session: Session) -> bytes:
    """SaslHandshake v0: the next frames are bare SASL tokens, answered bare."""
    reply, error = step(broker, session, frame)
    if error is not None:
        await trio.sleep(broker.config["connection.failed.authentication.delay.ms"] / 1000)
        raise CloseConnection(f"authentication failed: {error}")
    session.raw_tokens = not session.authenticated
    return struct.pack(">i", len(reply)) + reply




def _failed(broker: Broker, api_key: int, version: int, cid: int, request: Any, name: str,
            error: Exception) -> bytes:
    """The answer to ``request`` whose handler raised ``error`` (logged with
    its traceback, counted in ``kcompat_request_failures_total``):
    UNKNOWN_SERVER_ERROR wherever the response has an error field, as Kafka's
    ``getErrorResponse``; CloseConnection if even that cannot be built."""
    log.error("%s v%d handler failed; answered UNKNOWN_SERVER_ERROR", name, version,
              exc_info=error)
    broker.metrics.failures.labels(name).inc()
    try:
        answer = error_answer(codec.response_class(api_key, version), request,
                              ErrorCode.unknown_server_error, UNKNOWN_SERVER_ERROR_MESSAGE)
        return codec.encode_response(api_key, version, cid, answer)
    except Exception as e:
        log.exception("%s v%d: no error answer could be built", name, version)
        raise CloseConnection(f"internal error in {name}: {error!r}") from e


async def _finish_later(broker: Broker, later: Later, api_key: int, version: int, cid: int,
                        name: str, request: Any) -> bytes | None:
    """A ``Later`` answer finished and encoded (its failure as a handler's)."""
    try:
        response = await later.finish()
    except Exception as e:
        return _failed(broker, api_key, version, cid, request, name, e)
    return None if response is None else codec.encode_response(api_key, version, cid, response)


async def handle_frame(frame: bytes, broker: Broker, session: Session | None = None
                       ) -> bytes | list[Sized] | Later | None:
    if session is None:
        session = Session.open(broker.listeners[0])
    if session.raw_tokens:
        return await _raw_token(frame, broker, session)
    try:
        api_key, version, cid = peek_api(frame)
    except HeaderError as e:
        raise CloseConnection(str(e)) from None
    _gate(session, api_key, broker)
    if api_key == KCOMPAT_RAFT:  # a one-way Raft frame from a peer broker
        if session.listener is not broker.listeners[0]:
            raise CloseConnection("inter-broker frame on a listener that is not "
                                  f"{broker.listeners[0].name} (inter.broker.listener.name)")
        if not session.cluster_action_checked:  # once per connection: frames are hot
            authorizer = broker.authorizer
            if authorizer is not None and not authorizer.authorize(
                    session.principal, session.client_host.removeprefix("/"),
                    acl.Operation.CLUSTER_ACTION, acl.ResourceType.CLUSTER, acl.CLUSTER_NAME):
                raise CloseConnection(f"inter-broker frame from {session.principal}, who may "
                                      "not CLUSTER_ACTION on the cluster")
            session.cluster_action_checked = True
        broker.cluster.receive(frame)
        return None
    rng = served(broker.state.controller_only).get(api_key)
    if rng is None and api_key in API_RANGES:  # Kafka: "... which is not enabled"
        raise CloseConnection(f"{api_name(api_key)} v{version} is not served by a "
                              "controller-only node (process.roles=controller)")
    if rng is None:
        raise CloseConnection(f"unknown API key {api_key} (version {version})")
    if api_key == API_VERSIONS and version > rng.max_version:
        return unsupported_version_response(cid, broker.state.controller_only)
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
    ctx = RequestContext(broker, api_key, version, cid, header.client_id, session.client_host,
                         session.principal, session.listener.name, session, len(frame))
    lifecycle = broker.controller.lifecycle
    if not lifecycle.served and api_key not in _WHILE_STARTING \
            and not broker.state.controller_only:
        await lifecycle.wait_serving(START_HOLD_S)
    try:
        response: Any = await HANDLERS[api_key](ctx, request)
    except Exception as e:
        return _failed(broker, api_key, version, cid, request, rng.name, e)
    if isinstance(response, Later):
        return Later(partial(_finish_later, broker, response, api_key, version, cid, rng.name,
                             request))
    if response is None:
        return None
    if api_key == FETCH:
        chunks = encode_fetch_response(version, cid, response)
        if chunks is not None:
            return chunks
        response = with_bytes(response)  # kio's writer takes bytes only
    return codec.encode_response(api_key, version, cid, response)
