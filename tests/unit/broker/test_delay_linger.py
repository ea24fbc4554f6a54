"""Deliveries carry many records each: every delivery costs a Raft round
(its ``out``, with the ``done`` of the one before) and an append to the
target, whatever its size, so the service makes few large ones.

- Records coming due a few per millisecond: a delivery waits until its
  earliest record has been due for its target's linger (``linger_after``:
  ``DELIVERY_LINGER_MS``, longer while they come due steadily, for about
  ``DELIVERY_TARGET`` a delivery), the ``done`` before it waiting too, so
  they go by the hundred, not a few per loop turn, one Raft round each.
- A late schedule catches up in large deliveries: a backlog of 5,000 due
  records for one partition goes out in three batches, not ten, read in parts
  of ``READ_CHUNK`` (a turn of the loop each), each delivery's ``done``
  committed with the next one's ``out``.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from kio.schema.errors import ErrorCode as E

from kcompat.broker.ext.delays import (
    DELIVERY_LINGER_MS,
    DELIVERY_TARGET,
    LINGER_MAX_MS,
    READ_CHUNK,
    STEADY_RECORDS,
    linger_after,
)
from kcompat.broker.host.broker import Broker
from kcompat.broker.replication.storage import now_ms
from kcompat.ext.schedule import Pending
from kcompat.ext.schedule_log import SCHEDULE_TOPIC, out_record
from kcompat.ext.schedule_stored import StoredRecords
from kcompat.testing import running
from kcompat.wire.records import encode_batch
from tests.unit.broker.test_delayed_produce import broker, produce  # noqa: F401 - a fixture

SPREAD_MS = 1_500  # records come due evenly over this long


class Counted:
    """The entries of each delivery sent, the records of each batch committed
    to the schedule partitions, and the entries of each read."""

    def __init__(self, service: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sends: list[int] = []
        self.commits: list[int] = []
        self.reads: list[int] = []
        send, append, tails = service._send, service.calls.append_locally, StoredRecords.tails

        async def counted_send(index: int, delivery: Any, planned: Any) -> bool:
            self.sends.append(len(delivery.entries))
            return await send(index, delivery, planned)

        async def counted_append(topic: str, index: int, batch: bytes, timeout: float) -> Any:
            if topic == SCHEDULE_TOPIC:
                self.commits.append(int.from_bytes(bytes(batch[57:61]), "big"))  # records
            return await append(topic, index, batch, timeout)

        def counted_tails(stored: StoredRecords, entries: Any) -> Any:
            listed = list(entries)
            self.reads.append(len(listed))
            return tails(stored, listed)

        monkeypatch.setattr(service, "_send", counted_send)
        monkeypatch.setattr(service.calls, "append_locally", counted_append)
        monkeypatch.setattr(StoredRecords, "tails", counted_tails)


def _deliver(broker: Broker, delays_ms: list[int], start_first: bool,  # noqa: F811
             absolute: bool = False) -> None:
    """Produce records with ``delays_ms`` to partition t-0, 1,000 per batch,
    and run delivery until all are delivered — started before the produce
    (``start_first``) or once all of them are due. ``absolute``: each record
    is due ``kc-deliver-at`` that long after the first batch was sent, so
    their due times do not depend on how long the batches take to produce
    (``kc-delay-ms`` counts from each batch's append: a slow append leaves a
    gap in the due times, and the delivery before it few records)."""
    service = broker.delays

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await running.start(nursery, broker, internal_topics=False)
            await running.create_topic(broker, "t", 1)
            await broker.cluster.wait_leaders("t", 5.0)
            if start_first:
                nursery.start_soon(service.run)
            start_ms = now_ms()
            for first in range(0, len(delays_ms), 1_000):
                r = await produce(broker, encode_batch(
                    [(b"k%d" % i, b"v" * 100,
                      (("kc-deliver-at", b"%d" % (start_ms + delay)),) if absolute
                      else (("kc-delay-ms", b"%d" % delay),), 1000)
                     for i, delay in enumerate(delays_ms[first:first + 1_000], first)]))
                assert r.error_code == E.none
            if not start_first:
                await trio.sleep(max(delays_ms) / 1000 + 0.05)
                nursery.start_soon(service.run)
            with trio.fail_after(30):
                while len(service.logs[0]) or service.logs[0].inflight:
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_records_coming_due_steadily_go_out_in_few_deliveries(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    n = 3_000
    counted = Counted(broker.delays, monkeypatch)
    _deliver(broker, [1_000 + i * SPREAD_MS // n for i in range(n)], start_first=True,
             absolute=True)
    sends = counted.sends
    assert sum(sends) == n
    # 2 records a ms: the linger grows to LINGER_MAX_MS, about one delivery
    # per linger; at DELIVERY_LINGER_MS it would be 30, and a delivery per
    # loop turn (a few ms) would make hundreds
    assert len(sends) <= 2 + 2 * SPREAD_MS // LINGER_MAX_MS, sends
    assert all(s >= 200 for s in sends[1:-1]), sends  # (a slow run: fewer, larger ones)
    # one Raft round per delivery: each done waits for the next out (3 commits
    # scheduled the records; a done committed alone would make twice as many)
    assert len(counted.commits) - 3 <= len(sends) + 1, (counted.commits, sends)


def _due(*dues_ms: int) -> list[Pending]:
    return [Pending(i, due, None) for i, due in enumerate(dues_ms)]


def test_the_linger_grows_only_while_records_come_due_steadily() -> None:
    assert linger_after(_due(5)) == DELIVERY_LINGER_MS  # a lone record
    # fewer than STEADY_RECORDS would come due within LINGER_MAX_MS: lateness first
    sparse = STEADY_RECORDS // 2
    assert linger_after(_due(*range(0, sparse * LINGER_MAX_MS, LINGER_MAX_MS // sparse))
                        ) == DELIVERY_LINGER_MS
    # 2 a ms: long enough for DELIVERY_TARGET, at most LINGER_MAX_MS
    assert linger_after(_due(*(i // 2 for i in range(100)))) == min(
        DELIVERY_TARGET // 2, LINGER_MAX_MS)
    # 1,000 a ms (a burst, a backlog): DELIVERY_LINGER_MS already brings plenty
    assert linger_after(_due(*(i // 1000 for i in range(2000)))) == DELIVERY_LINGER_MS


def test_a_backlog_goes_out_in_few_large_deliveries(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    n = 5_000
    counted = Counted(broker.delays, monkeypatch)
    _deliver(broker, [1] * n, start_first=False)
    assert sum(counted.sends) == n and len(counted.sends) == 3, counted.sends  # 2,000 each
    assert max(counted.reads) <= READ_CHUNK
    # after the scheduling (a batch per produce): out; done + out; done + out; done —
    # a Raft round per delivery and one more
    assert counted.commits[-4:] == [1, 2, 2, 1], counted.commits
    assert len(counted.commits) == 5 + 4, counted.commits


def test_a_delivery_in_flight_when_leadership_came_is_read_in_parts(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """A leader that finds a delivery in flight (its ``out`` committed by
    the leader before it) reads its records ``READ_CHUNK`` at a time too,
    a turn of the loop each, and sends it once."""
    n = 2 * READ_CHUNK + 200
    counted = Counted(broker.delays, monkeypatch)
    service, target = broker.delays, ("t", 0)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await running.start(nursery, broker, internal_topics=False)
            await running.create_topic(broker, "t", 1)
            await broker.cluster.wait_leaders("t", 5.0)
            r = await produce(broker, encode_batch([(b"k%d" % i, b"v" * 100,
                                                     (("kc-delay-ms", b"1"),), 1000)
                                                    for i in range(n)]))
            assert r.error_code == E.none
            await trio.sleep(0.05)
            slog = service.logs[0]
            entries = slog.schedule.due(now_ms(), n, target)
            assert len(entries) == n
            assert await service._commit(0, [out_record(target, entries, now_ms())])
            assert len(slog.inflight[target].entries) == n
            nursery.start_soon(service.run)
            with trio.fail_after(30):
                while len(slog) or slog.inflight:
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert counted.sends == [n]
    assert sum(counted.reads) == n and max(counted.reads) <= READ_CHUNK, counted.reads
