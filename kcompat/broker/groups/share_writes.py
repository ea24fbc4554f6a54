"""Writes of share-partition state to ``__share_group_state``, coalesced per key.

Theory of operation
-------------------
A ShareFetch or ShareAcknowledge changes the machines it touches in memory,
then waits here until their changes are committed to their state partition
(``shares``: durable before answered). The writes of one state partition go
out one batch at a time, in order (a ``_Queue`` per partition), each batch
gathering what waited while the one before it was in flight.

**One record per key per batch.** A write asks for a key's changes to be
made durable; it does not carry them. While a key waits for the next batch,
later writes of it join that wait, and the record is made only when the batch
is formed: the machine's ``take_update`` then (or its ``snapshot`` when a
joined write asked for a full one) holds every change made before any of the
joined writes. So however many requests touch a key during one Raft round,
its state partition gets one record for them (an ``update`` costs what
changed, not how many requests changed it), and each request still waits for
a record that holds its changes — also one whose changes a batch took before
the request asked (it changed the machine, then awaited something else): it
waits for the key's last record (``Held.sent``) and fails with it. Sequence
numbers are given as the records are made, in the order they are appended, so
replicas fold them in order (``group.share_state``).

**Behind.** Each queue notes when its oldest write waiting, and the one in
the batch in flight, was asked: ``behind_s`` is how long the oldest write of
a state partition has waited — a lag source of ``backpressure``: over its
bound, ShareFetch and ShareAcknowledge answers carry a throttle.

**Failure.** A batch that is not committed marks the keys in it ``broken``:
their later records are deltas on the lost one, so they are not sent; their
writes fail and the owner claims the key again (``shares``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import trio
from kio.schema.errors import ErrorCode

from kcompat.group.share_partition import DeadLetter, SharePartition
from kcompat.group.share_state import SHARE_STATE_TOPIC, ShareKey, encode_key, state_value
from kcompat.wire.records import encode_batch

log = logging.getLogger("kcompat.shares")

Append = Callable[[int, bytes], Awaitable[ErrorCode]]  # state partition, batch
Spawn = Callable[..., bool]


@dataclass(eq=False)
class Held:
    """A share key this broker serves: its machine, the generation it writes
    with and the Raft term of the data partition it was claimed in."""

    key: ShareKey
    machine: SharePartition
    generation: int
    term: int
    state_index: int
    dead: list[DeadLetter] = field(default_factory=list)  # not in the DLQ topic yet
    seq: int = 0  # of the last state record sent
    # a write of it failed: its later records are not sent (they are deltas on
    # the lost one), their requests fail, and the key is claimed again
    broken: bool = False
    topic_id: Any = None  # of the topic it was claimed for (re-created: claimed again)
    # the last record made of it: a change it holds is durable once that commits
    sent: _Wait | None = None


@dataclass(eq=False)
class _Wait:
    """The next record of one key: what it must hold, and who waits for it."""

    held: Held
    full: bool
    initial: bool
    done: trio.Event = field(default_factory=trio.Event)
    code: ErrorCode = ErrorCode.request_timed_out


@dataclass(eq=False)
class _Queue:
    waiting: dict[Held, _Wait] = field(default_factory=dict)  # in the order first asked
    running: bool = False
    # when the oldest write waiting for the next batch, and the one in the
    # batch in flight, was asked (ms; None: none) — how far behind it is
    queued_ms: int | None = None
    flushing_ms: int | None = None


class ShareWriter:
    """The write queues of the state partitions."""

    def __init__(self, append: Append, spawn: Spawn, now_ms: Callable[[], int]) -> None:
        self._append = append
        self._spawn = spawn
        self._now_ms = now_ms
        self._queues: dict[int, _Queue] = {}
        self.records_written = 0  # state records appended (committed or not)
        self.batches_written = 0

    def lag(self) -> int:
        """Keys waiting for a batch that has not started yet, over all state
        partitions (what a backpressure hook may read)."""
        return sum(len(q.waiting) for q in self._queues.values())

    def behind_s(self, index: int) -> float:
        """How long the oldest write of state partition ``index`` still not
        committed has waited (0: none waits): a lag source of
        ``backpressure`` (``share_state``)."""
        queue = self._queues.get(index)
        asked = [] if queue is None else [t for t in (queue.flushing_ms, queue.queued_ms)
                                          if t is not None]
        return max(self._now_ms() - min(asked), 0) / 1000 if asked else 0.0

    def behind(self) -> list[tuple[int, float]]:
        """(state partition, ``behind_s``) of every queue (``/metrics``)."""
        return [(index, self.behind_s(index)) for index in sorted(self._queues)]

    async def write(self, changed: list[tuple[Held, bool]], initial: bool = False
                    ) -> list[tuple[Held, ErrorCode]]:
        """Make each machine's changes (or, ``full``, its whole state) durable
        and wait for all of them; (held, error) of the writes that failed."""
        waits = []
        failed: list[tuple[Held, ErrorCode]] = []
        for held, full in changed:
            queue = self._queues.setdefault(held.state_index, _Queue())
            wait = queue.waiting.get(held)
            if wait is None and held.broken:
                failed.append((held, ErrorCode.unknown_server_error))
                continue  # a change it holds may be in the lost record
            if wait is None and not full and not held.machine.has_update:
                # nothing new to record: its changes are in the last record
                # made, which may still be in flight (taken by a batch after
                # the change, before this call) — answered once that commits
                if held.sent is not None and not held.sent.done.is_set():
                    waits.append(held.sent)
                continue
            if wait is None:
                if not queue.waiting:
                    queue.queued_ms = self._now_ms()
                wait = queue.waiting[held] = _Wait(held, full, initial)
            else:  # joins the record the key already waits for
                wait.full = wait.full or full
                wait.initial = wait.initial or initial
            waits.append(wait)
            if not queue.running:
                queue.running = True
                if not self._spawn(self._flush, held.state_index, queue):
                    queue.running = False
                    for lost in queue.waiting.values():
                        lost.done.set()
                    queue.waiting.clear()
        for wait in waits:
            await wait.done.wait()
            if wait.code != ErrorCode.none:
                failed.append((wait.held, wait.code))
        return failed

    async def _flush(self, index: int, queue: _Queue) -> None:
        try:
            while queue.waiting:
                taken, queue.waiting = list(queue.waiting.values()), {}
                queue.flushing_ms, queue.queued_ms = queue.queued_ms, None
                for wait in taken:
                    if wait.held.broken:
                        wait.code = ErrorCode.unknown_server_error
                        wait.done.set()
                taken = [w for w in taken if not w.done.is_set()]
                if not taken:
                    continue
                now_ms = self._now_ms()
                batch = encode_batch([(encode_key(w.held.key), self._record(w), (), now_ms)
                                      for w in taken])
                self.records_written += len(taken)
                self.batches_written += 1
                code = await self._append_logged(index, batch)
                queue.flushing_ms = None
                for wait in taken:
                    wait.code = code
                    wait.done.set()
                    if code != ErrorCode.none:
                        wait.held.broken = True
        finally:
            queue.running = False
            queue.flushing_ms = None

    @staticmethod
    def _record(wait: _Wait) -> bytes:
        held, machine = wait.held, wait.held.machine
        if wait.full:
            state = machine.snapshot()
            machine.take_update()
        else:
            state = machine.take_update()
        held.seq += 1
        held.sent = wait
        return state_value(held.generation, held.seq, state, wait.full, wait.initial)

    async def _append_logged(self, index: int, batch: bytes) -> ErrorCode:
        try:
            return await self._append(index, batch)
        except Exception:
            log.exception("writing share state to %s-%d", SHARE_STATE_TOPIC, index)
            return ErrorCode.unknown_server_error
