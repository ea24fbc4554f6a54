"""A late schedule catches up in large deliveries: a backlog of 5,000 due
records for one partition goes out in three batches (each two Raft rounds
and an append to the target), not ten, and is read in parts of
``READ_CHUNK``, a turn of the loop each."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from kio.schema.errors import ErrorCode as E

from kcompat.broker.broker import Broker
from kcompat.broker.delays import READ_CHUNK
from kcompat.ext.schedule_stored import StoredRecords
from kcompat.testing import running
from kcompat.wire.records import encode_batch
from tests.unit.broker.test_delayed_produce import broker, produce  # noqa: F401 - a fixture

RECORDS = 5_000




def test_a_backlog_goes_out_in_few_large_deliveries(broker: Broker,  # noqa: F811
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    sends: list[int] = []
    reads: list[int] = []
    service = broker.delays
    send = service._send

    async def counted_send(index: int, delivery: Any, planned: Any) -> bool:
        sends.append(len(delivery.entries))
        return await send(index, delivery, planned)

    tails = StoredRecords.tails

    def counted_tails(self: StoredRecords, entries: Any) -> Any:
        listed = list(entries)
        reads.append(len(listed))
        return tails(self, listed)

    monkeypatch.setattr(service, "_send", counted_send)
    monkeypatch.setattr(StoredRecords, "tails", counted_tails)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await running.start(nursery, broker, internal_topics=False)
            await running.create_topic(broker, "t", 1)
            await broker.cluster.wait_leaders("t", 5.0)
            for first in range(0, RECORDS, 1_000):  # all due at once, before delivery starts
                r = await produce(broker, encode_batch(
                    [(b"k%d" % i, b"v" * 100, (("kc-delay-ms", b"1"),), 1000)
                     for i in range(first, first + 1_000)]))
                assert r.error_code == E.none
            await trio.sleep(0.05)
            nursery.start_soon(service.run)
            with trio.fail_after(30):
                while sum(sends) < RECORDS or service.logs[0].inflight:
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert sum(sends) == RECORDS and len(service.logs[0]) == 0
    assert len(sends) <= 3  # 2,000 records (~260 KB) each
    assert max(reads) <= READ_CHUNK
