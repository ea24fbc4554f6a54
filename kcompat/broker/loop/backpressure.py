"""Backpressure: a service that falls behind slows the clients that feed it (issue 31).

Theory of operation
-------------------
Several services do work that piles up behind what clients send: delayed
delivery and retry / dead-letter moves (``delays``), a leader's records not
yet replicated (``replication.backlog``), share-state writes (``shares``).
Each registers a ``LagSource`` here: a name, and how far behind it is — in
seconds, 0 when on time — for one of its keys (a schedule partition, a
topic-partition, a state partition) and for every key it has (``/metrics``).

A request handler asks once per request (``throttle_ms``), for the keys the
request fed. A source more than its ``from_s`` behind earns the request a
throttle of as much again (``lag - from_s``), at most ``THROTTLE_MAX_MS``, or
what the source's own ``throttle`` says (delayed delivery's weighs its
intake against what it delivers: ``delay_pressure``) —
Kafka's quota answer (KIP-219): ``throttle_time_ms`` in the response and the
connection muted that long (``handlers._quota.throttle``). The client sends
less while the service catches up; nothing is refused, nothing is lost, and
a client whose requests feed no late service is never slowed.

Pull, not push: a lag is computed when asked (a comparison or two per key),
so an idle service costs nothing and no stale report can throttle anyone.
Each source's lags are exported (``kcompat_backpressure_lag_seconds``, by
source and key) and so is the throttle given
(``kcompat_backpressure_throttle_seconds_total``, by source).

Not a source: a dedup index being rebuilt (``dedup_windows``) — an append
that needs it waits for it, so its producer is slowed by the wait itself.
Replication is one mostly for ``acks=0/1`` producers (an ``acks=all`` one
waits for its replicas anyway), and below ``min.insync.replicas`` an
``acks=all`` batch is refused as Kafka refuses it (NOT_ENOUGH_REPLICAS,
``handlers.produce``).

Known limit: a source knows its lag where its work is done (a schedule
partition's leader, a state partition's writer); a client whose request
lands on another broker is slowed only by what that broker sees.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

THROTTLE_MAX_MS = 1000  # a throttle per request, at most (Kafka caps a quota's too)


@dataclass(frozen=True, slots=True)
class LagSource:
    name: str  # "delayed", "retry", "replication", "share_state"
    lag_s: Callable[[Any], float]  # how far behind, for one key (0: on time)
    lags: Callable[[], Iterable[tuple[str, float]]]  # (key label, seconds) for /metrics
    from_s: float = 0.5  # behind by more than this, its clients are throttled
    # a source's own throttle for a key, when it knows better than the lag
    # beyond ``from_s`` (delayed delivery weighs its intake against delivery)
    throttle: Callable[[Any], int] | None = None


class Backpressure:
    def __init__(self) -> None:
        self.sources: dict[str, LagSource] = {}
        self.throttled: Counter | None = None

    def register(self, source: LagSource) -> None:
        self.sources[source.name] = source

    def lag_s(self, name: str, keys: Iterable[Hashable]) -> float:
        """How far behind source ``name`` is at the worst of ``keys``."""
        source = self.sources.get(name)
        if source is None:
            return 0.0
        return max((source.lag_s(key) for key in keys), default=0.0)

    def throttle_ms(self, name: str, keys: Iterable[Hashable], seen_s: float = 0.0) -> int:
        """The throttle a request that fed ``keys`` of source ``name`` earns
        (0: on time, or no such source); ``seen_s``: a lag the request saw
        earlier (before it waited for the service itself)."""
        source = self.sources.get(name)
        if source is None:
            return 0
        if source.throttle is not None:
            throttle = max((source.throttle(key) for key in keys), default=0)
        else:
            late_s = max(self.lag_s(name, keys), seen_s)
            throttle = (min(int((late_s - source.from_s) * 1000), THROTTLE_MAX_MS)
                        if late_s > source.from_s else 0)
        if throttle <= 0:
            return 0
        if self.throttled is not None:
            self.throttled.labels(name).inc(throttle / 1000)
        return throttle

    def behind(self) -> bool:
        """Some service is behind beyond its bound for one of its keys: work
        that can wait (the codec's warm-up) leaves the CPU to it meanwhile."""
        return any(seconds > source.from_s
                   for source in self.sources.values() for _key, seconds in source.lags())

    def export(self, registry: CollectorRegistry) -> None:
        self.throttled = Counter("kcompat_backpressure_throttle_seconds",
                                 "Throttle given to clients because a service they feed is "
                                 "behind, per service", ["source"], registry=registry)
        registry.register(_LagCollector(self))


class _LagCollector(Collector):
    def __init__(self, backpressure: Backpressure) -> None:
        self.backpressure = backpressure

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        gauge = GaugeMetricFamily("kcompat_backpressure_lag_seconds",
                                  "How far behind each service is, per key it reports "
                                  "(0: on time); over its bound, its clients are throttled",
                                  labels=["source", "key"])
        for name, source in sorted(self.backpressure.sources.items()):
            for key, seconds in source.lags():
                gauge.add_metric((name, key), seconds)
        yield gauge
