"""A second core for delayed records: the broker's side of its CPU worker process.

Theory of operation
-------------------
The broker is one process, and its Python runs on one core at a time (the
GIL): worker threads (``offload.run_cpu``) keep a long split off the event
loop but not off that core. A produce of delayed records costs the broker
about twice a plain one's CPU, half of it splitting the batch
(``holes.split``) and building the schedule log's batches
(``delay_batches.schedule_batches``) — pure work on bytes. On a machine with
a second core, the broker was the bottleneck of a delayed producer at well
under two cores busy (the 1M soak's load average: 1.2 on 2 cores).

So that work goes to a child process (``cpu_worker``), one per broker,
started the first time a batch for it arrives (the batch itself goes to a
worker thread meanwhile: a broker that never sees one never starts it) and
again a second after it exits. A batch of delayed records (uncompressed, at
least ``FAR_BYTES``, on a topic with neither a retry policy nor a dedup
window, as ``produce._split_ahead`` picks them) is sent there whole; the
worker answers the batch with holes, to store as usual, and keeps the
records it took out (their ``Move``s), which the broker never unpickles —
that would cost the loop as much as making them. The broker holds a
``FarSplit``: the hole, how many records moved, the cancellations and a
key. Once the hole is committed, ``batches`` asks the worker for the
schedule log's batches of that key, bytes again. When the ``FarSplit`` is
garbage, its key is forgotten (``weakref.finalize``) with the next request.

Calls take turns (a ``trio.Lock``: one request on the pipe at a time, the
worker being single-threaded anyway) and are shielded from cancellation, so
the pipe never holds half a frame; ``CALL_TIMEOUT_S`` bounds each. A worker
that fails (exits, times out, answers garbage) is killed and the call
raises ``CpuUnavailable``: a split is then made in a worker thread as
before; a ``FarSplit`` whose records died with the worker cannot be
scheduled, and its produce is answered REQUEST_TIMED_OUT, retriable — the
producer's retry is a duplicate of the stored batch, split and scheduled
again (``delays``: the schedule log drops a repeat).

The loop pays the frames: pickling the batch (a copy), a pipe write and
read, unpickling the hole and the schedule batches — a few hundredths of a
microsecond per record, against the 3 the split and the batches cost.
"""

from __future__ import annotations

import itertools
import logging
import pickle
import subprocess
import sys
import weakref
from dataclasses import dataclass
from collections.abc import Iterator
from typing import Any

import trio
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from trio.lowlevel import RunVar

from kcompat.broker.cpu_worker import FRAME, frame
from kcompat.ext.delay import Cancel, HeaderError
from kcompat.wire.batch import BatchError

log = logging.getLogger("kcompat.broker")

FAR_BYTES = 32 << 10  # a delayed batch this large is split by the worker process
CALL_TIMEOUT_S = 10.0  # a worker that takes longer is killed (a split of 1 MB: ~20 ms)
START_TIMEOUT_S = 30.0  # its imports, on a loaded machine
RESTART_S = 1.0
RESTART_MAX_S = 60.0  # after failed starts, doubling from RESTART_S
RECEIVE_BYTES = 1 << 20

_CPU: RunVar[CpuProcess] = RunVar("kcompat_cpu_process")


class CpuUnavailable(Exception):
    """The worker process is not running, or failed this call."""


@dataclass(frozen=True, slots=True, weakref_slot=True)
class FarSplit:
    """A split whose moved records the worker process keeps (see the module)."""

    hole: bytes  # the batch to store in the partition, with holes
    count: int  # records moved
    cancels: tuple[tuple[int, Cancel], ...]
    topics: frozenset[str]
    key: int
    worker: CpuProcess


def cpu_process() -> CpuProcess | None:
    """This broker's worker process, if it has one (``run_broker`` sets it)."""
    try:
        return _CPU.get()
    except LookupError:
        return None


class CpuProcess(Collector):
    """The worker process: started by ``run`` once wanted, called in turns;
    its metrics (a ``Collector``)."""

    def __init__(self) -> None:
        self._wanted = trio.Event()
        self._lock = trio.Lock()
        self._proc: trio.Process | None = None
        self._buffer = bytearray()
        self._forget: list[int] = []
        self._keys = itertools.count(1)
        self.ready = False
        self.starts = 0
        self.failures = 0
        self.splits = 0  # batches split there (of which records moved: ``moved``)
        self.moved = 0

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("kcompat_cpu_worker_up",
                               "Whether the CPU worker process takes delayed batches now")
        up.add_metric([], 1.0 if self.ready else 0.0)
        yield up
        for name, text, count in (
                ("starts", "Times the CPU worker process started", self.starts),
                ("failures", "Calls the CPU worker process failed (then killed)", self.failures),
                ("splits", "Batches of delayed records split by the CPU worker process",
                 self.splits),
                ("moved_records", "Records the CPU worker process took out of batches",
                 self.moved)):
            family = CounterMetricFamily(f"kcompat_cpu_worker_{name}", text)
            family.add_metric([], float(count))
            yield family

    def install(self) -> None:
        _CPU.set(self)

    def usable(self) -> bool:
        """Whether calls can go to the worker now; the first ask starts it."""
        self._wanted.set()
        return self.ready

    async def run(self) -> None:
        """Start the worker once wanted, and again after it exits; kill it
        when cancelled (the broker stops)."""
        wait_s = RESTART_S
        try:
            while True:
                await self._wanted.wait()
                proc = await trio.lowlevel.open_process(
                    [sys.executable, "-m", "kcompat.broker.cpu_worker"],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                self._proc, self._buffer = proc, bytearray()
                try:
                    await self._call(("hello",), START_TIMEOUT_S, starting=True)
                    self.ready = True
                    self.starts += 1
                    wait_s = RESTART_S
                    log.info("CPU worker process %d started", proc.pid)
                except CpuUnavailable:  # it could not start: wait longer each time
                    wait_s = min(wait_s * 2, RESTART_MAX_S)
                await proc.wait()
                self.ready = False
                if proc.returncode not in (0, -9):
                    log.warning("CPU worker process %d exited with %s; started again in %.0f s",
                                proc.pid, proc.returncode, wait_s)
                await trio.sleep(wait_s)
        finally:
            self.ready = False
            if self._proc is not None and self._proc.returncode is None:
                self._proc.kill()

    async def split(self, records: bytes, now_ms: int, max_delay_ms: int) -> FarSplit | None:
        """``records`` split by the worker as ``append.split_ahead`` would
        (a topic without retry policy or dedup window); None when nothing is
        taken out. Raises ``HeaderError`` or ``BatchError`` as the split
        would, ``CpuUnavailable`` when the worker cannot."""
        key = next(self._keys)
        answer = await self._call(("split", key, records, now_ms, max_delay_ms))
        if answer[0] == "refused":
            error: HeaderError | BatchError = answer[1]
            raise error
        if answer[1] is None:
            return None
        hole, count, cancels, topics = answer[1]
        self.splits += 1
        self.moved += count
        far = FarSplit(hole, count, cancels, topics, key, self)
        weakref.finalize(far, self._forget.append, key)
        return far

    async def batches(self, split: FarSplit, topic: str, index: int, base_offset: int,
                      partitions: dict[str, int], now_ms: int) -> list[bytes]:
        """The schedule log's batches of ``split`` (``schedule_batches``);
        ``CpuUnavailable`` when its records are gone with a worker."""
        answer = await self._call(("batches", split.key, topic, index, base_offset,
                                   partitions, now_ms))
        if answer[0] != "ok":
            raise CpuUnavailable(f"the worker no longer holds split {split.key}")
        batches: list[bytes] = answer[1]
        return batches

    async def _call(self, request: tuple[Any, ...], timeout_s: float = CALL_TIMEOUT_S,
                    starting: bool = False) -> tuple[Any, ...]:
        async with self._lock:
            proc = self._proc
            if proc is None or proc.returncode is not None or not (self.ready or starting):
                raise CpuUnavailable("the CPU worker process is not running")
            forget, self._forget = self._forget, []
            answer: tuple[Any, ...] | None = None
            with trio.CancelScope(shield=True), trio.move_on_after(timeout_s):
                try:
                    await proc.stdin.send_all(frame((request[0], forget, *request[1:])))  # type: ignore[union-attr]
                    answer = await self._receive(proc)
                except (trio.BrokenResourceError, trio.ClosedResourceError, EOFError,
                        pickle.UnpicklingError, OSError) as e:
                    log.warning("CPU worker process %d failed: %r", proc.pid, e)
            if answer is None or answer[0] == "failed":
                self.failures += 1
                self.ready = False
                if answer is not None:
                    log.warning("CPU worker process %d failed: %s", proc.pid, answer[1])
                elif proc.returncode is None:
                    log.warning("CPU worker process %d did not answer in %.0f s",
                                proc.pid, timeout_s)
                proc.kill()
                raise CpuUnavailable("the CPU worker process failed")
            return answer

    async def _receive(self, proc: trio.Process) -> tuple[Any, ...]:
        buf = self._buffer
        while True:
            if len(buf) >= FRAME.size:
                (size,) = FRAME.unpack_from(buf)
                if len(buf) >= FRAME.size + size:
                    body = bytes(buf[FRAME.size:FRAME.size + size])
                    del buf[:FRAME.size + size]
                    answer: tuple[Any, ...] = pickle.loads(body)
                    return answer
            chunk = await proc.stdout.receive_some(RECEIVE_BYTES)  # type: ignore[union-attr]
            if not chunk:
                raise EOFError("the CPU worker process closed its output")
            buf += chunk
