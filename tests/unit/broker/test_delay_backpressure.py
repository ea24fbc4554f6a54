"""Backpressure of delayed delivery: while a schedule partition is late with
its due records, the produce that schedules more is throttled as a quota
throttles (``throttle_time_ms``, the connection muted), and /metrics says how
late. The delivery task is not started here, so the schedule can only fall
behind; a plain produce is never throttled."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from kio.schema.errors import ErrorCode as E
from prometheus_client import generate_latest

from kcompat.broker.config import broker_config
from kcompat.broker.handlers import HANDLERS
from kcompat.broker.host.broker import Broker
from kcompat.broker.host.context import RequestContext
from kcompat.testing import running
from kcompat.wire import codec
from kcompat.wire import versions as v
from kcompat.wire.records import encode_batch


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(broker_config.load(None, {"log.dirs": str(tmp_path),
                                         "kc.schedule.topic.num.partitions": "2"}, {}))
    yield b
    b.close()


async def produce(broker: Broker, delay_ms: int | None, count: int = 1) -> tuple[E, int]:
    """(error, throttle ms) of ``count`` records to t-0, delayed if ``delay_ms``."""
    headers = () if delay_ms is None else (("kc-delay-ms", b"%d" % delay_ms),)
    m = codec.request_module(v.PRODUCE, 9)
    request = m.ProduceRequest(transactional_id=None, acks=-1,
                               timeout=datetime.timedelta(seconds=5), topic_data=(
        m.TopicProduceData(name="t", partition_data=(m.PartitionProduceData(
            index=0, records=encode_batch([(None, b"v", headers, 1000)] * count)),)),))
    r: Any = await HANDLERS[v.PRODUCE](RequestContext(broker, v.PRODUCE, 9, 1, "p", "/h"),
                                       request)
    code = r.responses[0].partition_responses[0].error_code
    return code, int(r.throttle_time.total_seconds() * 1000)


def test_a_late_schedule_throttles_its_producers_not_plain_ones(broker: Broker) -> None:
    async def body() -> None:
        await running.create_topic(broker, "t", 1)
        await broker.cluster.wait_leaders("t", 5.0)
        assert await produce(broker, 1) == (E.none, 0)  # on time: due in 1 ms
        await trio.sleep(0.5 + 0.4)  # nobody delivers it: 0.9 s late
        code, throttle_ms = await produce(broker, 60_000)
        assert code == E.none and 300 <= throttle_ms <= 1000
        assert await produce(broker, None) == (E.none, 0)  # a plain record is not slowed

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await running.start(nursery, broker, internal_topics=False)  # no services
            await body()
            nursery.cancel_scope.cancel()

    trio.run(main)
    text = generate_latest(broker.metrics.registry).decode()
    late = [line for line in text.splitlines()
            if line.startswith("kcompat_delayed_delivery_overdue_seconds{")]
    assert late and max(float(line.split()[-1]) for line in late) >= 0.9
    assert "kcompat_delayed_backpressure_throttle_seconds_total" in text


def test_the_throttle_follows_the_records_a_produce_schedules(broker: Broker) -> None:
    """A late schedule that delivers nothing: a produce of one delayed record
    waits about as long as the schedule is late, one of 5,000 as long as
    5,000 records take at the floor quota (the lateness alone would let a
    producer that batches more while muted outrun delivery)."""
    async def body() -> None:
        await running.create_topic(broker, "t", 1)
        await broker.cluster.wait_leaders("t", 5.0)
        assert await produce(broker, 1) == (E.none, 0)
        await trio.sleep(0.5 + 0.4)  # nobody delivers it: 0.9 s late
        code, one = await produce(broker, 60_000)
        assert code == E.none and one <= 1000
        code, many = await produce(broker, 60_000, count=5_000)
        # 5,002 records scheduled over a window of 1.5 s at the floor quota
        # (1,000 records/s): (O - T) / T * W = 5.0 - 1.5 s
        assert code == E.none and 2_000 <= many <= 3_600

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await running.start(nursery, broker, internal_topics=False)  # no services
            await body()
            nursery.cancel_scope.cancel()

    trio.run(main)
