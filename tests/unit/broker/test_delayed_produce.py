"""A large produce of delayed records: split in a worker thread ahead of the
append, its records scheduled in several schedule-log batches (each a short
apply), every one of them pending once; a bad header in such a batch is
refused whole as in a small one."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as E

from kcompat.broker.config import broker_config
from kcompat.broker.ext.delays import SCHEDULE_BATCH
from kcompat.broker.handlers import HANDLERS
from kcompat.broker.handlers.produce import SPLIT_AHEAD_BYTES
from kcompat.broker.host.broker import Broker
from kcompat.broker.host.context import RequestContext
from kcompat.ext.schedule_log import SCHEDULE_TOPIC
from kcompat.testing import running
from kcompat.wire import codec
from kcompat.wire import versions as v
from kcompat.wire.records import encode_batch

RECORDS = 2 * SCHEDULE_BATCH + 200


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(broker_config.load(None, {"log.dirs": str(tmp_path),
                                         "kc.schedule.topic.num.partitions": "1"}, {}))
    yield b
    b.close()


async def produce(broker: Broker, batch: bytes) -> Any:
    m = codec.request_module(v.PRODUCE, 9)
    request = m.ProduceRequest(transactional_id=None, acks=-1,
                               timeout=datetime.timedelta(seconds=10), topic_data=(
        m.TopicProduceData(name="t", partition_data=(m.PartitionProduceData(
            index=0, records=batch),)),))
    r = await HANDLERS[v.PRODUCE](RequestContext(broker, v.PRODUCE, 9, 1, "p", "/h"), request)
    return r.responses[0].partition_responses[0]


def refused_then_stored(broker: Broker, bad: bytes, good: bytes, header: str,
                        **configs: str) -> None:
    """Topic ``t`` (with ``configs``): ``bad`` is refused INVALID_RECORD naming
    ``header``, then ``good`` is stored at offset 0."""
    async def body() -> None:
        await running.create_topic(broker, "t", 1, **configs)
        await broker.cluster.wait_leaders("t", 5.0)
        refused = await produce(broker, bad)
        assert refused.error_code == E.invalid_record and header in refused.error_message
        answer = await produce(broker, good)
        assert (answer.error_code, answer.base_offset) == (E.none, 0)

    running.run(broker, body, services=False)


def test_a_large_delayed_batch_is_split_ahead_and_scheduled_in_parts(broker: Broker) -> None:
    delayed = [(b"k%d" % i, b"v" * 100, (("kc-delay-ms", b"60000"),), 1000)
               for i in range(RECORDS)]
    # the first record named, the last one cancelling it: a cancellation follows
    # what it cancels into the schedule, several schedule batches later
    delayed[0] = (b"k0", b"v" * 100, (("kc-delay-ms", b"60000"), ("kc-schedule-id", b"x")),
                  1000)
    delayed[-1] = (b"c", b"", (("kc-cancel-schedule", b"x"),), 1000)
    batch = encode_batch(delayed)
    assert len(batch) >= SPLIT_AHEAD_BYTES
    bad = encode_batch([*delayed[:-1], (b"x", b"v" * 100, (("kc-delay-ms", b"soon"),), 1000)])

    refused_then_stored(broker, bad, batch, "kc-delay-ms")
    slog = broker.delays.logs[0]
    assert len(slog) == RECORDS - 2  # each once, the named one cancelled
    assert all(p.schedule_id is None for p, _inflight in slog.listing())
    part = broker.state.partition(SCHEDULE_TOPIC, 0)
    assert part is not None
    adds = [h.records_count for _b, h in part.log.batches(0, part.log.log_end_offset)
            if h.records_count]
    # each batch: its adds op, then up to SCHEDULE_BATCH records; the cancel in the last op
    assert sum(n - 1 for n in adds) == RECORDS - 1 and max(adds) <= SCHEDULE_BATCH + 1
    assert len(adds) == 3
    hole = broker.state.partition("t", 0)
    assert hole is not None and hole.log.log_end_offset == RECORDS  # offsets kept: holes


def test_delayed_records_dedup_ids_are_checked_at_produce(broker: Broker) -> None:
    """Rule 5 on a topic with a dedup window: a delayed record with an empty
    ``kc-dedup-id`` refuses its batch whole (before, it was scheduled and its
    id dropped at delivery); a good id or none is scheduled."""
    now = int(datetime.datetime.now().timestamp() * 1000)
    bad = encode_batch([(b"a", b"v", (("kc-delay-ms", b"60000"), ("kc-dedup-id", b"")), now)])
    good = encode_batch([(b"a", b"v", (("kc-delay-ms", b"60000"), ("kc-dedup-id", b"i1")), now),
                         (b"b", b"v", (("kc-delay-ms", b"60000"),), now)])

    refused_then_stored(broker, bad, good, "kc-dedup-id", **{"kc.dedup.window.ms": "60000"})
    assert len(broker.delays.logs[0]) == 2  # the good batch's two records, pending
