"""An all-topics Metadata answer is built in slices with a checkpoint between
them (``handlers.metadata._every_topic``), so many partitions do not hold the
event loop in one step; what a checkpoint changed is seen as it is after it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from kcompat.broker.config import broker_config
from kcompat.broker.controller import admin
from kcompat.broker.handlers import HANDLERS, metadata
from kcompat.broker.host.broker import Broker
from kcompat.broker.host.context import RequestContext
from kcompat.testing import running
from kcompat.wire import codec
from kcompat.wire import versions as v

TOPICS = 6


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    cfg = broker_config.load(None, {"log.dirs": str(tmp_path)}, {})
    b = Broker(cfg)

    async def make() -> None:
        for i in range(TOPICS):
            await running.create_topic(b, f"t{i:02d}", 2)
    running.run(b, make)
    yield b
    b.close()


def test_every_topic_is_described_in_slices_and_a_deleted_one_left_out(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metadata, "SLICE_PARTITIONS", 4)  # 2 topics of 2 partitions a slice
    pauses: list[int] = []

    async def checkpoint() -> None:
        pauses.append(len(pauses))
        if len(pauses) == 1:  # during the first pause, a topic not described yet goes
            await admin.delete_topic(broker.controller, f"t{TOPICS - 1:02d}")
        await trio.sleep(0)

    monkeypatch.setattr(metadata, "_checkpoint", checkpoint)

    async def body() -> Any:
        request = codec.build(codec.request_class(v.METADATA, 12), topics=None,
                              allow_auto_topic_creation=False,
                              include_topic_authorized_operations=False)
        ctx = RequestContext(broker, v.METADATA, 12, 1, "cli", "/127.0.0.1", "User:ANONYMOUS")
        return await HANDLERS[v.METADATA](ctx, request)

    answer = running.run(broker, body)
    names = sorted(t.name for t in answer.topics)
    assert names == [f"t{i:02d}" for i in range(TOPICS - 1)]
    assert all(len(t.partitions) == 2 and t.error_code == 0 for t in answer.topics)
    assert len(pauses) == TOPICS // 2 - 1  # a pause every 2 topics (the last one deleted)
