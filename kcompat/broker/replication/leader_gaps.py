"""How long a follower of the metadata quorum goes without word from its leader.

Theory of operation
-------------------
A follower of the metadata log elects a new leader when it has heard nothing
from the one it follows (a fetch answered, a BeginQuorumEpoch) for its fetch
timeout (KRaft's ``controller.quorum.fetch.timeout.ms``, 2 s) and up to an
election timeout more (``kcompat.raft.election.timeout.ms``, 1 s). Its fetches
wait at the leader for at most half an election timeout when nothing is new,
so a healthy quorum shows gaps a little over 0.5 s. A gap that comes near the
fetch timeout under load
is an election about to happen that nothing else shows: the leader's answer
waited behind its data plane (a round's fsync pass, a queue of bulk frames,
a busy loop). ``LeaderGaps`` measures every gap in wall time as frames
arrive (``heard``) and exports them:

* ``kcompat_metadata_leader_gap_seconds`` — a histogram of the gaps;
* ``kcompat_metadata_leader_gap_longest_seconds`` — the longest one.

A gap is measured between two contacts from the same leader: the first
contact after a change of leader, or after this broker led, starts a new
count. A gap of three quarters of the fetch timeout or more is also
logged, with the leader and its length: when it happened tells what the
leader was doing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Gauge, Histogram

log = logging.getLogger("kcompat.cluster")

GAP_BUCKETS_S = (0.25, 0.5, 0.6, 0.75, 0.9, 1.0, 1.25, 1.5, 2.0, 5.0)
NEAR = 0.75  # of the fetch timeout: a gap worth a log line


class LeaderGaps:
    def __init__(self, fetch_timeout_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # a gap this long is logged: three quarters of the fetch timeout
        self.worth_saying_s = NEAR * fetch_timeout_s
        self._leader = -1
        self._last = 0.0
        self.longest_s = 0.0
        self.count = 0
        self._gaps: Histogram | None = None

    def export(self, registry: CollectorRegistry) -> None:
        self._gaps = Histogram(
            "kcompat_metadata_leader_gap_seconds", "The time between two contacts from the "
            "metadata quorum's leader, as its follower here saw it (a fetch answered, a "
            "BeginQuorumEpoch): an election follows one longer than the fetch timeout",
            buckets=GAP_BUCKETS_S, registry=registry)
        Gauge("kcompat_metadata_leader_gap_longest_seconds", "The longest time this broker's "
              "metadata follower went without word from its leader since the start",
              registry=registry).set_function(lambda: self.longest_s)

    def heard(self, leader: int) -> None:
        """A contact from ``leader``, the leader this follower follows."""
        now = self._clock()
        if leader == self._leader:
            gap = now - self._last
            self.count += 1
            self.longest_s = max(self.longest_s, gap)
            if self._gaps is not None:
                self._gaps.observe(gap)
            if gap >= self.worth_saying_s:
                log.info("no word from the metadata leader %d for %.2f s (fetch "
                         "timeout %.2f s)", leader, gap, self.worth_saying_s / NEAR)
        self._leader, self._last = leader, now

    def left(self) -> None:
        """This broker leads or follows nobody: the next contact starts a count."""
        self._leader = -1
