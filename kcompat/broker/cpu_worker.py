"""The CPU worker process: delayed records split and scheduled on another core.

Theory of operation
-------------------
Run as ``python -m kcompat.broker.cpu_worker`` by the broker
(``cpu_process.CpuProcess``), with its standard input and output as the
only channel: each request and each answer is a 4-byte big-endian length
and a pickle. The worker answers requests one at a time, in order, and
holds one thing between them: the ``holes.Split`` of each batch it split,
by the key the broker gave it, until the broker says it dropped its handle
(``forget``, sent along with the next request). The broker therefore never
receives a split's per-record moves — unpickling them would cost the loop
about as much as making them — only the bytes it stores: the batch with
holes, and later the schedule log's batches (``schedule_batches``).

Requests (a tuple: its op, the keys to forget, then the op's arguments):

* ``hello``: answered ``("ok", None)`` once imports are done;
* ``split`` (key, records, now_ms, max delay): the batch split as
  ``append.split_ahead`` would for a topic with neither a retry policy nor a
  dedup window — ``("ok", None)`` when there is nothing to split out (a plain
  batch, not exactly one batch, a bad one: the append says why),
  ``("ok", (hole, moves, cancels, topics))`` with the split kept, or
  ``("refused", error)`` with the ``HeaderError`` or ``BatchError`` raised;
* ``batches`` (key, topic, index, base offset, partitions, now_ms): the
  schedule-log batches of a kept split, ``("ok", [bytes, ...])``, or
  ``("gone", key)`` when it is not kept.

Any other failure is ``("failed", text)``. End of input ends the process:
a broker that dies, even by kill -9, takes its worker with it.

Pure work only: no socket, no file but the two pipes, no broker state.
"""

from __future__ import annotations

import pickle
import struct
import sys
from collections import OrderedDict
from typing import Any, BinaryIO

from kcompat.broker.delay_batches import schedule_batches
from kcompat.ext import holes
from kcompat.ext.delay import HeaderError
from kcompat.wire import batch as wbatch

FRAME = struct.Struct(">I")
# splits kept at most; the broker forgets each it drops, so only a lost message
# (none: one pipe, in order) could leave one behind — a bound all the same
KEPT_MAX = 4096


def read_frame(stream: BinaryIO) -> bytes | None:
    """One frame's body, or None at the end of the stream."""
    head = stream.read(FRAME.size)
    if len(head) < FRAME.size:
        return None
    (size,) = FRAME.unpack(head)
    body = stream.read(size)
    return body if len(body) == size else None


def frame(value: object) -> bytes:
    body = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return FRAME.pack(len(body)) + body


class Worker:
    """The worker's state: the splits it keeps, by key."""

    def __init__(self) -> None:
        self.kept: OrderedDict[int, holes.Split] = OrderedDict()

    def answer(self, request: tuple[Any, ...]) -> tuple[Any, ...]:
        op, forget, *args = request
        for key in forget:
            self.kept.pop(key, None)
        try:
            if op == "hello":
                return "ok", None
            if op == "split":
                return self.split(*args)
            if op == "batches":
                return self.batches(*args)
            return "failed", f"unknown op {op!r}"
        except Exception as e:  # noqa: BLE001 - answered, never fatal: the broker falls back
            return "failed", f"{type(e).__name__}: {e}"

    def split(self, key: int, records: bytes, now_ms: int, max_delay_ms: int
              ) -> tuple[Any, ...]:
        try:
            batches = wbatch.split_batches(records)
            if len(batches) != 1:
                return "ok", None
            view = batches[0]
            header = wbatch.validate(view)
            if header.is_control or not holes.may_carry_headers(view, header):
                return "ok", None
            found = holes.split(view, header, now_ms, max_delay_ms)
        except (HeaderError, wbatch.BatchError) as e:
            return "refused", e
        if found is None:
            return "ok", None
        self.kept[key] = found
        while len(self.kept) > KEPT_MAX:
            self.kept.popitem(last=False)
        return "ok", (found.hole, len(found.moves), found.cancels, found.topics)

    def batches(self, key: int, topic: str, index: int, base_offset: int,
                partitions: dict[str, int], now_ms: int) -> tuple[Any, ...]:
        found = self.kept.get(key)
        if found is None:
            return "gone", key
        return "ok", schedule_batches(topic, index, found, base_offset, partitions, now_ms)


def main() -> None:
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    worker = Worker()
    while True:
        body = read_frame(source)
        if body is None:
            return
        sink.write(frame(worker.answer(pickle.loads(body))))
        sink.flush()


if __name__ == "__main__":
    main()
