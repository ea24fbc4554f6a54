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
the socket and the next call connects afresh. ``Cluster`` keeps one connection per
broker and finds group coordinators (FindCoordinator v4) and topic metadata
(Metadata v12, which carries topic ids). A socket failure or a timeout is a
``CliError``; an error code in an answer is data for the caller.
"""

from __future__ import annotations

import io
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

from kio.schema.find_coordinator.v4 import request as find_coordinator
from kio.schema.metadata.v12 import request as metadata
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i32

from kcompat.cli._common import CLIENT_ID, CliError

_SIZE = struct.Struct(">i")
COORDINATOR_RETRIES = 20  # FindCoordinator/heartbeat retries while a coordinator loads


class Connection:
    def __init__(self, host: str, port: int, timeout_s: float) -> None:
        self.address = f"{host}:{port}"
        self._target = (host, port)
        self.timeout_s = timeout_s
        self.sock: socket.socket | None = None
        self._correlation_id = 0
        self._connect()

    def _connect(self) -> socket.socket:
        try:
            sock = socket.create_connection(self._target, timeout=self.timeout_s)
        except OSError as e:
            raise CliError(f"cannot reach a broker at {self.address}: {e}") from e
        self.sock = sock
        return sock

    def call(self, request: Any, timeout_s: float | None = None) -> Any:
        """Send ``request`` (a kio request entity); return its kio response."""
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
        sock = self.sock or self._connect()
        try:
            sock.settimeout(self.timeout_s if timeout_s is None else timeout_s)
            sock.sendall(frame)
            answer = self._read_frame(sock)
        except OSError as e:  # socket.timeout included
            self.close()
            raise CliError(f"lost the connection to {self.address}: {e}") from e
        except BaseException:  # ^C mid-call: an answer may still come; start afresh
            self.close()
            raise
        finally:
            del frame
        return self._parse(request, answer)

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


def _response_class(request: Any) -> type[Any]:
    from kcompat.wire.codec import response_class

    return response_class(int(request.__api_key__), int(request.__version__))


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: Any  # uuid.UUID
    leaders: dict[int, int]  # partition -> leader node id (-1: none)


class Cluster:
    """Connections by node id, starting from the bootstrap server."""

    def __init__(self, bootstrap: str, timeout_s: float) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.timeout_s = timeout_s
        self.bootstrap = Connection(host, int(port), timeout_s)
        self.addresses: dict[int, tuple[str, int]] = {}
        self._by_node: dict[int, Connection] = {}

    def node(self, node_id: int) -> Connection:
        conn = self._by_node.get(node_id)
        if conn is None:
            if node_id not in self.addresses:
                raise CliError(f"broker {node_id} is not in the cluster metadata")
            host, port = self.addresses[node_id]
            conn = self._by_node[node_id] = Connection(host, port, self.timeout_s)
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

