"""The log cleaner service: compaction of every ``cleanup.policy=compact`` log here.

Theory of operation
-------------------
One task per broker (Kafka's ``log.cleaner.threads=1``) wakes every
``log.cleaner.backoff.ms`` and walks the partitions this broker holds, leader
or follower alike: each replica compacts its own log (``kcompat.log.cleaner``).
For a log whose pass is due, ``PartitionLog.cleaner_plan`` picks the segments
(below the Raft high watermark and the last stable offset) and opens read
handles on them; the pass itself — reading, hashing keys, writing new
segments — runs in a worker thread, so the trio loop keeps serving; the swap
(``cleaner_done``) runs back on the loop between two appends. A log whose
active segment is older than ``max.compaction.lag.ms`` is rolled first, so its
records become cleanable in time. A pass that fails (a deleted topic, a full
disk) is logged and abandoned; its scratch files go, the log is unchanged.

*The GIL.* A pass is pure-Python work that holds the GIL between the
interpreter's forced switches; the loop thread, which gives the GIL up at
every socket call, then waits a whole switch interval (5 ms by default) each
time it wants it back, so a produce took ~0.1-1 s while a pass ran
(bench/compaction.py: probe p50 80-600 ms against 2-4 ms). While a pass runs
the cleaner lowers the interpreter's switch interval to ``SWITCH_INTERVAL_S``
(the loop waits at most that long per hand-over) and puts it back after, so
the rest of the broker's threads (the flusher's fsyncs) keep the default.

Metrics (``BrokerMetrics``): passes, bytes read and written, records removed,
and per topic the largest dirty ratio seen (the cleaner's lag).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import trio
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from kcompat.log import cleaner

if TYPE_CHECKING:
    from kcompat.broker.storage.partition import Partition
    from kcompat.broker.storage.state import BrokerState

log = logging.getLogger("kcompat.cleaner")
SWITCH_INTERVAL_S = 0.0005  # the loop's longest wait for the GIL while a pass runs


class LogCleaner:
    def __init__(self, state: BrokerState) -> None:
        self.state = state
        self.passes = 0
        self.bytes_read = 0
        self.bytes_written = 0
        self.records_removed = 0
        self.dirty_ratio: dict[str, float] = {}  # topic -> largest dirty ratio at the last check

    def export(self, registry: CollectorRegistry) -> None:
        registry.register(_CleanerCollector(self))

    @property
    def max_keys(self) -> int:
        """Kafka's map costs 24 bytes a key; a Python dict entry (16-byte digest,
        offset) about 128, so the same buffer maps fewer keys per pass (the rest
        waits for the next pass). Read each pass: the key is dynamic."""
        return max(1024, int(self.state.config["log.cleaner.dedupe.buffer.size"]) // 128)

    async def run(self) -> None:
        if not self.state.config["log.cleaner.enable"]:
            return
        while True:
            await trio.sleep(self.state.config["log.cleaner.backoff.ms"] / 1000)
            await self.clean_all()

    async def clean_all(self) -> int:
        """One round over every partition; returns the passes that changed a log."""
        changed = 0
        ratios: dict[str, float] = {}
        for part in list(self.state.partitions.values()):
            if not part.log.config.compact:
                continue
            changed += await self._clean(part, ratios)
        self.dirty_ratio = ratios
        return changed

    async def _clean(self, part: Partition, ratios: dict[str, float]) -> int:
        plog = part.log
        now = _now_ms()
        active_first = plog.active_first_timestamp_ms()
        if active_first is not None and now - active_first > plog.config.max_compaction_lag_ms:
            plog.roll(now)
        try:
            plan = plog.cleaner_plan(part.high_watermark, now, self.max_keys)
        except OSError as exc:
            log.warning("cleaner: cannot plan %s-%d: %s", part.topic, part.index, exc)
            return 0
        if plan is None:
            return 0
        ratios[part.topic] = max(ratios.get(part.topic, 0.0), plan.dirty_bytes / plan.total_bytes)
        result: cleaner.Result | None = None
        try:
            with short_switch_interval():
                result = await trio.to_thread.run_sync(cleaner.clean, plan,
                                                       abandon_on_cancel=True)
        except trio.Cancelled:  # a drain does not wait for the pass; recovery drops its files
            plan.stop = True
            raise
        except Exception as exc:  # a deleted topic, a full disk: the log stays as it was
            log.warning("cleaner: pass over %s-%d abandoned: %s", part.topic, part.index, exc)
        try:
            done = plog.cleaner_done(result, plan)
        except OSError as exc:
            log.error("cleaner: swap in %s-%d failed: %s (recovery completes it)",
                      part.topic, part.index, exc)
            return 0
        if result is None:
            return 0
        self.passes += 1
        self.bytes_read += result.bytes_read
        self.bytes_written += result.bytes_written
        self.records_removed += result.records_removed
        if done:
            log.info("cleaner: %s-%d below %d: %d records removed, %d -> %d bytes",
                     part.topic, part.index, result.end, result.records_removed,
                     result.bytes_read, result.bytes_written)
        return int(done)


@contextmanager
def short_switch_interval() -> Iterator[None]:
    """The interpreter's switch interval at most ``SWITCH_INTERVAL_S`` inside."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(min(old, SWITCH_INTERVAL_S))
    try:
        yield
    finally:
        sys.setswitchinterval(old)


class _CleanerCollector(Collector):
    def __init__(self, cleaner_: LogCleaner) -> None:
        self.cleaner = cleaner_

    def collect(self) -> Iterable[Metric]:
        c = self.cleaner
        for name, doc, value in (
            ("kcompat_cleaner_passes", "Log cleaner passes run", c.passes),
            ("kcompat_cleaner_bytes_read", "Bytes of segments the log cleaner read", c.bytes_read),
            ("kcompat_cleaner_bytes_written", "Bytes of cleaned segments written", c.bytes_written),
            ("kcompat_cleaner_records_removed", "Records compaction removed", c.records_removed),
        ):
            yield CounterMetricFamily(name, doc, value=value)
        ratio = GaugeMetricFamily("kcompat_cleaner_dirty_ratio",
                                  "Largest dirty ratio of a topic's logs when last due (the "
                                  "cleaner's lag)", labels=["topic"])
        for topic, dirty in sorted(c.dirty_ratio.items()):
            ratio.add_metric([topic], dirty)
        yield ratio


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
