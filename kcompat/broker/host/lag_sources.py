"""The lag sources a broker registers for backpressure (``backpressure``).

Theory of operation
-------------------
Which service reports which lag, and keyed by what a request handler knows:

* ``delayed`` and ``retry`` — a topic-partition whose produce scheduled
  delayed records, or retries and dead letters (a retry topic): how late its
  schedule partition is with what is due (``DelayService.overdue_s``), the
  throttle being the delay service's own (``DelayService.throttle_ms``);
  exported per schedule partition, and per retry-topic partition, led here.
* ``replication`` — a topic-partition led here: the age of its oldest record
  not yet replicated to a quorum (``replication.backlog``).
* ``share_state`` — a state partition of ``__share_group_state``: how long
  its oldest share-state write has waited (``share_writes``).

Only wiring: each source's measure lives with its service.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from kcompat.broker.config.topic_config import retry_policy
from kcompat.broker.controller.internal_topics import partition_for
from kcompat.broker.loop.backpressure import Backpressure, LagSource
from kcompat.broker.replication.backlog import UnreplicatedBacklog
from kcompat.ext.schedule_log import SCHEDULE_TOPIC
from kcompat.group.share_state import SHARE_STATE_TOPIC

if TYPE_CHECKING:
    from kcompat.broker.ext.delays import DelayService
    from kcompat.broker.groups.shares import ShareService
    from kcompat.broker.replication.runtime import ClusterRuntime
    from kcompat.broker.storage.state import BrokerState

SHARE_STATE_FROM_S = 0.5  # a state write waiting longer slows the share consumers feeding it


def register_all(backpressure: Backpressure, state: BrokerState, cluster: ClusterRuntime,
                 delays: DelayService, shares: ShareService) -> None:
    for source in (*_delay_sources(state, delays), UnreplicatedBacklog(cluster).source(),
                   _share_state_source(shares)):
        backpressure.register(source)


def _delay_sources(state: BrokerState, delays: DelayService) -> list[LagSource]:
    def schedule_partition(topic: str, index: int) -> int | None:
        meta = state.topics.get(SCHEDULE_TOPIC)
        return None if meta is None else partition_for(f"{topic}-{index}", meta.partitions)

    def lag_s(key: tuple[str, int]) -> float:
        topic, index = key
        at = schedule_partition(topic, index)
        return 0.0 if at is None else delays.overdue_s(at)

    def throttle(key: tuple[str, int]) -> int:
        topic, index = key
        return delays.throttle_ms(topic, index)

    def led() -> Iterable[tuple[str, float]]:
        return ((f"{SCHEDULE_TOPIC}-{i}", delays.overdue_s(i)) for i in sorted(delays.leading))

    def retry_lags() -> Iterable[tuple[str, float]]:
        for name, meta in sorted(state.topics.items()):
            if retry_policy(meta.configs, state.broker_defaults) is None:
                continue
            for index in range(meta.partitions):
                at = schedule_partition(name, index)
                if at is not None and at in delays.leading:
                    yield f"{name}-{index}", delays.overdue_s(at)

    return [LagSource("delayed", lag_s, led, throttle=throttle),
            LagSource("retry", lag_s, retry_lags, throttle=throttle)]


def _share_state_source(shares: ShareService) -> LagSource:
    writer = shares.writer

    def lags() -> Iterable[tuple[str, float]]:
        return ((f"{SHARE_STATE_TOPIC}-{i}", s) for i, s in writer.behind())

    return LagSource("share_state", writer.behind_s, lags, SHARE_STATE_FROM_S)
