"""A raw Kafka connection for tests that send exact bytes.

Requests are encoded and responses decoded with kafka-python's protocol classes
(a real client's codec, not ours), so these tests judge our broker by an
independent implementation of the wire format.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse  # noqa: F401
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse  # noqa: F401


class RawConnection:
    def __init__(self, bootstrap: str, timeout: float = 10.0, client_id: str = "raw-test") -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.cid = 0
        self.client_id = client_id

    def close(self) -> None:
        self.sock.close()

    def send_bytes(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def send(self, request: Any) -> int:
        self.cid += 1
        request.with_header(correlation_id=self.cid, client_id=self.client_id)
        self.send_bytes(bytes(request.encode(header=True)))
        return self.cid

    def recv_frame(self) -> bytes:
        size = struct.unpack(">i", self._exact(4))[0]
        return self._exact(size)

    def recv(self, response_class: Any) -> tuple[int, Any]:
        frame = self.recv_frame()
        cid = struct.unpack(">i", frame[:4])[0]
        return cid, response_class.decode(frame, header=True)

    def request(self, request: Any, response_class: Any) -> Any:
        cid = self.send(request)
        got, response = self.recv(response_class)
        assert got == cid
        return response

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed by broker")
            buf += chunk
        return bytes(buf)
