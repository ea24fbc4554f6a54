"""Produces on one connection overlap their commit waits (``connection``).

A real broker in-process on the simulator's disk, whose every fsync pass
takes ``SLOW_S`` of (mock) time; a client connection over a memory stream
sends ``COUNT`` acks=all produces back to back, as librdkafka does one per
``linger.ms``. Before the fix the connection handled one request at a time
and answered each after its own fsync pass: ``COUNT`` passes in all. Now the
later produces are appended while the first waits, and a couple of passes
answer them all — still in request order, each at the offset it was
appended at.
"""

from __future__ import annotations

import datetime
import io
import struct
from typing import Any

import trio
import trio.testing
from kio.schema.errors import ErrorCode as E

from kcompat.broker.config import broker_config
from kcompat.broker.ext.delays import pending_summary
from kcompat.broker.host.broker import Broker
from kcompat.broker.net.session import Session
from kcompat.broker.node.connection import _serve
from kcompat.ext.delay import CANCEL_SCHEDULE, DELAY_MS, SCHEDULE_ID
from kcompat.testing import running
from kcompat.testing.memory_store import MemoryFileStore
from kcompat.wire import codec
from kcompat.wire import versions as v
from kcompat.wire.framing import FrameReader
from kcompat.wire.records import encode_batch

SLOW_S = 0.5
COUNT = 6


Headers = tuple[tuple[str, bytes], ...]


def _frame(cid: int, value: bytes, acks: int = -1, headers: Headers = ()) -> bytes:
    m = codec.request_module(v.PRODUCE, 9)
    request = m.ProduceRequest(transactional_id=None, acks=acks,
                               timeout=datetime.timedelta(seconds=30), topic_data=(
        m.TopicProduceData(name="t", partition_data=(m.PartitionProduceData(
            index=0, records=encode_batch([(None, value, headers, 1000)])),)),))
    body = io.BytesIO()
    codec._writer(type(request))(body, request)
    frame = struct.pack(">hhih", v.PRODUCE, 9, cid, 1) + b"p" + b"\x00" + body.getvalue()
    return struct.pack(">i", len(frame)) + frame


def _answer(frame: bytes) -> tuple[int, Any]:
    cid = struct.unpack(">i", frame[:4])[0]
    response, _end = codec._reader(codec.response_class(v.PRODUCE, 9))(frame, 5)  # + tags
    return cid, response.responses[0].partition_responses[0]


class _Watched(trio.abc.Stream):
    """The server's side of a memory stream, noting which task receives and
    which writes each answer."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner
        self.receivers: set[object] = set()
        self.writers: list[object] = []

    async def send_all(self, data: Any) -> None:
        self.writers.append(trio.lowlevel.current_task())
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        self.receivers.add(trio.lowlevel.current_task())
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _exchange(acks: list[int], slow_s: float, headers: list[Headers] | None = None,
              after: Any = None) -> tuple[list[tuple[int, Any, float]], _Watched]:
    """Produces of ``acks`` (each with its ``headers``) sent back to back on
    one connection of a broker whose fsync passes take ``slow_s``: the
    answers, and the server stream; ``after(broker)`` once all are answered."""
    headers = headers or [()] * len(acks)
    store = MemoryFileStore("/b")
    broker = Broker(broker_config.load(None, {"log.dirs": "/b/data"}, {}), store)
    seen: dict[str, Any] = {}

    async def main() -> None:
        async with running.running(broker):
            await running.create_topic(broker, "t")
            client, server = trio.testing.memory_stream_pair()
            watched = seen["server"] = _Watched(server)
            store.faults.sync_delay_s = slow_s
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_serve, watched, broker,
                                   Session.open(broker.listeners[0], "/127.0.0.1"), ("t", 1))
                began = trio.current_time()
                await client.send_all(b"".join(_frame(cid, b"v%d" % cid, a, h) for cid, (a, h)
                                               in enumerate(zip(acks, headers, strict=True), 1)))
                reader, answers = FrameReader(1 << 20), []
                while len(answers) < len(acks):
                    for frame in reader.feed(await client.receive_some(65536)):
                        answers.append((*_answer(frame), trio.current_time() - began))
                seen["answers"] = answers
                if after is not None:
                    after(broker)
                await client.aclose()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    broker.close()
    return seen["answers"], seen["server"]


def test_a_connection_appends_the_next_produces_while_one_waits_for_its_fsync() -> None:
    answers, _server = _exchange([-1] * COUNT, SLOW_S)
    assert [cid for cid, _r, _t in answers] == list(range(1, COUNT + 1)), answers
    assert all(r.error_code == E.none for _c, r, _t in answers), answers
    offsets = [r.base_offset for _c, r, _t in answers]
    assert offsets == sorted(offsets) and len(set(offsets)) == COUNT, offsets
    took = answers[-1][2]
    assert took < 3 * SLOW_S, (
        f"{COUNT} produces took {took:.2f} s of {SLOW_S} s fsync passes: one pass each, "
        f"one request at a time")


def test_answers_left_when_a_connection_breaks_release_their_file_ranges(tmp_path) -> None:
    """A Fetch answer queued behind one the peer never takes: its file range
    owns a descriptor, closed when the connection ends (else every broken
    connection with answers pending leaked one per range)."""
    import os

    from kcompat.broker.net.zero_copy import FileRange
    from kcompat.broker.node.connection import _Answers

    path = tmp_path / "segment"
    path.write_bytes(b"x" * 100)

    class Broken(trio.abc.Stream):
        async def send_all(self, data: Any) -> None:
            raise trio.BrokenResourceError("peer gone")

        async def wait_send_all_might_not_block(self) -> None: ...

        async def receive_some(self, max_bytes: int | None = None) -> bytes:
            return b""

        async def aclose(self) -> None: ...

    ranges = [FileRange(os.open(path, os.O_RDONLY), 0, 100) for _ in range(3)]

    async def main() -> BaseException | None:
        answers = _Answers(Broken())
        send, receive = trio.open_memory_channel(8)
        for r in ranges:
            send.send_nowait([b"head", r])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(answers.run, receive, nursery.cancel_scope)
        return answers.error

    assert isinstance(trio.run(main), trio.BrokenResourceError)
    assert all(r.fd == -1 for r in ranges), [r.fd for r in ranges]


def test_an_answer_ready_at_once_is_written_by_the_reader() -> None:
    """acks=1 produces (answered when appended): each answer is written by
    the task that reads the requests, not handed to the sender's task and
    back (a task step each way per request, on the produce path)."""
    answers, server = _exchange([1] * COUNT, 0.0)
    assert [cid for cid, _r, _t in answers] == list(range(1, COUNT + 1)), answers
    assert len(server.receivers) == 1, server.receivers
    assert set(server.writers) == server.receivers, (server.writers, server.receivers)


def test_answers_behind_a_waiting_one_keep_the_request_order() -> None:
    """acks=all produces waiting for their fsync pass between acks=1 ones:
    every answer comes back in request order, those queued behind a waiting
    one written by the sender when its turn comes."""
    acks = [1, -1, 1, 1, -1, 1, 1]
    answers, server = _exchange(acks, SLOW_S)
    assert [cid for cid, _r, _t in answers] == list(range(1, len(acks) + 1)), answers
    assert all(r.error_code == E.none for _c, r, _t in answers), answers
    offsets = [r.base_offset for _c, r, _t in answers]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(acks), offsets
    reader = next(iter(server.receivers))
    assert server.writers[0] == reader  # nothing before it: the reader wrote it
    assert any(w != reader for w in server.writers)  # behind the waiting one: the sender


def test_delayed_produces_overlap_their_commit_waits_and_schedule_in_request_order() -> None:
    """acks=all produces of delayed records back to back: each is scheduled
    (the schedule log's own fsync pass) once its batch is committed, and the
    next ones are appended meanwhile, not after its answer (a pass for the
    batch and one for its schedule, one produce after another, before); the
    schedules still go in request order, so a cancellation finds the record
    an earlier produce scheduled. The first produce makes the schedule topic
    (passes of its own): the time is counted from its answer."""
    delay = (DELAY_MS, b"60000")
    headers: list[Headers] = [(delay, (SCHEDULE_ID, b"id-%d" % k)) for k in range(COUNT + 1)]
    headers[4] = ((CANCEL_SCHEDULE, b"id-2"),)  # it cancels the record of the third
    waiting: list[int] = []
    answers, _server = _exchange([-1] * (COUNT + 1), SLOW_S, headers, after=lambda broker: (
        waiting.extend(n for row in pending_summary(broker.delays, "t")
                       for _t, _p, n in row["targets"])))
    assert [cid for cid, _r, _t in answers] == list(range(1, COUNT + 2)), answers
    assert all(r.error_code == E.none for _c, r, _t in answers), answers
    assert sum(waiting) == COUNT - 1, waiting  # one cancel, one record cancelled
    took = answers[-1][2] - answers[0][2]
    assert took < 1.5 * COUNT * SLOW_S, (
        f"{COUNT} delayed produces took {took:.2f} s of {SLOW_S} s fsync passes: two passes "
        f"each, one request at a time")
