"""A large produce to a topic with a dedup window: its records' ids are read
in a worker thread ahead of the append (``append.split_ahead``), so the loop
only looks them up in the index; duplicates are still taken out, and a bad
``kc-dedup-id`` in such a batch is refused whole as in a small one."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as E

from kcompat.broker.config import broker_config
from kcompat.broker.controller import admin
from kcompat.broker.handlers import HANDLERS
from kcompat.broker.handlers.produce import SPLIT_AHEAD_BYTES
from kcompat.broker.host.broker import Broker
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage import dedup_windows
from kcompat.testing import running
from kcompat.wire import codec
from kcompat.wire import versions as v
from kcompat.wire.records import encode_batch

RECORDS = 3000


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(broker_config.load(None, {"log.dirs": str(tmp_path)}, {}))
    yield b
    b.close()


async def produce(broker: Broker, batch: bytes, topic: str = "t") -> Any:
    m = codec.request_module(v.PRODUCE, 9)
    request = m.ProduceRequest(transactional_id=None, acks=-1,
                               timeout=datetime.timedelta(seconds=10), topic_data=(
        m.TopicProduceData(name=topic, partition_data=(m.PartitionProduceData(
            index=0, records=batch),)),))
    r = await HANDLERS[v.PRODUCE](RequestContext(broker, v.PRODUCE, 9, 1, "p", "/h"), request)
    return r.responses[0].partition_responses[0]


def _watch_scans(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """For each strict scan of a producer's batch for its ids: was it on the
    loop's thread (the main thread: ``running.run``)?"""
    scans: list[bool] = []
    scan = dedup_windows._ids

    def watched(pol: Any, batch: Any, strict: bool = True) -> Any:
        if strict:
            scans.append(threading.current_thread() is threading.main_thread())
        return scan(pol, batch, strict)

    monkeypatch.setattr(dedup_windows, "_ids", watched)
    return scans


def test_a_large_dedup_batch_has_its_ids_read_off_the_loop(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    scans = _watch_scans(monkeypatch)
    first = encode_batch([(b"k%d" % i, b"v" * 100, (("kc-dedup-id", b"id-%d" % i),), 1000)
                          for i in range(RECORDS)])
    # half of them again, half new
    again = encode_batch([(b"k%d" % i, b"v" * 100, (("kc-dedup-id", b"id-%d" % i),), 1000)
                          for i in range(RECORDS // 2, RECORDS + RECORDS // 2)])
    bad = encode_batch([(b"k%d" % i, b"v" * 100, (("kc-dedup-id", b"x%d" % i if i else b""),),
                         1000) for i in range(RECORDS)])
    assert min(len(first), len(again), len(bad)) >= SPLIT_AHEAD_BYTES
    answers = []

    async def body() -> None:
        await admin.create_topic(broker.controller, "t", 1, 1, {"kc.dedup.window.ms": "600000",
                                                                 "kc.dedup.by": "header"})
        await broker.cluster.wait_leaders("t", 5.0)
        for batch in (first, again, bad):
            answers.append(await produce(broker, batch))

    running.run(broker, body, services=False)
    ok, dup, refused = answers
    assert (ok.error_code, ok.base_offset) == (E.none, 0)
    assert (dup.error_code, dup.base_offset) == (E.none, RECORDS)
    assert refused.error_code == E.invalid_record and "kc-dedup-id" in refused.error_message
    assert scans == [False, False, False]  # each batch's ids read once, in a worker thread
    part = broker.state.partition("t", 0)
    assert part is not None and part.dedup is not None
    assert part.dedup.duplicates == RECORDS // 2
    stored = sum(h.records_count for _b, h in part.log.batches(0, part.log.log_end_offset))
    assert stored == RECORDS + RECORDS // 2  # the repeats taken out as holes
    assert part.log.log_end_offset == 2 * RECORDS  # offsets kept


def test_ids_by_content_are_read_off_the_loop_too(broker: Broker,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch with no ``kc-`` header at all (``kc.dedup.by=content``) is
    looked at ahead as well."""
    scans = _watch_scans(monkeypatch)
    batch = encode_batch([(b"k%d" % i, b"v%d" % i * 20, (), 1000) for i in range(RECORDS)])
    assert len(batch) >= SPLIT_AHEAD_BYTES and b"kc-" not in batch
    answers = []

    async def body() -> None:
        await admin.create_topic(broker.controller, "c", 1, 1, {"kc.dedup.window.ms": "600000",
                                                                 "kc.dedup.by": "content"})
        await broker.cluster.wait_leaders("c", 5.0)
        for _ in range(2):
            answers.append(await produce(broker, batch, "c"))

    running.run(broker, body, services=False)
    assert [a.error_code for a in answers] == [E.none, E.none]
    assert scans == [False, False]
    part = broker.state.partition("c", 0)
    assert part is not None and part.dedup is not None and part.dedup.duplicates == RECORDS
