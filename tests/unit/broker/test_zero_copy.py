"""``zero_copy``: file ranges sent with sendfile over a real socket pair, the
byte-for-byte fallbacks (a stream that is not a socket, kio's writer), and
the descriptors closed whatever happens."""

from __future__ import annotations

import datetime
import os
import socket
from pathlib import Path

import pytest
import trio
import trio.testing
from kio.schema.errors import ErrorCode

from kcompat.broker.net import zero_copy
from kcompat.broker.net.zero_copy import FileRange
from kcompat.log.partition_log import FileSlice
from kcompat.log.store import OS_STORE
from kcompat.wire import codec
from kcompat.wire.fetch_writer import encode_fetch_response
from kcompat.wire.versions import FETCH

CONTENT = os.urandom(3 << 20)


@pytest.fixture
def segment(tmp_path: Path) -> Path:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(CONTENT)
    return path


def _ranges(path: Path) -> list[FileRange]:
    fd = os.open(path, os.O_RDONLY)
    try:
        return [FileRange(os.dup(fd), 100, 1 << 20), FileRange(os.dup(fd), (2 << 20) + 7, 900_001)]
    finally:
        os.close(fd)


def _expected() -> bytes:
    return (b"head" + CONTENT[100:100 + (1 << 20)] + b"mid" * 10_000
            + CONTENT[(2 << 20) + 7:(2 << 20) + 7 + 900_001] + b"tail")


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_ranges_go_out_in_order_to_a_slow_reader(segment: Path) -> None:
    async def main() -> bytes:
        a, b = socket.socketpair()
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stream = trio.SocketStream(trio.socket.from_stdlib_socket(a))
        r1, r2 = _ranges(segment)
        chunks = [b"head", r1, b"mid" * 10_000, r2, b"tail"]
        got = bytearray()
        peer = trio.socket.from_stdlib_socket(b)

        async def read() -> None:
            while len(got) < len(_expected()):
                got.extend(await peer.recv(7000))
                await trio.sleep(0)  # slower than the sender: it meets EAGAIN

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await zero_copy.send_response(stream, chunks)
        assert r1.fd == -1 and r2.fd == -1  # closed once sent
        await stream.aclose()
        peer.close()
        return bytes(got)

    assert trio.run(main) == _expected()


def test_a_stream_that_is_not_a_socket_gets_the_same_bytes(segment: Path) -> None:
    async def main() -> bytes:
        send, receive = trio.testing.memory_stream_pair()
        chunks = [b"head", *_ranges(segment)]
        chunks.insert(2, b"mid" * 10_000)
        chunks.append(b"tail")
        got = bytearray()
        async with trio.open_nursery() as nursery:
            async def read() -> None:
                while len(got) < len(_expected()):
                    got.extend(await receive.receive_some(65536))
            nursery.start_soon(read)
            await zero_copy.send_response(send, chunks)
        return bytes(got)

    assert trio.run(main) == _expected()


def test_take_dups_only_large_slices_of_real_files(segment: Path) -> None:
    f = OS_STORE.open(segment)
    try:
        small = zero_copy.take(FileSlice(f, 10, zero_copy.SENDFILE_MIN_BYTES - 1), True)
        assert small == CONTENT[10:10 + zero_copy.SENDFILE_MIN_BYTES - 1]
        assert zero_copy.take(FileSlice(f, 0, 1 << 20), False) == CONTENT[:1 << 20]
        big = zero_copy.take(FileSlice(f, 5, 1 << 20), True)
        assert isinstance(big, FileRange) and big.fd != f.fd  # its own descriptor
    finally:
        f.close()  # the segment closes (deleted, compacted away): the range still reads
    assert big.read() == CONTENT[5:5 + (1 << 20)]
    big.close()


def test_kio_fallback_reads_and_closes_the_ranges(segment: Path) -> None:
    mod, resp = codec.response_module(FETCH, 16), codec.response_class(FETCH, 16)
    fds = _open_fds()
    r1, r2 = _ranges(segment)

    def body(first: object, second: object) -> object:
        parts = [codec.build(mod.PartitionData, partition_index=i, error_code=ErrorCode.none,
                             high_watermark=10, last_stable_offset=10, log_start_offset=0,
                             aborted_transactions=None, preferred_read_replica=-1, records=rec)
                 for i, rec in enumerate((first, second))]
        topic = codec.build(mod.FetchableTopicResponse, topic_id=None, partitions=tuple(parts))
        return codec.build(resp, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none,
                           session_id=0, responses=(topic,), node_endpoints=())

    with_ranges = body(r1, r2)
    copied = body(r1.read(), r2.read())
    chunks = encode_fetch_response(16, 7, with_ranges)
    assert chunks is not None
    framed = b"".join(c.read() if isinstance(c, FileRange) else bytes(c)  # type: ignore[call-overload]
                      for c in chunks)
    as_bytes = zero_copy.with_bytes(with_ranges)
    assert codec.encode_response(FETCH, 16, 7, as_bytes) == framed
    assert codec.encode_response(FETCH, 16, 7, copied) == framed
    assert r1.fd == -1 and r2.fd == -1 and _open_fds() == fds


def test_a_fast_tcp_reader_never_waits_for_held_back_data(segment: Path) -> None:
    """64 ranges of 1 MiB over loopback TCP. Bytes held back as "more to come"
    (the framing once went with MSG_MORE) stalled the send until the 200 ms
    retransmission timer, again and again: 4-10 s here, 0.05 s without."""
    async def main() -> float:
        listener = trio.socket.socket()
        await listener.bind(("127.0.0.1", 0))
        listener.listen()
        client = trio.socket.socket()
        await client.connect(listener.getsockname())
        server, _ = await listener.accept()
        stream = trio.SocketStream(server)
        fd = os.open(segment, os.O_RDONLY)
        chunks: list[bytes | FileRange] = []
        for i in range(64):
            chunks += [b"x" * 50, FileRange(os.dup(fd), i * 4099, 1 << 20)]
        os.close(fd)
        total = sum(len(c) for c in chunks)
        got = 0

        async def read() -> None:
            nonlocal got
            while got < total:
                got += len(await client.recv(1 << 20))

        started = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await zero_copy.send_response(stream, chunks)
        elapsed = trio.current_time() - started
        for s in (stream, client, listener):
            await s.aclose() if isinstance(s, trio.SocketStream) else s.close()
        return elapsed

    assert trio.run(main) < 2.0


def test_a_dropped_range_closes_its_descriptor(segment: Path) -> None:
    fds = _open_fds()
    ranges = _ranges(segment)
    assert _open_fds() == fds + 2
    del ranges
    assert _open_fds() == fds
