"""Requests of the differential fuzzer, built and decoded by kafka-python.

The fuzzer sends the same bytes to Apache Kafka and to kcompat, built with
kafka-python's generated protocol classes (a codec independent of ours):
``build`` turns nested dicts into a request of one version, ``Peer.call``
sends it on the peer's connection and returns the answer as nested dicts. A
connection the broker closes is an observation (``CLOSED``), not an error
of the fuzzer: the peer reconnects for the next call. ``Peer.state`` holds
what a client keeps between requests and each broker chooses (producer ids
and epochs, member ids): the ops read and write it, the machine never
compares it, and ``reset`` drops it with the connections (and closes the
connections a state value owns: a group member's). ``send`` and ``receive``
split a call in two for a request a broker may hold (a JoinGroup waiting for
the other members): its answer is awaited a bounded time, and again later.
``call_kio`` sends a kio request entity (the APIs kafka-python lacks:
KIP-848's and share groups'), kio's writers and readers being the codec.
"""

from __future__ import annotations

import importlib
import io
import select
import socket
import struct
from typing import Any

from kafka.errors import CorruptRecordError
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

#: what a call observes when the broker closed the connection or did not answer
CLOSED = "connection closed"
#: a fetched record's timestamp in a LogAppendTime batch (the broker's clock)
APPEND_TIME = "log append time"
LOG_APPEND_TIME = 1  # a batch's timestamp type
#: what a fetched batch a consumer cannot read is observed as (from its base offset)
UNREADABLE = "unreadable batch"
TIMEOUT_S = 30.0


def build(cls: Any, data: dict[str, Any]) -> Any:
    """``cls`` (a request class of one version, or a nested struct) from
    ``data``, its nested structs given as dicts."""
    kwargs = {}
    for name, value in data.items():
        field = cls.fields[name]
        if value is None:
            pass
        elif field.is_struct_array():
            value = [build(field.data_class, v) if isinstance(v, dict) else v for v in value]
        elif field.is_struct() and isinstance(value, dict):
            value = build(field.data_class, value)
        kwargs[name] = value
    return cls(**kwargs)


class Peer:
    """One broker under test, or a cluster: a name, its bootstrap addresses
    (comma-separated), a connection per address. A request goes to the first
    address unless routed (``to``): a partition's requests to its leader and a
    group's to its coordinator, as a client sends them (``_ops``)."""

    def __init__(self, name: str, bootstrap: str,
                 sasl_plain: tuple[str, str] | None = None) -> None:
        self.name = name
        #: (user, password): each connection authenticates with SASL/PLAIN first
        self.sasl_plain = sasl_plain
        self.addresses = bootstrap.split(",")
        self.bootstrap = self.addresses[0]
        self._socks: dict[str, socket.socket] = {}
        self._cid = 0
        #: a sequence's client state on this broker (``_producers``, ``_members``)
        self.state: dict[str, Any] = {}

    def _connect(self, address: str) -> socket.socket:
        sock = self._socks.get(address)
        if sock is None:
            host, port = address.rsplit(":", 1)
            sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
            if self.sasl_plain is not None:
                self._authenticate(sock, *self.sasl_plain)
            self._socks[address] = sock
        return sock

    def _authenticate(self, sock: socket.socket, user: str, password: str) -> None:
        for request, response, data in (
                (SaslHandshakeRequest, SaslHandshakeResponse, {"mechanism": "PLAIN"}),
                (SaslAuthenticateRequest, SaslAuthenticateResponse,
                 {"auth_bytes": f"\0{user}\0{password}".encode()})):
            self._cid += 1
            built = build(request[1], data)
            built.with_header(correlation_id=self._cid, client_id="kcompat-fuzz")
            payload = bytes(built.encode(header=True))
            sock.sendall(struct.pack(">i", len(payload)) + payload)
            size = struct.unpack(">i", self._exact(sock, 4))[0]
            answer = response[1].decode(self._exact(sock, size), header=True)
            if answer.error_code:
                raise ConnectionRefusedError(f"SASL/PLAIN as {user}: {answer.error_code}")

    def close(self) -> None:
        for sock in self._socks.values():
            sock.close()
        self._socks.clear()

    def reset(self) -> None:
        """New connections and no client state: a new sequence's clients."""
        self.close()
        for value in self.state.values():
            close = getattr(value, "close", None)
            if callable(close):
                close()
        self.state.clear()

    def call(self, request_class: Any, response_class: Any, version: int,
             data: dict[str, Any], to: str | None = None) -> dict[str, Any] | str:
        """The answer to ``request_class[version]`` built from ``data``, as
        nested dicts, from address ``to`` (default: the first);
        ``CLOSED`` when the broker closed the connection."""
        sent = self.send(request_class, response_class, version, data, to)
        answer = self.receive(sent, None)
        assert answer is not None
        return answer

    def send(self, request_class: Any, response_class: Any, version: int,
             data: dict[str, Any], to: str | None = None) -> tuple[str, Any, int] | str:
        """Sends the request without awaiting its answer: what ``receive``
        takes, or ``CLOSED``."""
        address = to or self.bootstrap
        request = build(request_class[version], data)
        self._cid += 1
        request.with_header(correlation_id=self._cid, client_id="kcompat-fuzz")
        payload = bytes(request.encode(header=True))
        try:
            self._connect(address).sendall(struct.pack(">i", len(payload)) + payload)
        except OSError:
            self._drop(address)
            return CLOSED
        return (address, response_class[version], self._cid)

    def receive(self, sent: tuple[str, Any, int] | str,
                wait_s: float | None) -> dict[str, Any] | str | None:
        """The answer to a request ``send`` sent, as nested dicts; None when
        none came within ``wait_s`` (None: wait as long as a call does)."""
        if sent == CLOSED:
            return CLOSED
        address, response, _ = sent
        sock = self._socks.get(address)
        if sock is None:
            return CLOSED
        try:
            if wait_s is not None and not select.select([sock], [], [], wait_s)[0]:
                return None
            size = struct.unpack(">i", self._exact(sock, 4))[0]
            frame = self._exact(sock, size)
        except OSError:
            self._drop(address)
            return CLOSED
        answer = response.decode(frame, header=True)
        return answer.to_dict(json=False)  # type: ignore[no-any-return]  # raw bytes, not JSON text

    def call_kio(self, request: Any, to: str | None = None) -> Any:
        """The answer (a kio entity) to the kio request entity ``request`` from
        address ``to`` (default: the first), or ``CLOSED``."""
        address = to or self.bootstrap
        self._cid += 1
        header_cls = RequestHeaderV2 if request.__flexible__ else RequestHeaderV1
        header = header_cls(request_api_key=request.__api_key__,
                            request_api_version=request.__version__,
                            correlation_id=i32(self._cid), client_id="kcompat-fuzz")
        buf = io.BytesIO()
        entity_writer(header_cls)(buf, header)
        entity_writer(type(request))(buf, request)
        payload = buf.getvalue()
        try:
            sock = self._connect(address)
            sock.sendall(struct.pack(">i", len(payload)) + payload)
            size = struct.unpack(">i", self._exact(sock, 4))[0]
            frame = self._exact(sock, size)
        except OSError:
            self._drop(address)
            return CLOSED
        response_cls = _kio_response(request)
        _header, used = entity_reader(response_cls.__header_schema__)(frame, 0)
        body, _ = entity_reader(response_cls)(frame, used)
        return body

    def _drop(self, address: str) -> None:
        dropped = self._socks.pop(address, None)
        if dropped is not None:
            dropped.close()

    def _exact(self, sock: socket.socket, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                raise ConnectionResetError("closed")
            out += chunk
        return bytes(out)


def _kio_response(request: Any) -> Any:
    """The kio response class of a kio request entity (same API, version)."""
    module = importlib.import_module(type(request).__module__.rsplit(".", 1)[0] + ".response")
    return getattr(module, type(request).__name__.removesuffix("Request") + "Response")


def record_batch(records: list[tuple[bytes | None, bytes | None]], timestamp: int,
                 compression: int = 0, producer: tuple[int, int, int] = (-1, -1, -1),
                 transactional: bool = False) -> bytes:
    """One RecordBatch v2 of ``(key, value)`` records, all stamped
    ``timestamp``; ``compression``: 0 none, 1 gzip; ``producer``: its id,
    epoch and the batch's base sequence (-1s: not idempotent)."""
    producer_id, epoch, sequence = producer
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=compression, is_transactional=transactional,
        producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
        batch_size=1 << 20)
    for i, (key, value) in enumerate(records):
        builder.append(i, timestamp=timestamp, key=key, value=value, headers=[])
    return bytes(builder.build())


def fetched_records(raw: bytes | None, start: int,
                    aborted: list[tuple[int, int]] | None = None
                    ) -> list[tuple[int, int | str, bytes | None, bytes | None]]:
    """``(offset, timestamp, key, value)`` of the fetched records at or past
    ``start`` (a broker answers whole batches, which may begin before it;
    ``APPEND_TIME`` is the timestamp of a LogAppendTime batch's records),
    as a consumer hands them out: no control batch (transaction markers);
    ``aborted``, a READ_COMMITTED answer's ``(producer id, first offset)``
    list: none of an aborted transaction's records either — from its first
    offset a producer's transactional batches are dropped until its abort
    marker."""
    out: list[tuple[int, int | str, bytes | None, bytes | None]] = []
    if not raw:
        return out
    pending = sorted(aborted or [], key=lambda a: a[1])
    aborting: set[int] = set()
    records = MemoryRecords(bytes(raw))
    while records.has_next():
        batch = records.next_batch()
        if batch is None:
            break
        while pending and pending[0][1] <= batch.last_offset:
            aborting.add(pending.pop(0)[0])
        if batch.is_control_batch:
            if batch.is_transactional:  # a marker ends the producer's transaction
                aborting.discard(batch.producer_id)
            continue
        if aborted is not None and batch.is_transactional and batch.producer_id in aborting:
            continue
        append_time = batch.timestamp_type == LOG_APPEND_TIME
        try:
            for record in batch:
                if record.offset >= start:
                    out.append((record.offset, APPEND_TIME if append_time else
                                record.timestamp, record.key, record.value))
        except CorruptRecordError:  # a consumer fails on it: so does the observation
            out.append((batch.base_offset, UNREADABLE, None, None))
    return out
