"""Backpressure beyond delayed delivery (issue 31): one registry of lag
sources (``broker.backpressure``); a leader's unreplicated backlog
(``replication.backlog``) and share-state writes (``share_writes``) report
how far behind they are; the produce path asks once per request."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import trio
import trio.testing
from kio.schema.errors import ErrorCode as E
from prometheus_client import CollectorRegistry, generate_latest

from kcompat.broker.config import broker_config
from kcompat.broker.groups.share_writes import Held, ShareWriter
from kcompat.broker.handlers import HANDLERS
from kcompat.broker.host.broker import Broker
from kcompat.broker.host.context import RequestContext
from kcompat.broker.loop.backpressure import THROTTLE_MAX_MS, Backpressure, LagSource
from kcompat.broker.replication.backlog import FROM_S, UnreplicatedBacklog
from kcompat.group.share_partition import SharePartition
from kcompat.testing import running
from kcompat.wire import codec
from kcompat.wire import versions as v
from kcompat.wire.records import encode_batch

# -- the registry --------------------------------------------------------------------------


def test_a_source_behind_beyond_its_bound_throttles_by_as_much_again_capped() -> None:
    lags = {"a": 0.2, "b": 0.9, "c": 30.0}
    bp = Backpressure()
    bp.register(LagSource("s", lags.__getitem__, lambda: lags.items(), from_s=0.5))
    assert bp.throttle_ms("s", ["a"]) == 0
    assert bp.throttle_ms("s", ["a", "b"]) == 400  # the worst key counts
    assert bp.throttle_ms("s", ["c"]) == THROTTLE_MAX_MS
    assert bp.throttle_ms("s", []) == 0
    assert bp.throttle_ms("other", ["c"]) == 0  # no such source
    assert bp.throttle_ms("s", ["a"], seen_s=1.5) == 1000  # seen before the request waited


def test_behind_means_some_key_of_some_source_is_late_beyond_its_bound() -> None:
    lags = {"a": 0.2, "b": 0.4}
    bp = Backpressure()
    assert not bp.behind()  # no source
    bp.register(LagSource("s", lags.__getitem__, lambda: lags.items(), from_s=0.5))
    bp.register(LagSource("t", lambda _k: 0.0, lambda: [("x", 0.3)], from_s=0.25))
    assert bp.behind()  # t's x: 0.3 > 0.25
    bp.register(LagSource("t", lambda _k: 0.0, lambda: [("x", 0.25)], from_s=0.25))
    assert not bp.behind()  # at the bound is on time
    lags["b"] = 0.6
    assert bp.behind()


def test_a_source_with_its_own_throttle_and_the_metrics() -> None:
    bp = Backpressure()
    registry = CollectorRegistry()
    bp.export(registry)
    bp.register(LagSource("own", lambda _k: 9.0, lambda: [("p-0", 9.0)], throttle=lambda _k: 7))
    bp.register(LagSource("lin", lambda _k: 1.5, lambda: [("q-1", 1.5)], from_s=0.5))
    assert bp.throttle_ms("own", ["x"]) == 7
    assert bp.throttle_ms("lin", ["x"]) == 1000
    text = generate_latest(registry).decode()
    assert 'kcompat_backpressure_lag_seconds{key="p-0",source="own"} 9.0' in text
    assert 'kcompat_backpressure_lag_seconds{key="q-1",source="lin"} 1.5' in text
    assert 'kcompat_backpressure_throttle_seconds_total{source="lin"} 1.0' in text
    assert 'kcompat_backpressure_throttle_seconds_total{source="own"} 0.007' in text


# -- replication: the leader's unreplicated backlog -----------------------------------------


class FakeCluster:
    def __init__(self) -> None:
        self.plog = SimpleNamespace(log_end_offset=0)
        self.group = SimpleNamespace(is_leader=True, hw=0,
                                     storage=SimpleNamespace(plog=self.plog))

    def group_of(self, topic: str, index: int) -> Any:
        return self.group if (topic, index) == ("t", 0) else None


def test_an_unreplicated_backlog_ages_until_the_followers_catch_up() -> None:
    cluster, now = FakeCluster(), [100.0]
    backlog = UnreplicatedBacklog(cluster, lambda: now[0])  # type: ignore[arg-type]
    bp = Backpressure()
    bp.register(backlog.source())
    key = ("t", 0)
    assert backlog.age_s(key) == 0.0  # nothing appended
    cluster.plog.log_end_offset = 10  # appended; the followers have none of it
    assert backlog.age_s(key) == 0.0  # first seen now
    for _ in range(30):  # more keeps coming, the high watermark stays
        now[0] += 0.1
        cluster.plog.log_end_offset += 10
        backlog.age_s(key)
    assert backlog.age_s(key) == pytest.approx(3.0)
    assert bp.throttle_ms("replication", [key]) == THROTTLE_MAX_MS
    cluster.group.hw = 160  # the followers hold what was there 1.5 s ago
    assert backlog.age_s(key) == pytest.approx(1.5, abs=0.11)
    assert 300 <= bp.throttle_ms("replication", [key]) <= 600
    cluster.group.hw = cluster.plog.log_end_offset  # caught up
    assert backlog.age_s(key) == 0.0 and bp.throttle_ms("replication", [key]) == 0
    assert list(backlog.ages()) == []  # forgotten
    cluster.plog.log_end_offset += 5
    backlog.age_s(key)
    now[0] += FROM_S + 0.5
    cluster.group.is_leader = False  # no longer led here: not ours to slow
    assert backlog.age_s(key) == 0.0 and list(backlog.ages()) == []
    assert backlog.age_s(("u", 0)) == 0.0  # not a partition here


def test_the_notes_of_a_backlog_are_bounded() -> None:
    cluster, now = FakeCluster(), [0.0]
    backlog = UnreplicatedBacklog(cluster, lambda: now[0])  # type: ignore[arg-type]
    for _ in range(10_000):
        now[0] += 0.06
        cluster.plog.log_end_offset += 1
        backlog.age_s(("t", 0))
    assert len(backlog._notes[("t", 0)]) <= 64
    assert backlog.age_s(("t", 0)) == pytest.approx(600.0, abs=0.1)  # the oldest kept


# -- share-state writes ---------------------------------------------------------------------


def test_share_state_writes_report_how_long_the_oldest_has_waited() -> None:
    now_ms = [1_000]
    gate = trio.Event()

    async def append(_index: int, _batch: bytes) -> E:
        await gate.wait()
        return E.none

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            def spawn(fn, *args) -> bool:  # type: ignore[no-untyped-def]
                nursery.start_soon(fn, *args)
                return True

            writer = ShareWriter(append, spawn, lambda: now_ms[0])
            assert writer.behind_s(3) == 0.0
            helds = [Held(("g", "t", i), SharePartition(0), 1, 1, state_index=3)
                     for i in range(2)]
            nursery.start_soon(writer.write, [(helds[0], True)])
            await trio.testing.wait_all_tasks_blocked()  # its batch in flight
            now_ms[0] += 400
            nursery.start_soon(writer.write, [(helds[1], True)])  # queued behind it
            await trio.testing.wait_all_tasks_blocked()
            now_ms[0] += 800
            assert writer.behind_s(3) == pytest.approx(1.2)  # the one in flight
            assert writer.behind() == [(3, pytest.approx(1.2))]
            bp = Backpressure()
            bp.register(LagSource("share_state", writer.behind_s, lambda: [], 0.5))
            assert bp.throttle_ms("share_state", {3}) == 700
            gate.set()
            await trio.testing.wait_all_tasks_blocked()
            assert writer.behind_s(3) == 0.0 and bp.throttle_ms("share_state", {3}) == 0

    trio.run(main)


# -- the produce path asks ------------------------------------------------------------------


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(broker_config.load(None, {"log.dirs": str(tmp_path)}, {}))
    yield b
    b.close()


async def produce(broker: Broker, topic: str, index: int, acks: int = -1) -> tuple[E, int]:
    m = codec.request_module(v.PRODUCE, 9)
    request = m.ProduceRequest(transactional_id=None, acks=acks,
                               timeout=datetime.timedelta(seconds=5), topic_data=(
        m.TopicProduceData(name=topic, partition_data=(m.PartitionProduceData(
            index=index, records=encode_batch([(None, b"v", (), 1000)])),)),))
    r: Any = await HANDLERS[v.PRODUCE](RequestContext(broker, v.PRODUCE, 9, 1, "p", "/h"),
                                       request)
    if r is None:
        return E.none, -1
    code = r.responses[0].partition_responses[0].error_code
    return code, int(r.throttle_time.total_seconds() * 1000)


def test_a_produce_to_a_partition_whose_replication_is_behind_is_throttled(
        broker: Broker) -> None:
    """The broker registers the replication source, and a produce asks it for
    the partitions it appended to (here the backlog's measure is replaced by
    a partition 2.5 s behind)."""
    source = broker.backpressure.sources["replication"]
    assert {"delayed", "retry", "replication", "share_state"} <= set(broker.backpressure.sources)
    broker.backpressure.register(LagSource(
        "replication", lambda key: 2.5 if key == ("t", 1) else source.lag_s(key),
        source.lags, source.from_s))

    async def body() -> None:
        await running.create_topic(broker, "t", 2)
        await broker.cluster.wait_leaders("t", 5.0)
        assert await produce(broker, "t", 0) == (E.none, 0)  # on time
        assert await produce(broker, "t", 1) == (E.none, 1000)  # 2.5 s behind: capped
        assert await produce(broker, "t", 1, acks=1) == (E.none, 1000)

    running.run(broker, body, services=False)
    text = generate_latest(broker.metrics.registry).decode()
    assert 'kcompat_backpressure_throttle_seconds_total{source="replication"} 2.0' in text


def test_a_produce_to_a_retry_topic_asks_the_retry_source(tmp_path: Path) -> None:
    """Retries and dead letters are moves of the delay service: a produce to
    a retry topic is throttled by the ``retry`` source (here its measure
    replaced by a retry partition 1.5 s late), a plain produce is not."""
    b = Broker(broker_config.load(None, {"log.dirs": str(tmp_path),
                                         "kc.schedule.topic.num.partitions": "2"}, {}))
    asked: list[Any] = []

    def lag_s(key: Any) -> float:
        asked.append(key)
        return 1.5

    b.backpressure.register(LagSource("retry", lag_s, lambda: [], 0.5))

    async def body() -> None:
        await running.create_topic(b, "t", 1)
        await running.create_topic(b, "t.retry", 1, **{"kc.retry.of": "t"})
        await b.cluster.wait_leaders("t.retry", 5.0)
        assert await produce(b, "t", 0) == (E.none, 0)
        assert await produce(b, "t.retry", 0) == (E.none, 1000)
        assert asked == [("t.retry", 0)]

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await running.start(nursery, b, internal_topics=False)
            await body()
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        b.close()


def test_acks_all_to_a_partition_short_of_min_insync_replicas_is_refused(
        broker: Broker) -> None:
    """Kafka's answer when replication cannot keep up at all: an acks=all batch
    to a partition with fewer in-sync replicas than min.insync.replicas (at
    most its replica count) is refused before the append (NOT_ENOUGH_REPLICAS,
    retriable); acks=1 is taken. Here t-0's group is made to look like 3
    replicas of which only the leader is in sync."""
    async def body() -> None:
        await running.create_topic(broker, "t", 1, **{"min.insync.replicas": "2"})
        await broker.cluster.wait_leaders("t", 5.0)
        assert await produce(broker, "t", 0) == (E.none, 0)  # 1 replica: the bound is 1
        group = broker.cluster.group_of("t", 0)
        assert group is not None
        real_isr, replicas = broker.cluster.isr, group.replicas
        try:
            group.replicas = (1, 2, 3)
            broker.cluster.isr = lambda _g: (1,)  # type: ignore[method-assign]
            part = broker.state.partition("t", 0)
            assert part is not None
            end = part.log.log_end_offset
            assert await produce(broker, "t", 0) == (E.not_enough_replicas, 0)
            assert part.log.log_end_offset == end  # nothing appended
            broker.cluster.isr = lambda _g: (1, 3)  # type: ignore[method-assign]
            assert await produce(broker, "t", 0, acks=1) == (E.none, 0)
        finally:
            group.replicas, broker.cluster.isr = replicas, real_isr  # type: ignore[method-assign]

    running.run(broker, body, services=False)


def test_a_retry_topic_whose_moves_are_late_slows_its_producers(tmp_path: Path) -> None:
    """The real retry source: nobody delivers (the delay service is not
    started), so the schedule partition of a retry topic falls behind with its
    due retries; the next nack produce there is throttled, the lag is on
    /metrics, a plain produce is not slowed."""
    b = Broker(broker_config.load(None, {"log.dirs": str(tmp_path),
                                         "kc.schedule.topic.num.partitions": "2"}, {}))

    async def body() -> None:
        await running.create_topic(b, "t", 1)
        await running.create_topic(b, "t.retry", 1, **{"kc.retry.of": "t",
                                                      "kc.retry.backoff.ms": "1"})
        await b.cluster.wait_leaders("t.retry", 5.0)
        assert await produce(b, "t.retry", 0) == (E.none, 0)  # due in 1 ms
        await trio.sleep(0.5 + 0.4)  # not moved: 0.9 s late
        code, throttle_ms = await produce(b, "t.retry", 0)
        assert code == E.none and throttle_ms >= 300
        assert await produce(b, "t", 0) == (E.none, 0)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await running.start(nursery, b, internal_topics=False)  # no services
            await body()
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
        text = generate_latest(b.metrics.registry).decode()
    finally:
        b.close()
    lags = [line for line in text.splitlines()
            if line.startswith('kcompat_backpressure_lag_seconds{key="t.retry-0",source="retry"}')]
    assert lags and float(lags[0].split()[-1]) >= 0.9
    assert 'kcompat_backpressure_throttle_seconds_total{source="retry"}' in text
