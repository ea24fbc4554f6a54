"""The share-partitions' gauges on ``/metrics`` (``ShareService.export``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class ShareCollector(Collector):
    """In-flight records of the share-partitions this broker leads, by state
    (Kafka's ``ShareGroupMetrics`` count acquired and archived records too)."""

    def __init__(self, held: Callable[[], Mapping[tuple[str, str, int], Any]]) -> None:
        self.held = held  # the service's machines: share key -> ``Held``

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "kcompat_share_records", "Records in flight in the share-partitions this broker "
            "leads, by state", labels=["group", "topic", "partition", "state"])
        start = GaugeMetricFamily(
            "kcompat_share_start_offset", "Share-partition start offset (SPSO)",
            labels=["group", "topic", "partition"])
        for (group, topic, index), held in sorted(self.held().items()):
            labels = [group, topic, str(index)]
            start.add_metric(labels, held.machine.start_offset)
            for state, count in held.machine.counts().items():
                family.add_metric([*labels, state.name.lower()], count)
        yield family
        yield start
