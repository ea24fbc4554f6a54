"""A leader's unreplicated backlog: how long its oldest record has waited (issue 31).

Theory of operation
-------------------
A record appended by a partition's leader is committed (below the high
watermark) once a quorum of its replicas holds it. An ``acks=all`` producer
waits for that anyway; an ``acks=0`` or ``acks=1`` producer does not, so when
followers fall behind — a slow disk, a loaded broker — what the leader holds
unreplicated grows with what such producers send. Kafka bounds it by the
ISR (``min.insync.replicas``); here its *age* is a lag source of
``backpressure`` (``replication``, keyed by topic-partition): a produce to a
partition whose oldest unreplicated record has waited more than ``FROM_S``
is throttled as a quota throttles, until the followers catch up.

The age is sampled, not tracked per record: whenever a partition's age is
asked (each produce that appended to it, each scrape), its log end is noted
with the time — at most every ``SAMPLE_S``, at most ``SAMPLES`` notes. The
oldest note whose log end is above the high watermark proves that the record
at the high watermark already existed then: its age is at least now minus
that note's time. Notes at or below the high watermark are dropped. A first
ask sees no age (0): the estimate only ever errs on the side of not
throttling. Nothing is added to the Raft driver; a partition no longer led
here is forgotten at the next ask or scrape.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from kcompat.broker.loop.backpressure import LagSource

if TYPE_CHECKING:
    from kcompat.broker.replication.runtime import ClusterRuntime

FROM_S = 1.0  # an unreplicated record older than this slows the partition's producers
SAMPLE_S = 0.05
SAMPLES = 64


class UnreplicatedBacklog:
    def __init__(self, cluster: ClusterRuntime,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cluster = cluster
        self.clock = clock
        self._notes: dict[tuple[str, int], deque[tuple[int, float]]] = {}

    def age_s(self, key: tuple[str, int]) -> float:
        """How long the oldest record of ``key`` (topic, partition) led here
        and not yet committed has waited, at least (0: none, or not led here)."""
        topic, index = key
        group = self.cluster.group_of(topic, index)
        if group is None or not group.is_leader:
            self._notes.pop((topic, index), None)
            return 0.0
        end, hw = group.storage.plog.log_end_offset, group.hw
        notes = self._notes.get((topic, index))
        if end <= hw:  # nothing waits
            if notes is not None:
                del self._notes[(topic, index)]
            return 0.0
        now = self.clock()
        if notes is None:
            notes = self._notes[(topic, index)] = deque()
        while notes and notes[0][0] <= hw:
            notes.popleft()
        if len(notes) < SAMPLES and (not notes or now - notes[-1][1] >= SAMPLE_S) and (
                not notes or end > notes[-1][0]):
            notes.append((end, now))
        return now - notes[0][1]

    def ages(self) -> Iterable[tuple[str, float]]:
        """(topic-partition, age) of each partition noted (``/metrics``)."""
        for topic, index in sorted(self._notes):
            yield f"{topic}-{index}", self.age_s((topic, index))

    def source(self) -> LagSource:
        return LagSource("replication", self.age_s, self.ages, FROM_S)
