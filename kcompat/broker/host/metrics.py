"""Broker metrics in Prometheus form, one registry per broker.

Theory of operation
-------------------
Two kinds of metrics, chosen so the request path only ever increments:

* Event counters, bumped on the hot path — requests, failed requests and
  latency per API (``kcompat_requests_total{api,version}``,
  ``kcompat_request_errors_total{api,version}``,
  ``kcompat_request_latency_seconds{api}``), bytes appended and fetched per
  topic (``kcompat_topic_bytes_in_total``/``_out_total``), open
  connections, and long-polling fetches woken by news of a partition they
  wait on (``kcompat_fetch_wakeups_total{api}``: per-partition wake-ups,
  so an append wakes only the fetches of its partition) and the record bytes
  answered as segment-file ranges (``kcompat_fetch_sendfile_bytes_total``). Labelled children are cached in plain dicts, so a request costs
  one dict lookup and one locked add per metric.
* State gauges, computed only when ``/metrics`` is scraped by a custom
  collector that reads ``BrokerState``: log start/end offset, high watermark
  and size of every partition, committed offset and lag of every consumer
  group partition (lag = high watermark - committed offset, never negative),
  deduplication windows (``kcompat_dedup_duplicates_total{topic}``, evictions,
  ids held) and filtered views (``kcompat_view_records_total{view,result}``).

"Error" means a request the broker could not serve and answered by closing the
connection (unknown API, unsupported version, malformed frame, handler bug);
Kafka error codes inside well-formed responses are data, not errors here.
Each broker has its own ``CollectorRegistry``, so several brokers in
one process (tests) never share counters.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from kcompat.broker.loop.loop_monitor import labelled
from kcompat.wire.headers import HeaderError, peek_api
from kcompat.wire.versions import API_RANGES, KCOMPAT_RAFT, api_name

if TYPE_CHECKING:
    from kcompat.broker.storage.state import BrokerState
    from kcompat.group.offsets import OffsetStore

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                     2.5, 5.0, 10.0, 30.0)


#: the ``api`` label of the frames peer brokers send (``KCOMPAT_RAFT``: Raft
#: messages, announcements, forwarded calls): counted and timed like requests,
#: and named in the loop monitor's long steps ("InterBroker request")
INTER_BROKER = "InterBroker"


def _api_label(api_key: int) -> str:
    if api_key == KCOMPAT_RAFT:
        return INTER_BROKER
    return api_name(api_key) if api_key >= 0 else "Unknown"


class BrokerMetrics:
    def __init__(self, state: BrokerState | None = None,
                 offsets: OffsetStore | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("kcompat_requests", "Requests received, per API and version",
                                ["api", "version"], registry=r)
        self.errors = Counter("kcompat_request_errors",
                              "Requests answered by closing the connection, per API and version",
                              ["api", "version"], registry=r)
        self.failures = Counter(
            "kcompat_request_failures",
            "Requests whose handler failed unexpectedly (answered UNKNOWN_SERVER_ERROR), per API",
            ["api"], registry=r)
        self.latency = Histogram("kcompat_request_latency_seconds",
                                 "Time from a parsed frame to its encoded response, per API",
                                 ["api"], buckets=LATENCY_BUCKETS_S, registry=r)
        self.bytes_in = Counter("kcompat_topic_bytes_in", "Record bytes appended, per topic",
                                ["topic"], registry=r)
        self.bytes_out = Counter("kcompat_topic_bytes_out", "Record bytes fetched, per topic",
                                 ["topic"], registry=r)
        self.connections = Gauge("kcompat_open_connections", "Open client connections",
                                 registry=r)
        self.sendfile_bytes = Counter(
            "kcompat_fetch_sendfile_bytes",
            "Record bytes of Fetch answers given as segment-file ranges (sent with sendfile)",
            registry=r)
        self.wakeups = Counter("kcompat_fetch_wakeups",
                               "Long-polling fetches woken by news of a partition they wait on",
                               ["api"], registry=r)
        self.ready = False  # set by the runtime: listening and not draining
        self._request_children: dict[tuple[int, int], tuple[Any, Any, Any]] = {}
        self._request_kinds: dict[int, str] = {}  # API key -> "<API> request" (loop monitor)
        self._in_children: dict[str, Any] = {}
        self._out_children: dict[str, Any] = {}
        if state is not None:
            self.registry.register(StateCollector(state, offsets))

    # -- hot path ---------------------------------------------------------------
    @contextmanager
    def request(self, frame: bytes) -> Iterator[None]:
        """Count and time one request frame; an exception counts as an error."""
        try:
            api_key, version, _cid = peek_api(frame)
        except HeaderError:
            api_key, version = -1, -1
        rng = API_RANGES.get(api_key)
        if api_key == KCOMPAT_RAFT:
            version = 0  # the peers' Raft frames: a label of their own (``INTER_BROKER``)
        elif rng is None or not 0 <= version <= rng.max_version:
            api_key, version = (-1, -1) if rng is None else (api_key, -1)  # bounded labels
        children = self._request_children.get((api_key, version))
        if children is None:
            children = self._children_for(api_key, version)
        count, errors, latency = children
        count.inc()
        started = time.perf_counter()
        try:
            with labelled(self._request_kinds.get(api_key) or self._kind(api_key)):
                yield  # the loop monitor names the request a long step served
        except Exception:  # trio.Cancelled (a BaseException) is a drain, not an error
            errors.inc()
            raise
        finally:
            latency.observe(time.perf_counter() - started)

    def _kind(self, api_key: int) -> str:
        kind = self._request_kinds[api_key] = f"{_api_label(api_key)} request"
        return kind

    def _children_for(self, api_key: int, version: int) -> tuple[Any, Any, Any]:
        name = _api_label(api_key)
        labels = (name, str(version) if version >= 0 else "unsupported")
        children = (self.requests.labels(*labels), self.errors.labels(*labels),
                    self.latency.labels(name))
        self._request_children[(api_key, version)] = children
        return children

    def add_bytes_in(self, topic: str, size: int) -> None:
        child = self._in_children.get(topic)
        if child is None:
            child = self._in_children[topic] = self.bytes_in.labels(topic)
        child.inc(size)

    def add_bytes_out(self, topic: str, size: int) -> None:
        child = self._out_children.get(topic)
        if child is None:
            child = self._out_children[topic] = self.bytes_out.labels(topic)
        child.inc(size)

    def woken(self, api: str) -> None:
        """A waiting Fetch or ShareFetch was woken by one of its partitions."""
        self.wakeups.labels(api).inc()

    def produced(self, topic: str, records: bytes | None, ok: bool) -> None:
        """Produce handler hook: count the bytes of a batch that was appended."""
        if ok and records:
            self.add_bytes_in(topic, len(records))

    def fetched(self, names: Iterable[str | None], topics: Iterable[Any]) -> None:
        """Fetch handler hook: count the record bytes of a built response
        (``names``: each response topic's name, as v13+ answers carry ids)."""
        ranges = 0
        for name, topic in zip(names, topics, strict=True):
            size = 0
            for p in topic.partitions:
                records = p.records
                if records:
                    size += len(records)
                    if not isinstance(records, bytes):  # a file range (``zero_copy``)
                        ranges += len(records)
            if size and name is not None:
                self.add_bytes_out(name, size)
        if ranges:
            self.sendfile_bytes.inc(ranges)


class PartitionGauge(Metric):
    """A gauge with a sample per partition (labels topic, partition), made
    from ``rows`` (topic, partition, figures...: column ``column``) when its
    samples are first read, in partition order."""

    def __init__(self, name: str, documentation: str, rows: list[tuple[Any, ...]],
                 column: int) -> None:
        self._rows, self._column = rows, column
        self._made: list[Sample] | None = None
        super().__init__(name, documentation, "gauge")

    @property
    def samples(self) -> list[Sample]:
        if self._made is None:
            name, column = self.name, self._column
            self._made = [Sample(name, {"topic": row[0], "partition": str(row[1])}, row[column])
                          for row in sorted(self._rows)]
        return self._made

    @samples.setter
    def samples(self, value: list[Sample]) -> None:
        self._made = value or None  # ``Metric.__init__`` sets it empty


class StateCollector(Collector):
    """Partition and consumer-group gauges, read per scrape from the broker's
    partitions and the committed offsets (``OffsetStore``)."""

    def __init__(self, state: BrokerState, offsets: OffsetStore | None) -> None:
        self.state = state
        self.offsets = offsets

    def describe(self) -> list[Metric]:
        return []  # computed per scrape; nothing to pre-register

    def collect(self) -> Iterable[Metric]:
        yield from self._partitions()
        yield from self._dedup()
        yield from self._views()
        yield from self._groups()

    def _partitions(self) -> list[Metric]:
        """One gauge per partition and figure: their numbers read here, a
        tuple per partition, and their samples made where they are read
        (``PartitionGauge``: in the exposition's worker thread) — with ten
        thousand partitions a scrape would otherwise hold the loop ~0.2 s."""
        rows = [(topic, index, part.log.log_start_offset, part.log.log_end_offset,
                 part.high_watermark, part.log.size_bytes)
                for (topic, index), part in self.state.partitions.items()]
        return [PartitionGauge("kcompat_partition_log_start_offset",
                               "First offset still in the log", rows, 2),
                PartitionGauge("kcompat_partition_log_end_offset",
                               "Offset of the next record to be appended", rows, 3),
                PartitionGauge("kcompat_partition_high_watermark",
                               "Offset up to which consumers may read", rows, 4),
                PartitionGauge("kcompat_partition_size_bytes",
                               "Bytes of all segments of the partition", rows, 5)]

    def _dedup(self) -> list[Metric]:
        """Deduplication windows (``dedup_windows``), per topic: counts of the
        partitions this broker leads or led since it started."""
        duplicates = CounterMetricFamily("kcompat_dedup_duplicates",
                                         "Records not stored: their id was in the window",
                                         labels=["topic"])
        evictions = CounterMetricFamily("kcompat_dedup_evictions",
                                        "Ids forgotten inside their window (kc.dedup.max.entries)",
                                        labels=["topic"])
        ids = GaugeMetricFamily("kcompat_dedup_window_ids",
                                "Ids held in the dedup window by this leader", labels=["topic"])
        for topic, (dropped, evicted, held) in sorted(dedup_totals(self.state).items()):
            duplicates.add_metric([topic], dropped)
            evictions.add_metric([topic], evicted)
            ids.add_metric([topic], held)
        return [duplicates, evictions, ids]

    def _views(self) -> list[Metric]:
        """Filtered views: records the view's consumers got, and records taken out."""
        records = CounterMetricFamily("kcompat_view_records",
                                      "Records of fetched source batches, per view, by filter "
                                      "result", labels=["view", "result"])
        reader = self.state.views
        for view in sorted(set(reader.matched) | set(reader.filtered)):
            records.add_metric([view, "matched"], reader.matched.get(view, 0))
            records.add_metric([view, "filtered"], reader.filtered.get(view, 0))
        return [records, *self._holes()]

    def _holes(self) -> list[Metric]:
        """Fetch answers over record-less batches (``hole_reads``): the batches
        answers started past, and the answers held back at a record-less tail."""
        holes = self.state.hole_reads
        skipped = CounterMetricFamily(
            "kcompat_fetch_hole_batches_skipped",
            "Record-less batches (all their records delayed, retried or deduplicated) "
            "a Fetch answer started past")
        skipped.add_metric([], holes.skipped_batches)
        held = CounterMetricFamily(
            "kcompat_fetch_hole_answers_held",
            "Partition answers of Fetch held empty at a record-less tail (up to 5 s)")
        held.add_metric([], holes.held)
        return [skipped, held]

    def _groups(self) -> list[Metric]:
        labels = ["group", "topic", "partition"]
        committed = GaugeMetricFamily("kcompat_consumer_group_committed_offset",
                                      "Committed offset per group partition", labels=labels)
        lag = GaugeMetricFamily("kcompat_consumer_group_lag",
                                "High watermark minus committed offset", labels=labels)
        store = self.offsets
        if store is not None:
            for group_id in sorted(store.offsets):
                for (topic, index), c in sorted(store.committed(group_id).items()):
                    part = self.state.source_partition(topic, index)
                    values = (group_id, topic, str(index))
                    committed.add_metric(values, c.offset)
                    if part is not None:
                        lag.add_metric(values, max(part.high_watermark - c.offset, 0))
        return [committed, lag]


def dedup_totals(state: BrokerState) -> dict[str, list[int]]:
    """Per topic with a dedup window, over the partitions this broker leads or
    led since it started: [duplicates dropped, ids evicted, ids held]."""
    totals: dict[str, list[int]] = {}
    for (topic, _index), part in state.partitions.items():
        if part.dedup is not None:
            row = totals.setdefault(topic, [0, 0, 0])
            row[0] += part.dedup.duplicates
            row[1] += part.dedup.evictions
            row[2] += part.dedup.ids
    return totals
