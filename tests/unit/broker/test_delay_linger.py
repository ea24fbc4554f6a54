"""Records coming due a few per millisecond are delivered by the hundred: a
delivery waits until its earliest record has been due ``DELIVERY_LINGER_MS``
(the ``done`` before it committed alone), and while more is due a
delivery's ``done`` goes with the next one's ``out`` — each delivery two
Raft rounds and an append to the target, whatever its size."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from kio.schema.errors import ErrorCode as E

from kcompat.broker.broker import Broker
from kcompat.broker.delays import DELIVERY_LINGER_MS
from kcompat.ext.schedule_log import SCHEDULE_TOPIC
from kcompat.testing import running
from kcompat.wire.records import encode_batch
from tests.unit.broker.test_delayed_produce import broker, produce  # noqa: F401 - a fixture

SPREAD_MS = 1_500  # records come due evenly over this long


def _count(service: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[int]]:
    """The entries of each delivery sent, and the records of each batch the
    service commits to its schedule partitions."""
    sends: list[int] = []
    commits: list[int] = []
    send, append = service._send, service.calls.append_locally

    async def counted_send(index: int, delivery: Any, planned: Any) -> bool:
        sends.append(len(delivery.entries))
        return await send(index, delivery, planned)

    async def counted_append(topic: str, index: int, batch: bytes, timeout: float) -> Any:
        if topic == SCHEDULE_TOPIC:
            commits.append(int.from_bytes(bytes(batch[57:61]), "big"))
        return await append(topic, index, batch, timeout)

    monkeypatch.setattr(service, "_send", counted_send)
    monkeypatch.setattr(service.calls, "append_locally", counted_append)
    return sends, commits


def test_records_coming_due_steadily_go_out_in_few_deliveries(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    service = broker.delays
    sends, commits = _count(service, monkeypatch)
    n = 3_000

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await running.start(nursery, broker, internal_topics=False)
            await running.create_topic(broker, "t", 1)
            await broker.cluster.wait_leaders("t", 5.0)
            nursery.start_soon(service.run)
            r = await produce(broker, encode_batch(
                [(b"k%d" % i, b"v" * 100,
                  (("kc-delay-ms", b"%d" % (300 + i * SPREAD_MS // n)),), 1000)
                 for i in range(n)]))
            assert r.error_code == E.none
            with trio.fail_after(30):
                while sum(sends) < n or service.logs[0].inflight:
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert sum(sends) == n and len(service.logs[0]) == 0
    # about one delivery per linger (a delivery at most as many Raft rounds
    # apart); a delivery per loop turn (a few ms) would make hundreds
    assert DELIVERY_LINGER_MS >= 20
    assert len(sends) <= 2 * SPREAD_MS // DELIVERY_LINGER_MS, sends
    assert min(sends[:-1]) >= 20, sends


def test_a_backlogs_deliveries_commit_each_done_with_the_next_out(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    service = broker.delays
    sends, commits = _count(service, monkeypatch)
    n = 5_000

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await running.start(nursery, broker, internal_topics=False)
            await running.create_topic(broker, "t", 1)
            await broker.cluster.wait_leaders("t", 5.0)
            for first in range(0, n, 1_000):  # all due at once, before delivery starts
                r = await produce(broker, encode_batch(
                    [(b"k%d" % i, b"v" * 100, (("kc-delay-ms", b"1"),), 1000)
                     for i in range(first, first + 1_000)]))
                assert r.error_code == E.none
            await trio.sleep(0.05)
            commits.clear()  # the scheduling
            nursery.start_soon(service.run)
            with trio.fail_after(30):
                while sum(sends) < n or service.logs[0].inflight:
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert sum(sends) == n and len(sends) == 3, sends
    # out; done + out; done + out; done: a Raft round per delivery and one more
    assert commits == [1, 2, 2, 1], commits
