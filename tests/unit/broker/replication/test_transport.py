"""The inter-broker link (``replication.transport.PeerLink``) on a real
loopback socket: frames reach the peer, and a secured link whose handshake
the peer never completes is dropped and dialled again instead of holding the
link for good (its frames would be dropped forever, the peer never hearing
this broker's Raft messages)."""

from __future__ import annotations

import pytest
import trio

from kcompat.broker.replication import transport
from kcompat.broker.replication.transport import PeerLink


async def _serve(received: list[bytes], task_status: trio.TaskStatus[int]) -> None:
    async def handle(stream: trio.SocketStream) -> None:
        async with stream:
            async for chunk in stream:
                received.append(bytes(chunk))

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(handle, listeners)


def test_a_handshake_the_peer_never_completes_is_dialled_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "HANDSHAKE_TIMEOUT_S", 0.3, raising=False)
    monkeypatch.setattr(transport, "AUTH_RETRY_S", 0.05)
    handshakes: list[int] = []

    async def secure(stream: trio.SocketStream, _host: str) -> trio.abc.Stream:
        handshakes.append(1)
        if len(handshakes) == 1:
            await trio.sleep_forever()  # the first peer never answers its handshake
        return stream

    async def main() -> None:
        received: list[bytes] = []
        async with trio.open_nursery() as nursery:
            port = await nursery.start(_serve, received)
            link = PeerLink(2, "127.0.0.1", port, secure)
            nursery.start_soon(link.run)
            with trio.fail_after(5):
                while not link.connected:
                    await trio.sleep(0.02)
                link.send(b"frame")
                while b"".join(received) != b"frame":
                    await trio.sleep(0.02)
            nursery.cancel_scope.cancel()
        assert len(handshakes) == 2

    trio.run(main)


def test_an_urgent_frame_goes_ahead_of_the_queued_ones() -> None:
    """The control plane's frames (``urgent``: the metadata quorum's, the
    heartbeats) leave before the partition frames queued ahead of them, and
    each queue keeps its own order."""

    async def main() -> None:
        received: list[bytes] = []
        async with trio.open_nursery() as nursery:
            port = await nursery.start(_serve, received)
            link = PeerLink(2, "127.0.0.1", port)
            for i in range(3):
                link.send(b"bulk%d." % i)
            link.send(b"meta0.", urgent=True)
            link.send(b"meta1.", urgent=True)
            nursery.start_soon(link.run)
            want = b"meta0.meta1.bulk0.bulk1.bulk2."
            with trio.fail_after(5):
                while len(b"".join(received)) < len(want):
                    await trio.sleep(0.02)
            nursery.cancel_scope.cancel()
        assert b"".join(received) == want

    trio.run(main)


def test_a_full_queue_drops_its_own_frames_only() -> None:
    """Each queue is bounded on its own: a peer that reads nothing fills the
    partition frames' queue, and the control plane's frames still queue."""
    link = PeerLink(2, "127.0.0.1", 1)
    for _ in range(transport.QUEUE_FRAMES_MAX + 5):
        link.send(b"bulk")
    link.send(b"meta", urgent=True)
    assert link.dropped == 5
    assert list(link._urgent) == [b"meta"]
