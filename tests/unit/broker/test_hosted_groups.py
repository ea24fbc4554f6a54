"""The hosts of KIP-848 and share groups hand each heartbeat the cluster's
topics as one mapping per change of them, so a group's look at every topic
happens once per change, not once per heartbeat."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kcompat.broker.config import broker_config
from kcompat.broker.host.broker import Broker
from kcompat.testing import running


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(broker_config.load(None, {"log.dirs": str(tmp_path)}, {}))
    yield b
    b.close()


def test_groups_get_one_topics_mapping_per_topic_change(broker: Broker) -> None:
    hosted = broker.consumer_groups

    async def body() -> None:
        await running.create_topic(broker, "a", 2)
        first = hosted.partition_counts()
        assert first == {"a": 2} and hosted.partition_counts() is first
        await running.create_topic(broker, "b", 1)
        second = hosted.partition_counts()
        assert second is not first and second == {"a": 2, "b": 1}
        assert hosted.partition_counts() is second

    running.run(broker, body)
