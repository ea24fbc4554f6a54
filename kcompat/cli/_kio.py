"""A blocking Kafka connection over kio, for the APIs kafka-python lacks.

Theory of operation
-------------------
The CLI's client side is kafka-python, which has no share-group APIs
(KIP-932). For those the CLI builds kio's request entities itself and sends
them here: ``Connection.call`` writes the request header (v2 for flexible
versions, v1 otherwise) and the body with kio's writers, reads one
length-prefixed answer and parses its header and body with kio's readers.
One request is in flight per connection, so the correlation id only checks
that the answer is the one asked for; a call cut short (a timeout, ^C) closes
the socket and the next call connects afresh. ``--bootstrap-server`` may name
several brokers (``HOST:PORT,HOST:PORT``): ``connect_first`` tries them in the
order given and keeps the first that answers. ``Cluster`` keeps one connection per
broker and finds group coordinators (FindCoordinator v4) and topic metadata
(Metadata v12, which carries topic ids). A socket failure or a timeout is a
``CliError``; an error code in an answer is data for the caller.

On a secured listener (``ClientSecurity`` from ``_security``) each connection
is wrapped in TLS, then logs in before its first request: SaslHandshake v1,
then SaslAuthenticate v2 until the mechanism is done. A refused login or a
failed TLS handshake is a one-line ``CliError`` naming the cause (the broker's
message for a login). A session lifetime the broker grants (KIP-368) is kept
by connecting afresh once 85 % of it has passed, before the broker would close
the connection.
"""

from __future__ import annotations

import argparse
import io
import socket
import ssl
import struct
import time
from dataclasses import dataclass
from typing import Any

from kio.schema.api_versions.v3 import request as api_versions
from kio.schema.find_coordinator.v4 import request as find_coordinator
from kio.schema.metadata.v12 import request as metadata
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.sasl_authenticate.v2 import request as sasl_authenticate
from kio.schema.sasl_handshake.v1 import request as sasl_handshake
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i32

from kcompat.cli import _security
from kcompat.cli._base import CLIENT_ID, CliError, parse_bootstrap, unreachable
from kcompat.cli._security import PLAINTEXT, ClientSecurity

_SIZE = struct.Struct(">i")
COORDINATOR_RETRIES = 20  # FindCoordinator/heartbeat retries while a coordinator loads
REAUTH_FRACTION = 0.85  # of a granted session lifetime, then connect afresh


class Unreachable(CliError):
    """No TCP connection to an address (``why``: the socket's error); the
    next address of ``--bootstrap-server`` may answer."""

    def __init__(self, address: str, why: str) -> None:
        super().__init__(f"cannot reach a broker at {address}: {why}")
        self.address, self.why = address, why


class Connection:
    def __init__(self, host: str, port: int, timeout_s: float,
                 security: ClientSecurity = PLAINTEXT) -> None:
        self.address = f"{host}:{port}"
        self._target = (host, port)
        self.timeout_s = timeout_s
        self.security = security
        self.sock: socket.socket | None = None
        self._correlation_id = 0
        self._session_ends: float | None = None  # monotonic; None: no lifetime granted
        self._answered = False  # has the current socket answered anything yet?
        self._connect()

    @classmethod
    def for_args(cls, args: argparse.Namespace, timeout_s: float) -> Connection:
        """A connection to ``--bootstrap-server`` (the first of its addresses
        that answers) with the command line's security."""
        return connect_first(args.bootstrap_server, timeout_s, _security.of_args(args))

    def _connect(self) -> socket.socket:
        context = self.security.ssl_context if self.security.tls else None  # stores load first
        try:
            sock = socket.create_connection(self._target, timeout=self.timeout_s)
        except OSError as e:
            raise Unreachable(self.address, str(e)) from e
        self.sock, self._answered = sock, False
        if context is not None:
            sock = self.sock = self._tls_handshake(context, sock)
        if self.security.sasl:
            self._login(sock)
        return sock

    def _tls_handshake(self, context: ssl.SSLContext, sock: socket.socket) -> socket.socket:
        try:
            return context.wrap_socket(sock, server_hostname=self._target[0])
        except (OSError, ValueError) as e:
            sock.close()
            self.sock = None
            raise CliError(f"TLS handshake with {self.address} failed: {_tls_reason(e)}") from e

    def _login(self, sock: socket.socket) -> None:
        """SaslHandshake v1 + SaslAuthenticate v2 until the mechanism is done."""
        mechanism = self.security.sasl_client()
        shake = self._exchange(sock, sasl_handshake.SaslHandshakeRequest(
            mechanism=mechanism.mechanism))
        if shake.error_code:
            self.close()
            offered = ", ".join(shake.mechanisms)
            why = (f"this listener does not take {mechanism.mechanism} (it takes {offered})"
                   if offered else "this listener takes no SASL (is it PLAINTEXT or SSL?)")
            raise CliError(f"{self.address}: {error_name(shake.error_code)}: {why}")
        token: bytes | None = mechanism.first()
        while token is not None:
            started = time.monotonic()
            answer = self._exchange(sock, sasl_authenticate.SaslAuthenticateRequest(
                auth_bytes=token))
            if answer.error_code:
                self.close()
                raise CliError(f"{self.address}: {error_name(answer.error_code)}: "
                               f"{answer.error_message or 'authentication failed'}")
            try:
                token = mechanism.respond(answer.auth_bytes)
            except CliError:  # the broker failed the client's check (SCRAM's signature)
                self.close()
                raise
        lifetime_s = answer.session_lifetime.total_seconds()
        self._session_ends = started + lifetime_s * REAUTH_FRACTION if lifetime_s > 0 else None

    def call(self, request: Any, timeout_s: float | None = None) -> Any:
        """Send ``request`` (a kio request entity); return its kio response."""
        if self._session_ends is not None and time.monotonic() >= self._session_ends:
            self.close()  # the broker would close it at the session's end: log in afresh
        sock = self.sock or self._connect()
        return self._exchange(sock, request, timeout_s)

    def _exchange(self, sock: socket.socket, request: Any, timeout_s: float | None = None) -> Any:
        self._correlation_id += 1
        header_cls = RequestHeaderV2 if request.__flexible__ else RequestHeaderV1
        header = header_cls(request_api_key=request.__api_key__,
                            request_api_version=request.__version__,
                            correlation_id=i32(self._correlation_id), client_id=CLIENT_ID)
        buf = io.BytesIO()
        buf.write(b"\0\0\0\0")
        entity_writer(header_cls)(buf, header)
        entity_writer(type(request))(buf, request)
        frame = buf.getbuffer()
        _SIZE.pack_into(frame, 0, len(frame) - 4)
        try:
            sock.settimeout(self.timeout_s if timeout_s is None else timeout_s)
            sock.sendall(frame)
            answer = self._read_frame(sock)
        except ssl.SSLError as e:  # e.g. the broker's alert: it refused the client's certificate
            hint = "" if self._answered or self._has_certificate else self._NO_CERTIFICATE
            self.close()
            raise CliError(f"TLS failure with {self.address}: {_tls_reason(e)}{hint}") from e
        except OSError as e:  # socket.timeout included
            hint = "" if self._answered else self._first_answer_hint()
            self.close()
            raise CliError(f"lost the connection to {self.address}: {e}{hint}") from e
        except BaseException:  # ^C mid-call: an answer may still come; start afresh
            self.close()
            raise
        finally:
            del frame
        self._answered = True
        return self._parse(request, answer)

    _NO_CERTIFICATE = " (no client certificate was given: ssl.keystore.location or --ssl-certfile)"

    @property
    def _has_certificate(self) -> bool:
        return bool(self.security.cert_file or self.security.cert_pem)

    def _first_answer_hint(self) -> str:
        """Why a listener may close a new connection before its first answer (a
        broker that refuses a certificate without sending TLS's alert)."""
        if not self.security.tls:
            return " (is it a TLS listener? see --security-protocol)"
        if not self._has_certificate:
            return (" right after the TLS handshake (does the listener require a client "
                    "certificate? none was given: ssl.keystore.location or --ssl-certfile)")
        return " right after the TLS handshake (was the client certificate refused?)"

    def check(self) -> None:
        """One ApiVersions round trip: proves the connection, TLS and login work."""
        self.call(api_versions.ApiVersionsRequest(client_software_name=CLIENT_ID,
                                                  client_software_version="1"))

    def _parse(self, request: Any, answer: bytes) -> Any:
        response_cls = _response_class(request)
        header, size = entity_reader(response_cls.__header_schema__)(answer, 0)
        if header.correlation_id != self._correlation_id:
            raise CliError(f"{self.address} answered correlation id {header.correlation_id}, "
                           f"expected {self._correlation_id}")
        body, _ = entity_reader(response_cls)(answer, size)
        return body

    @staticmethod
    def _read_exactly(sock: socket.socket, n: int) -> bytes:
        chunks, left = [], n
        while left:
            chunk = sock.recv(min(left, 1 << 20))
            if not chunk:
                raise OSError("the broker closed the connection")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _read_frame(self, sock: socket.socket) -> bytes:
        (size,) = _SIZE.unpack(self._read_exactly(sock, 4))
        return self._read_exactly(sock, size)

    def close(self) -> None:
        """Close the socket; the next ``call`` connects again."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self._session_ends = None


def connect_first(server: str, timeout_s: float,
                  security: ClientSecurity = PLAINTEXT) -> Connection:
    """A connection to the first address of ``server`` (``--bootstrap-server``:
    ``HOST:PORT[,HOST:PORT...]``) that accepts one, tried in the order given,
    as Kafka's tools use whichever bootstrap broker answers. Only an address
    that cannot be reached passes the turn on: a refused login or TLS
    handshake is the answer (another broker of the cluster would refuse the
    same credentials). None reached: one error naming each address and why."""
    failures: list[tuple[str, str]] = []
    for host, port in parse_bootstrap(server):
        try:
            return Connection(host, port, timeout_s, security)
        except Unreachable as e:
            failures.append((e.address, e.why))
    raise unreachable(failures)


def _tls_reason(e: BaseException) -> str:
    """What went wrong in a TLS handshake, in one line."""
    if isinstance(e, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {e.verify_message}"
    if isinstance(e, ssl.SSLError):
        text = e.reason.replace("_", " ").lower() if e.reason else str(e)
        if e.reason in ("WRONG_VERSION_NUMBER", "UNEXPECTED_EOF_WHILE_READING",
                        "RECORD_LAYER_FAILURE"):
            text += " (is it a TLS listener?)"
        return text
    return str(e) or type(e).__name__


def _response_class(request: Any) -> type[Any]:
    from kcompat.wire.codec import response_class

    return response_class(int(request.__api_key__), int(request.__version__))


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: Any  # uuid.UUID
    leaders: dict[int, int]  # partition -> leader node id (-1: none)


class Cluster:
    """Connections by node id, starting from the bootstrap server (the first
    of ``bootstrap``'s addresses that answers, ``connect_first``)."""

    def __init__(self, bootstrap: str, timeout_s: float,
                 security: ClientSecurity = PLAINTEXT) -> None:
        self.timeout_s = timeout_s
        self.security = security
        self.bootstrap = connect_first(bootstrap, timeout_s, security)
        self.addresses: dict[int, tuple[str, int]] = {}
        self._by_node: dict[int, Connection] = {}

    @classmethod
    def for_args(cls, args: argparse.Namespace, timeout_s: float) -> Cluster:
        """``--bootstrap-server`` and the command line's security; every broker
        it reaches is dialled with that security."""
        return cls(args.bootstrap_server, timeout_s, security=_security.of_args(args))

    def node(self, node_id: int) -> Connection:
        conn = self._by_node.get(node_id)
        if conn is None:
            if node_id not in self.addresses:
                raise CliError(f"broker {node_id} is not in the cluster metadata")
            host, port = self.addresses[node_id]
            conn = self._by_node[node_id] = Connection(host, port, self.timeout_s,
                                                        self.security)
        return conn

    def topics(self, names: list[str]) -> dict[str, TopicInfo]:
        """Metadata v12 for ``names``; an unknown topic is left out."""
        request = metadata.MetadataRequest(
            topics=tuple(metadata.MetadataRequestTopic(topic_id=None, name=TopicName(n)) for n in names),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        answer = self.bootstrap.call(request)
        self.addresses.update({b.node_id: (b.host, b.port) for b in answer.brokers})
        return {t.name: TopicInfo(t.name, t.topic_id,
                                  {p.partition_index: p.leader_id for p in t.partitions})
                for t in answer.topics if t.error_code == 0 and t.name}

    def coordinator(self, group_id: str) -> Connection:
        """The group's coordinator, retried while it is loading or moving."""
        request = find_coordinator.FindCoordinatorRequest(key_type=i8(0),
                                                          coordinator_keys=(group_id,))
        last = ""
        for _ in range(COORDINATOR_RETRIES):
            (found,) = self.bootstrap.call(request).coordinators
            if found.error_code == 0:
                self.addresses[found.node_id] = (found.host, found.port)
                return self.node(found.node_id)
            last = f"{found.error_code.name}: {found.error_message or ''}"
            time.sleep(0.1)
        raise CliError(f"no coordinator for group {group_id!r} ({last})")

    def close(self) -> None:
        for conn in [self.bootstrap, *self._by_node.values()]:
            conn.close()


def error_name(code: Any) -> str:
    """``ErrorCode.group_id_not_found`` -> 'GROUP_ID_NOT_FOUND'."""
    return str(getattr(code, "name", code)).upper()

