"""Backpressure of delayed delivery: how long to throttle a produce that schedules.

Theory of operation
-------------------
A schedule partition falls behind when records become due faster than its
leader delivers them. What it took in just now is due from 5 s to minutes
later, so slowing intake does not shorten the wait of what is already due —
it gives the CPU to delivery now and keeps the due rate later within what
delivery achieves. While a schedule partition is more than ``FROM_S``
overdue, a produce that scheduled records there is throttled as Kafka
throttles a client over its quota (``throttle_time_ms``, the connection
muted; ``ClientQuotaManager``'s ``(O - T) / T * W``):

* the quota ``T`` is the rate at which the partition delivered over the last
  window (``INTAKE_SHARE`` of it, ``FLOOR_PER_S`` at least), ``O`` the rate
  at which records were scheduled into it over the same window, this
  produce's included — the throttle follows the records a produce brings,
  so a producer that batches more while muted does not outrun it;
* and at least as much as the partition is late beyond ``FROM_S``
  (whatever the rates: a partition that delivers nothing still slows its
  producers), ``LATENESS_MAX_MS`` at most.

Capped at ``THROTTLE_MAX_MS``. Rates are counts in ``SAMPLES`` samples of
``SAMPLE_S`` each (the current one partial), as Kafka's quota samples.
Pure: the host passes the time and the lateness.
"""

from __future__ import annotations

from collections import deque

FROM_S = 0.5  # overdue beyond this: producers of what is scheduled there are slowed
THROTTLE_MAX_MS = 5_000
# the lateness alone earns this much at most (the rates say more: a lateness read
# while a slot is still being promoted can overstate it)
LATENESS_MAX_MS = 1_000
INTAKE_SHARE = 1.0  # while late, intake may not outpace delivery
FLOOR_PER_S = 1_000.0  # the quota never drops below this many records per second
SAMPLE_S = 0.5
SAMPLES = 4


class Meter:
    """Events counted in samples of ``SAMPLE_S``; the rate over the last
    ``SAMPLES`` of them."""

    def __init__(self) -> None:
        self._samples: deque[list[float]] = deque()  # [start s, count]

    def add(self, count: int, now_s: float) -> None:
        self._roll(now_s)
        if self._samples and now_s < self._samples[-1][0] + SAMPLE_S:
            self._samples[-1][1] += count
        else:
            self._samples.append([now_s, float(count)])

    def _roll(self, now_s: float) -> None:
        while self._samples and self._samples[0][0] <= now_s - SAMPLE_S * SAMPLES:
            self._samples.popleft()

    def window(self, now_s: float) -> tuple[float, float]:
        """(count, seconds covered) over the window: at least one sample's
        length, as Kafka counts a rate's elapsed time."""
        self._roll(now_s)
        if not self._samples:
            return 0.0, SAMPLE_S * SAMPLES
        covered = max(now_s - self._samples[0][0], SAMPLE_S * (SAMPLES - 1))
        return sum(s[1] for s in self._samples), covered


class Backpressure:
    """Intake and delivery meters per schedule partition, and the throttle."""

    def __init__(self) -> None:
        self._scheduled: dict[int, Meter] = {}
        self._delivered: dict[int, Meter] = {}

    def scheduled(self, index: int, count: int, now_s: float) -> None:
        self._scheduled.setdefault(index, Meter()).add(count, now_s)

    def delivered(self, index: int, count: int, now_s: float) -> None:
        self._delivered.setdefault(index, Meter()).add(count, now_s)

    def throttle_ms(self, index: int, late_s: float, now_s: float) -> int:
        """The throttle of a produce that scheduled records into schedule
        partition ``index``, ``late_s`` overdue (see the module)."""
        if late_s <= FROM_S:
            return 0
        by_lateness = min((late_s - FROM_S) * 1000, LATENESS_MAX_MS)
        intake = self._scheduled.get(index)
        by_rate = 0.0
        if intake is not None:
            count, covered = intake.window(now_s)
            outflow = self._delivered.get(index)
            out_count, out_covered = outflow.window(now_s) if outflow else (0.0, covered)
            quota = max(out_count / out_covered * INTAKE_SHARE, FLOOR_PER_S)
            by_rate = (count / quota - covered) * 1000  # (O - T) / T * W
        return round(min(max(by_lateness, by_rate), THROTTLE_MAX_MS))
