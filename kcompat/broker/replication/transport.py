"""Inter-broker transport: one outbound connection per peer, one-way frames.

Theory of operation
-------------------
Why a private API key rather than Kafka's KRaft RPCs: the Raft core speaks
KRaft's messages (Vote, BeginQuorumEpoch, Fetch with a replica id, ...), but
as small values with a Raft-group id, and Kafka's RPCs are request/response
pairs tied to one topic-partition naming scheme per RPC. A single one-way
frame type (``KCOMPAT_RAFT``, api key 1000, never advertised in ApiVersions)
lets a driver round ship *all* messages for a peer — any mix of kinds, any
number of groups — in one write, and lets a response travel on the
responder's own outbound connection. That is simpler and batches better;
mapping to Kafka's RPCs stays possible later because the message set is the
same.

Each broker dials every peer's Kafka listener once and keeps that connection;
inbound frames arrive through the ordinary connection handler
(``kcompat.broker.node.connection``) and go to ``ClusterRuntime.receive``. Delivery
is best effort, as Raft assumes: when a peer is down, slow or stopped
(SIGSTOP), frames are dropped rather than queued without bound, and the
connection is re-dialled; the Raft core re-sends what matters (fetch retries,
BeginQuorumEpoch, votes on the next timeout). A secured link's handshake is
bounded (``HANDSHAKE_TIMEOUT_S``): one the peer never completes is dropped and
dialled again, not waited on for good.

Two queues per link: frames of the control plane (the metadata quorum's
messages, the pair heartbeats, a broker's heartbeat to the controller and
the calls forwarded to it) are sent ``urgent`` — ahead of every queued frame
of partition data, each bounded on its own — so a metadata follower hears
its leader within its election timeout however much replication traffic
waits in the queue (issue 31: the control plane never waits for the data
plane). Order holds within each queue: a partition group's messages all go
the one way, the metadata log's all the other.

A large frame (a catching-up replica's entries) goes out ``SEND_SLICE`` bytes
per send: on loopback the kernel does the receiver's work inside the sender's
send call, and one call of a few hundred KiB holds the event loop — and the
requests it serves — for a millisecond or more; trio yields between slices.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Protocol

import trio

log = logging.getLogger("kcompat.cluster")

QUEUE_FRAMES_MAX = 256
CONNECT_TIMEOUT_S = 1.0
#: a secured link's TLS and SASL handshake: past this, the connection is dropped and
#: dialled again (a handshake the peer never answers must not hold the link for good)
HANDSHAKE_TIMEOUT_S = 5.0
SEND_TIMEOUT_S = 3.0
RETRY_S = 0.2
SEND_SLICE = 64 << 10


class Link(Protocol):
    """A one-way, best-effort frame channel to one peer."""

    def send(self, frame: bytes, urgent: bool = False) -> None:
        """Queue ``frame`` (``urgent``: ahead of the others); never blocks, may drop."""

    async def run(self) -> None:
        """Deliver queued frames until cancelled."""


# (peer node id, host, port) -> its link; the simulator passes its own network's
LinkFactory = Callable[[int, str, int], Link]


# the inter-broker listener's security, spoken first on a new connection
# (``kcompat.broker.net.peer_security``): TLS and/or SASL; None on PLAINTEXT
Secure = Callable[[trio.SocketStream, str], Awaitable[trio.abc.Stream]]
AUTH_RETRY_S = 1.0


class PeerLink:
    def __init__(self, node_id: int, host: str, port: int, secure: Secure | None = None
                 ) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self.secure = secure
        self._urgent: deque[bytes] = deque()
        self._bulk: deque[bytes] = deque()
        self._queued = trio.Event()
        self.dropped = 0
        self.connected = False

    def send(self, frame: bytes, urgent: bool = False) -> None:
        """Queue ``frame``, ``urgent`` ahead of the others; dropped (counted)
        when its queue is full."""
        queue = self._urgent if urgent else self._bulk
        if len(queue) >= QUEUE_FRAMES_MAX:
            self.dropped += 1
            return
        queue.append(frame)
        self._queued.set()

    async def _next(self) -> bytes:
        """The next frame to send: the oldest urgent one, else the oldest."""
        while not (self._urgent or self._bulk):
            await self._queued.wait()
            self._queued = trio.Event()
        return (self._urgent or self._bulk).popleft()

    def _drain(self) -> None:
        self.dropped += len(self._urgent) + len(self._bulk)
        self._urgent.clear()
        self._bulk.clear()

    async def run(self) -> None:
        while True:
            try:
                with trio.fail_after(CONNECT_TIMEOUT_S):
                    stream: trio.abc.Stream = await trio.open_tcp_stream(self.host, self.port)
            except (OSError, trio.TooSlowError):
                self._drain()
                await trio.sleep(RETRY_S)
                continue
            if self.secure is not None:
                try:
                    assert isinstance(stream, trio.SocketStream)
                    with trio.fail_after(HANDSHAKE_TIMEOUT_S):
                        stream = await self.secure(stream, self.host)
                except Exception as e:  # TLS or SASL refused or stuck: say why, try again later
                    log.warning("cannot secure the link to peer %d at %s:%d: %s", self.node_id,
                                self.host, self.port, e)
                    with trio.move_on_after(1):
                        await stream.aclose()
                    self._drain()
                    await trio.sleep(AUTH_RETRY_S)
                    continue
            if not self.connected:
                log.info("connected to peer %d at %s:%d", self.node_id, self.host, self.port)
            self.connected = True
            try:
                async with stream:
                    while True:
                        frame = await self._next()
                        with trio.fail_after(SEND_TIMEOUT_S):
                            if len(frame) <= SEND_SLICE:
                                await stream.send_all(frame)
                                continue
                            with memoryview(frame) as view:
                                for at in range(0, len(frame), SEND_SLICE):
                                    await stream.send_all(view[at:at + SEND_SLICE])
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError,
                    trio.TooSlowError):
                log.info("lost connection to peer %d", self.node_id)
                self.connected = False
                self._drain()
                await trio.sleep(RETRY_S)
