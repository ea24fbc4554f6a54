"""ShareFetch and ShareAcknowledge ask the ``share_state`` source: while a
state partition their writes go to is behind, the answer carries a throttle
(here the source's measure is replaced by one 2.5 s behind)."""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from kio.schema.errors import ErrorCode as E
from kio.schema.share_fetch.v1 import request as fetch_v1
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest

from kcompat.broker.config import broker_config
from kcompat.broker.handlers import HANDLERS
from kcompat.broker.host.broker import Broker
from kcompat.broker.host.context import RequestContext
from kcompat.broker.loop.backpressure import LagSource
from kcompat.testing import running
from kcompat.wire import versions as v


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(broker_config.load(None, {"log.dirs": str(tmp_path)}, {}))
    yield b
    b.close()


def ctx(broker: Broker, api: int, version: int) -> RequestContext:
    return RequestContext(broker, api, version, 1, "c", "/h")


def test_a_share_fetch_whose_state_writes_are_behind_is_throttled(broker: Broker) -> None:
    asked: list[Any] = []

    def behind(index: Any) -> float:
        asked.append(index)
        return 2.5

    async def body() -> None:
        await running.create_topic(broker, "t", 1)
        await broker.cluster.wait_leaders("t", 5.0)
        member = uuid.uuid4().hex
        for _ in range(50):
            hb: Any = await HANDLERS[v.SHARE_GROUP_HEARTBEAT](
                ctx(broker, v.SHARE_GROUP_HEARTBEAT, 1), ShareGroupHeartbeatRequest(
                    group_id="g", member_id=member, member_epoch=0, rack_id=None,
                    subscribed_topic_names=("t",)))
            if hb.error_code == E.none and hb.assignment is not None:
                break
            await trio.sleep(0.1)
        assert hb.error_code == E.none, hb
        topic_id = broker.state.topics["t"].topic_id
        request = fetch_v1.ShareFetchRequest(
            group_id="g", member_id=member, share_session_epoch=0,
            max_wait=datetime.timedelta(milliseconds=10), min_bytes=1, max_bytes=1 << 20,
            max_records=10, batch_size=10, topics=(fetch_v1.FetchTopic(
                topic_id=topic_id, partitions=(fetch_v1.FetchPartition(
                    partition_index=0, acknowledgement_batches=()),)),),
            forgotten_topics_data=())
        first: Any = await HANDLERS[v.SHARE_FETCH](ctx(broker, v.SHARE_FETCH, 1), request)
        assert first.error_code == E.none, first
        assert first.throttle_time == datetime.timedelta(0)  # on time
        broker.backpressure.register(LagSource("share_state", behind, lambda: [], 0.5))
        again = dataclasses.replace(request, share_session_epoch=1)
        second: Any = await HANDLERS[v.SHARE_FETCH](ctx(broker, v.SHARE_FETCH, 1), again)
        assert second.error_code == E.none, second
        assert second.throttle_time == datetime.timedelta(seconds=1)
        assert asked and all(isinstance(i, int) for i in asked)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await running.start(nursery, broker)
            broker.start_services(nursery)
            await body()
            nursery.cancel_scope.cancel()

    trio.run(main)
