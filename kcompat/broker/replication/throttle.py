"""The replication throttle for replicas catching up (Kafka's
``leader.replication.throttled.rate``).

Theory of operation
-------------------
A replica being added by a reassignment fetches the whole log from the
partition's leader as a Raft observer; unthrottled, a large move competes
with producers for the leader's disk and network. Kafka caps the bytes a
leader sends to throttled replicas per second with the dynamic broker config
``leader.replication.throttled.rate`` (bytes/s, cluster default or per
broker; unset is unlimited). Here it applies to every observer of a
partition group — exactly the replicas catching up — never to the voters
(the ISR keeps its pace) nor to the metadata quorum.

A token bucket: the bytes of entries sent to observers are spent after the
fact (the bucket may go below zero by one response, at most
``RaftConfig.max_fetch_bytes``), the rate refills it, and it holds at most one
second of the rate. While it is below zero, the runtime keeps an observer's
next fetch (the newest per group and node) instead of stepping it into the
Raft core, and hands the kept fetches over as soon as it refills — the
observer simply sees a slower long poll, so the throttle needs nothing from
the Raft core or the observer.

Under a rate, each answer to an observer is also kept small — about
1/``CHUNKS_PER_S`` of a second's worth (``FetchRequest.max_bytes``; at least
one whole batch still goes) — so the leader reads and frames the move in
pieces between the requests it serves rather than a mebibyte or two at a
time (a producer's p99 on that leader otherwise doubles during a move).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from kcompat.raft import FetchRequest

RATE_KEY = "leader.replication.throttled.rate"
UNLIMITED = 2**63 - 1  # Kafka's default: Long.MAX_VALUE
CHUNKS_PER_S = 50  # answers to observers per second of the rate, at most
MIN_CHUNK = 16 << 10


def configured_rate(levels: dict[str, dict[str, str]], node_id: int) -> int:
    """The rate that applies to ``node_id``: its own dynamic level over the
    cluster default (raw values; one that does not parse is unlimited)."""
    for level in (str(node_id), ""):
        raw = levels.get(level, {}).get(RATE_KEY)
        if raw is not None:
            try:
                return max(0, int(raw))
            except ValueError:
                return UNLIMITED
    return UNLIMITED


class CatchUpThrottle:
    def __init__(self, rate: Callable[[], int], clock: Callable[[], float]) -> None:
        self._rate = rate
        self._clock = clock
        self._tokens = 0.0
        self._at: float | None = None
        self._held: dict[tuple[int, int], FetchRequest] = {}

    def _open(self) -> bool:
        rate = self._rate()
        if rate >= UNLIMITED:
            self._tokens, self._at = 0.0, None
            return True
        now = self._clock()
        if self._at is None:
            self._tokens = float(rate)  # a first second's worth
        else:
            self._tokens = min(float(rate), self._tokens + (now - self._at) * rate)
        self._at = now
        return self._tokens > 0

    def admit(self, m: FetchRequest) -> FetchRequest | None:
        """An observer's fetch: the fetch to step now (sized for the rate),
        or None if it is kept."""
        if not self._held and self._open():
            return self._sized(m)
        self._held[(m.group, m.src)] = m
        return None

    def _sized(self, m: FetchRequest) -> FetchRequest:
        rate = self._rate()
        if rate >= UNLIMITED:
            return m
        return dataclasses.replace(m, max_bytes=max(MIN_CHUNK, rate // CHUNKS_PER_S))

    def spend(self, size: int) -> None:
        """Bytes of entries just sent to an observer."""
        if self._at is not None:
            self._tokens -= size

    @property
    def holding(self) -> bool:
        """Fetches are kept for the bucket to refill (``release`` each tick)."""
        return bool(self._held)

    def release(self) -> list[FetchRequest]:
        """The kept fetches to step now (none while the bucket is empty)."""
        if not self._held or not self._open():
            return []
        out = [self._sized(m) for m in self._held.values()]
        self._held.clear()
        return out
