"""A listener's TLS connection: OpenSSL over memory buffers, drained per read.

Theory of operation
-------------------
``TlsStream`` is the server side of one TLS connection on a trio socket:
Python's ``ssl.SSLObject`` over two memory BIOs, bytes from the socket in,
records to the socket out. It exists for the receive path. OpenSSL hands back
one TLS record (at most 16 KiB) per read; a stream that returns one record per
``receive_some`` — as trio's ``SSLStream`` does, each through its locks and
checkpoints — makes a 1 MiB Produce some 64 trips through the connection's
loop. Here one ``receive_some`` reads what the socket has (up to
``RECEIVE_BYTES``) and decrypts every whole record in it before returning,
so the connection sees the same large reads as on a PLAINTEXT listener.

A connection has two users, its reader and its sender (``connection``):
``send_all`` encrypts and writes, ``receive_some`` reads and decrypts, and
each flushes whatever OpenSSL queued (TLS 1.3 session tickets after the
handshake, key-update answers). One lock covers a flush — taking OpenSSL's
output and writing it — so the two never write to the socket at once and
the records go out in the order OpenSSL made them. A failed
handshake sends OpenSSL's alert (bad_certificate, unknown_ca...) before it
raises, so the client learns why. Errors are trio's: ``BrokenResourceError``
(with the ``ssl`` error as its cause), and ``b""`` at the peer's close.
"""

from __future__ import annotations

import contextlib
import ssl
from typing import Any

import trio

RECEIVE_BYTES = 256 * 1024


class TlsStream(trio.abc.Stream):
    def __init__(self, transport: trio.SocketStream, context: ssl.SSLContext) -> None:
        self.transport = transport
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._flushing = trio.Lock()
        self._eof = False

    def getpeercert(self) -> dict[str, Any] | None:
        return self._tls.getpeercert()

    def cipher(self) -> tuple[str, str, int] | None:
        return self._tls.cipher()

    async def _flush(self) -> None:
        async with self._flushing:
            data = self._outgoing.read()
            if data:
                await self.transport.send_all(data)

    async def _fill(self) -> bool:
        """Read from the socket into OpenSSL; False at the peer's EOF."""
        data = await self.transport.receive_some(RECEIVE_BYTES)
        if not data:
            self._incoming.write_eof()
            self._eof = True
            return False
        self._incoming.write(data)
        return True

    async def do_handshake(self) -> None:
        while True:
            try:
                self._tls.do_handshake()
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._fill():
                    raise trio.BrokenResourceError(
                        "the client closed during the TLS handshake") from None
                continue
            except (ssl.SSLError, ssl.CertificateError) as e:
                with trio.move_on_after(1), contextlib.suppress(trio.BrokenResourceError,
                                                                OSError):
                    await self._flush()  # the alert telling the client why
                raise trio.BrokenResourceError(str(e)) from e
            await self._flush()
            return

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """Every whole record the socket has delivered (at least one), up to
        ``max_bytes``; ``b""`` once the peer closed."""
        limit = max_bytes or RECEIVE_BYTES
        chunks: list[bytes] = []
        size = 0
        while size < limit:
            try:
                chunk = self._tls.read(limit - size)
            except ssl.SSLWantReadError:
                if chunks:
                    break
                await self._flush()
                await self._fill()  # at EOF, OpenSSL's next read says how it ended
                continue
            except ssl.SSLZeroReturnError:  # the peer's close_notify
                break
            except ssl.SSLEOFError:  # closed without close_notify
                if chunks or self._eof:
                    break
                raise trio.BrokenResourceError("the TLS connection was cut") from None
            except ssl.SSLError as e:
                raise trio.BrokenResourceError(str(e)) from e
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if self._outgoing.pending:
            await self._flush()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        try:
            self._tls.write(data)
        except ssl.SSLError as e:
            raise trio.BrokenResourceError(str(e)) from e
        await self._flush()

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        with contextlib.suppress(ssl.SSLError, trio.BrokenResourceError,
                                 trio.ClosedResourceError, OSError):
            with contextlib.suppress(ssl.SSLWantReadError):
                self._tls.unwrap()  # queue our close_notify
            with trio.move_on_after(1):
                await self._flush()
        await self.transport.aclose()
