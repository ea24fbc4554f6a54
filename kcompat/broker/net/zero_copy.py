"""Fetch record bytes sent from the segment files with ``sendfile`` (zero copy).

Theory of operation
-------------------
A Fetch answer is mostly record bytes that already lie, in the right order, in
one segment file per partition (``PartitionLog.locate`` gives the range:
whole batches from the one holding the fetch offset, the last one possibly
cut, at least one whole batch — exactly what ``read`` would copy). Copying them
into Python bytes and back into the socket costs two copies and an object
per partition; ``os.sendfile`` moves them from the page cache to the socket
inside the kernel, as Kafka's ``FileRecords.writeTo`` does with
``transferTo``.

``take`` turns a located slice into what the response carries: a
``FileRange`` holding its *own* descriptor (``os.dup`` of the segment's), so
a segment closed, deleted, compacted or rolled away while the answer is on
its way stays readable (the dup keeps the open file; a deleted file's data
lives until the last descriptor closes). Slices below ``SENDFILE_MIN_BYTES``
are copied as before: one gathered ``send`` of many small pieces is cheaper
than a syscall per piece. So are slices of a store without real files (the
simulator's), and everything when ``kcompat.fetch.sendfile`` is off; views
(which rebuild batches) never get here.

``send_response`` writes a response given as chunks — framing bytes and
``FileRange``\\ s interleaved, as ``wire.fetch_writer`` lays them out — in
order on the connection's socket: the bytes between ranges gathered, each
range with ``os.sendfile`` looped over the non-blocking socket
(``wait_writable`` on EAGAIN, after pushing out anything the kernel holds
back — see ``_push``: a loopback consumer crawled at 200 ms per stall). The
connection sends one response at a time, so nothing else writes the socket
meanwhile and responses keep request order. A stream that is not a
plain socket (TLS, some day) gets the ranges read and sent as bytes. Every
range is closed once sent or on any failure. A range whose file turns out
shorter than located (only a truncation below the high watermark could do
that, which Raft never does) cannot be framed any more: the connection closes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Sequence, Sized
from dataclasses import replace
from typing import Any

import trio

from kcompat.log.partition_log import FileSlice
from kcompat.log.store import OsFile

log = logging.getLogger("kcompat.conn")

SENDFILE_MIN_BYTES = 16 * 1024  # smaller record sets are copied and gathered
GATHER_MAX_BYTES = 16 * 1024  # framing and small records are gathered below this


class ShortFile(ConnectionError):
    """A file range ended before its length: the response cannot be completed."""


class FileRange:
    """``length`` bytes at ``position`` of an open file this object owns."""

    __slots__ = ("fd", "position", "length")

    def __init__(self, fd: int, position: int, length: int) -> None:
        self.fd = fd
        self.position = position
        self.length = length

    def __len__(self) -> int:
        return self.length

    def read(self) -> bytes:
        data = os.pread(self.fd, self.length, self.position)
        if len(data) != self.length:
            raise ShortFile(f"file range read {len(data)} of {self.length} bytes")
        return data

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:  # a range dropped unsent (a bug) must not keep its file open
        self.close()


def take(where: FileSlice, sendfile: bool) -> bytes | FileRange:
    """What a response carries for ``where``: a range to send, or the bytes."""
    file = where.file
    if not sendfile or where.length < SENDFILE_MIN_BYTES or not isinstance(file, OsFile):
        return where.read()
    try:
        return FileRange(os.dup(file.fd), where.position, where.length)
    except OSError:  # out of descriptors (or the file just closed): copy as before
        return where.read()


def close_all(chunks: Sequence[Sized]) -> None:
    for chunk in chunks:
        if isinstance(chunk, FileRange):
            chunk.close()


def with_bytes(body: Any) -> Any:
    """A FetchResponse ``body`` with its ranges read into bytes (and closed):
    for the generic writer, which takes only bytes."""
    topics = []
    try:
        for topic in body.responses:
            parts = tuple(replace(p, records=p.records.read())
                          if isinstance(p.records, FileRange) else p
                          for p in topic.partitions)
            topics.append(replace(topic, partitions=parts))
    finally:
        close_all([p.records for t in body.responses for p in t.partitions])
    return replace(body, responses=tuple(topics))


async def send_response(stream: trio.abc.Stream, chunks: Sequence[Sized]) -> None:
    """Send a response given as chunks (bytes and ``FileRange``), in order."""
    try:
        if isinstance(stream, trio.SocketStream):
            await _send_to_socket(stream.socket, chunks)
        else:
            await _send_copied(stream, chunks)
    finally:
        close_all(chunks)


async def _send_to_socket(sock: trio.socket.SocketType, chunks: Sequence[Sized]) -> None:
    pending = bytearray()
    last_was_file = False
    for chunk in chunks:
        if isinstance(chunk, FileRange):
            if pending:
                await _send_bytes(sock, pending)
                pending = bytearray()
            await _sendfile(sock, chunk)
            last_was_file = True
            continue
        if not isinstance(chunk, bytes | bytearray | memoryview):
            raise TypeError(f"cannot send a {type(chunk).__name__}")
        if not chunk:
            continue
        last_was_file = False
        if len(chunk) < GATHER_MAX_BYTES:
            pending += chunk
            continue
        if pending:
            await _send_bytes(sock, pending)
            pending = bytearray()
        await _send_bytes(sock, chunk)
    if pending:
        await _send_bytes(sock, pending)
    elif last_was_file:
        _push(sock)  # the answer ends with file data: nothing of it may stay queued


async def _send_bytes(sock: trio.socket.SocketType, data: bytes | bytearray | memoryview) -> None:
    view = memoryview(data)
    while view:
        sent = await sock.send(view)
        view = view[sent:]


def _push(sock: trio.socket.SocketType) -> None:
    """Transmit what the kernel holds back in the socket before waiting on
    it. Data queued as "more to come" (``MSG_MORE``, which a sendfile cut
    short by a full socket may leave on its tail too) is held until more
    arrives — on loopback, whose segment is 64 KiB, for good: with nothing in
    flight no ACK makes the socket writable, and only the 200 ms
    retransmission timer moves it (framing sent with ``MSG_MORE`` made 64
    ranges of 1 MiB take 10 s instead of 0.05 s here). So the framing goes
    without it, and setting TCP_NODELAY (again) pushes any pending frames."""
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def _sendfile(sock: trio.socket.SocketType, r: FileRange) -> None:
    await trio.lowlevel.checkpoint_if_cancelled()
    out = sock.fileno()
    position, end = r.position, r.position + r.length
    while position < end:
        try:
            sent = os.sendfile(out, r.fd, position, end - position)
        except BlockingIOError:
            _push(sock)  # before waiting: held-back data would wait for nothing
            await trio.lowlevel.wait_writable(sock)
            continue
        if sent == 0:
            log.warning("a fetched segment file ended %d bytes early; closing the connection",
                        end - position)
            raise ShortFile(f"file range ended {end - position} bytes early")
        position += sent
    await trio.lowlevel.cancel_shielded_checkpoint()


async def _send_copied(stream: trio.abc.Stream, chunks: Sequence[Sized]) -> None:
    pending = bytearray()
    for chunk in chunks:
        data = chunk.read() if isinstance(chunk, FileRange) else chunk
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"cannot send a {type(chunk).__name__}")
        if len(data) < GATHER_MAX_BYTES:
            pending += data
            continue
        if pending:
            await stream.send_all(pending)
            pending = bytearray()
        await stream.send_all(data)
    if pending:
        await stream.send_all(pending)
