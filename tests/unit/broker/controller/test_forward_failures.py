"""A metadata change forwarded to the controller that fails on a bug
(``admin._serve_forward``): the forwarding broker is answered
UNKNOWN_SERVER_ERROR and the controller keeps running. Before, the exception
left the Raft driver's nursery and stopped the broker (a placement bug during
issue 35 took a whole node down through one forwarded CreateTopics)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from kio.schema.errors import ErrorCode

from kcompat.broker.config import broker_config
from kcompat.broker.controller import admin
from kcompat.broker.host.broker import Broker
from kcompat.broker.replication import codec
from kcompat.testing import running


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(broker_config.load(None, {"log.dirs": str(tmp_path)}, {}))
    yield b
    b.close()


def test_a_forwarded_change_that_raises_is_answered_and_the_controller_lives(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[int, Any]] = []
    monkeypatch.setattr(broker.cluster, "send_internal", lambda dst, m: sent.append((dst, m)))
    real = admin.execute

    async def broken(ctl: Any, intent: dict[str, Any]) -> None:
        if intent.get("name") == "boom":
            raise RuntimeError("a bug in placement")
        await real(ctl, intent)

    monkeypatch.setattr(admin, "execute", broken)

    async def scenario() -> list[str]:
        req = codec.ForwardRequest(9, {"op": "create_topic", "name": "boom", "partitions": 1,
                                       "replication": 1, "configs": {}})
        await admin._serve_forward(broker.controller, 1001, req)
        # the controller still takes changes
        await admin._serve_forward(broker.controller, 1001, codec.ForwardRequest(
            10, {"op": "auto_create", "name": "fine"}))
        with trio.fail_after(10):
            while "fine" not in broker.state.topics:
                await trio.sleep(0.01)
        return sorted(broker.state.topics)

    topics = running.run(broker, scenario)
    assert "fine" in topics and "boom" not in topics
    assert [(dst, m.request_id, m.error_code) for dst, m in sent] == [
        (1001, 9, int(ErrorCode.unknown_server_error)), (1001, 10, int(ErrorCode.none))]
    assert sent[0][1].message.startswith("The server experienced an unexpected error")
