"""A simulated network: loss, duplication, reordering, delays and partitions.

Theory of operation
-------------------
``send`` decides a message's fate from the seeded ``rng`` at once: dropped
with probability ``loss``, otherwise queued for delivery after a delay drawn
from ``[delay_ms_min, delay_ms_max]`` (occasionally ``delay_ms_spike``, so
messages overtake each other), and queued a second time with probability
``duplicate``. A partition assigns nodes to sides; a message is dropped when
its ends are on different sides at send time *or* at delivery time. Ties are
broken by a sequence number, so one seed always yields one schedule.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from random import Random

from kcompat.raft import Message


@dataclass(frozen=True, slots=True)
class NetworkFaults:
    loss: float = 0.0
    duplicate: float = 0.0
    delay_ms_min: int = 1
    delay_ms_max: int = 10
    spike: float = 0.0  # probability of a long delay (reordering)
    delay_ms_spike: int = 300


RELIABLE = NetworkFaults()


class SimNetwork:
    def __init__(self, rng: Random, faults: NetworkFaults = RELIABLE) -> None:
        self.rng = rng
        self.faults = faults
        self._queue: list[tuple[int, int, Message]] = []
        self._seq = 0
        self._side: dict[int, int] = {}
        self.sent = self.dropped = self.delivered = 0

    def partition(self, sides: list[list[int]]) -> None:
        """Cut the network between ``sides``; nodes not named share side 0."""
        self._side = {n: i + 1 for i, side in enumerate(sides) for n in side}

    def heal(self) -> None:
        self._side = {}

    def connected(self, a: int, b: int) -> bool:
        return self._side.get(a, 0) == self._side.get(b, 0)

    def send(self, now_ms: int, m: Message) -> None:
        self.sent += 1
        f = self.faults
        if not self.connected(m.src, m.dst) or self.rng.random() < f.loss:
            self.dropped += 1
            return
        copies = 2 if self.rng.random() < f.duplicate else 1
        for _ in range(copies):
            delay = self.rng.randint(f.delay_ms_min, f.delay_ms_max)
            if self.rng.random() < f.spike:
                delay = self.rng.randint(f.delay_ms_max, f.delay_ms_spike)
            self._seq += 1
            heapq.heappush(self._queue, (now_ms + delay, self._seq, m))

    def next_delivery_ms(self) -> int | None:
        return self._queue[0][0] if self._queue else None

    def due(self, now_ms: int) -> list[Message]:
        """Pop every message due at or before ``now_ms`` that may still pass."""
        out: list[Message] = []
        while self._queue and self._queue[0][0] <= now_ms:
            m = heapq.heappop(self._queue)[2]
            if self.connected(m.src, m.dst):
                out.append(m)
                self.delivered += 1
            else:
                self.dropped += 1
        return out

    def drop_to(self, node_id: int) -> None:
        """Forget messages in flight to ``node_id`` (it crashed)."""
        self._queue = [q for q in self._queue if q[2].dst != node_id]
        heapq.heapify(self._queue)
