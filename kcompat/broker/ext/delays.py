"""Delayed delivery: the service hosting the schedule log (docs/extensions.md).

Theory of operation
-------------------
**Produce.** The append path (``append``, ``ext.holes``) stores a batch with
its delayed records and cancellations taken out. Once that batch is
committed, the produce handler calls ``schedule``: the records go, whole,
into the ``__kc_schedule`` partition of their topic-partition (created on
first use, like the coordinators' topics) in batches of ``SCHEDULE_BATCH``
led by an ``adds`` op naming the produced batch's producer and sequence
(``delay_batches.schedule_batches``: the records keep the bytes their producer encoded,
``kc-scheduled-offset`` appended), through the schedule partition's leader —
here or on another broker (``PeerCalls.append``). Only then is the produce
answered. A crash in between leaves the producer unanswered; its retry is
a duplicate for the partition, which answers the original offset, and is
scheduled again — the schedule log drops the second copy (``ScheduleLog``
keeps the last batches of each producer per partition). Records of a
non-idempotent producer are, as in Kafka, at least once. A transactional
batch's records are written in a transactional batch of its producer, after
the schedule partition was added to its transaction: the coordinator's
commit or abort marker reaches the schedule log too, and only a commit
schedules them (``ScheduleLog.hold``). Retries and dead letters (``ext.retry``)
travel the same way, to their retry topic or dead-letter topic.

**State.** ``DelayService`` is the replicated state machine of
``__kc_schedule`` (``StateMachine``): every replica applies each committed
batch to its partition's ``ScheduleLog``, so a new leader holds the whole
schedule without a replay.

**Delivery.** The leader of a schedule partition (``run``) wakes at the next
due time. Per target partition with due records, it first commits an
``out`` record — which fixes the entries and their producer sequence — then
appends them as one batch with the schedule partition's internal producer id
to the target's leader, then commits ``done`` with the next batch's ``out``
(``_serve_target``): one Raft round and one append per delivery while records
keep coming due. A delivery costs about 4 ms of the loop whatever its size
(the rounds, the append, their fsyncs, thread trips and wake-ups: measured
with ``bench/delivery_live.py``), so deliveries wait to carry many records:
one waits until the earliest of its records has been due for its target's
*linger* — ``DELIVERY_LINGER_MS``, or, while the target's records come due
faster than ``STEADY_RECORDS`` per ``LINGER_MAX_MS``, long enough for about
``DELIVERY_TARGET`` records, ``LINGER_MAX_MS`` at most (``linger_after``,
learnt from each delivery). Its ``done`` waits with it (the target's
idempotence check makes a re-send after a failover harmless), the delivery
noted ``stored`` so the gauges count it delivered. Records coming due
steadily thus go by the hundred, for at most that much more lateness; a
lone record waits ``DELIVERY_LINGER_MS``. A leader that fails anywhere in between is replaced by
one that finds the delivery in flight and re-sends the same batch, which the
target partition's idempotence check answers as a duplicate if it was
already stored: each record lands once (rule 3). A target that no longer exists —
missing from caught-up metadata for ``TARGET_GONE_S``, not merely created a
moment ago on another broker — is dropped from the schedule.

**Backpressure.** A leader that falls behind (the earliest record not yet
delivered is more than ``delay_pressure.FROM_S`` overdue) slows the producers
of what it schedules: the produce that scheduled records carries a throttle
(``throttle_ms``) as a quota's does, muting the connection — Kafka's quota
formula with the records scheduled there as the rate and what the partition
delivers meanwhile as the quota (``delay_pressure.Backpressure``), at least
the lateness itself — so the CPU goes to delivery and lateness stays bounded
instead of growing with the backlog.

**Bounded state.** Delivered records leave the log. Every
``COMPACT_CHECK_S`` the leader of a schedule partition looks whether
``kc.schedule.snapshot.min.records`` records (or half its pending count, if
more) came after its last snapshot; then (``_compact``) it copies forward
the pending records that outlived the snapshot before the last (few: most
records are due long before), writes a snapshot (``ScheduleLog.capture``,
encoded in a worker thread) and, once it is committed, moves the log start
to the lowest offset still needed, deleting the segments below it. Disk
follows what is pending, plus about two snapshot intervals; a restart reads
the last snapshot and what came after it (``restore``: a machine whose log
starts past what it applied), about half the pending count at most. Records
copied forward and snapshots cost about one more write of each long-lived
record per two intervals and 40 bytes per pending record per interval.

**Turns.** Every step of delivery is bounded: a delivery batch (what is
due, ``DELIVERY_BATCH`` at most: large only while catching up, when each
batch's Raft round must carry many records) reads its records
``READ_CHUNK`` at a time, a turn each — ``READ_PIECE`` at a time within it, the
turn ending early once ``READ_TURN_S`` has gone by: each record may cost a
pread, which, while worker threads are busy, waits for the GIL to come back —
from where they are, neighbours in a stored batch together
(``StoredRecords.tails``: their stored bytes, framed again without being
decoded), its lateness is observed per batch (``BatchLateness``), and the schedule
promotes a slot of far-future records ``PROMOTE_TURN_CALM`` a turn at most,
shared by the partitions led here (from ``schedule.PROMOTE_AHEAD_MS`` before
the slot begins: a slot is promoted in log order, so its earliest records may
be among its last promoted), ``PROMOTE_TURN`` once it is about to begin
(``Schedule.urgent``) — a step of a few milliseconds while there is time, a
longer one only when a slot must be near soon — the loop coming back at once
(``_start_due``) until it is done.

Metrics: pending records per target partition (on the schedule partition's
leader), how late each schedule partition is, the throttle given, delivery
lateness, records delivered per topic, retries per retry topic and dead
letters per dead-letter topic.
"""

from __future__ import annotations

import collections
import logging
import time
from functools import partial
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import trio
from kio.schema.errors import ErrorCode
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kcompat.broker.controller.admin import auto_create
from kcompat.broker.controller.internal_topics import partition_for
from kcompat.broker.ext.delay_batches import SCHEDULE_BATCH, below, schedule_batches
from kcompat.broker.ext.delay_pressure import Backpressure
from kcompat.broker.ext.lateness import BatchLateness
from kcompat.broker.loop.lane import background_turn
from kcompat.broker.loop.offload import run_cpu
from kcompat.broker.replication.storage import now_ms
from kcompat.ext.holes import Split
from kcompat.ext.schedule import Pending, Target
from kcompat.ext.schedule_log import (
    SCHEDULE_TOPIC,
    Delivery,
    ScheduleLog,
    done_record,
    drop_record,
    internal_producer_id,
    move_record,
    out_record,
    snapshot_batches,
)
from kcompat.ext.schedule_stored import (
    StoredRecords,
    Tail,
    delivery_batch,
    tails_size,
    take_tails_within,
)
from kcompat.wire import batch as wbatch
from kcompat.wire.records import (
    encode_batch,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from kcompat.broker.controller.quorum import Controller
    from kcompat.broker.replication.peer_calls import PeerCalls
    from kcompat.broker.replication.runtime import ClusterRuntime
    from kcompat.broker.storage.state import BrokerState

log = logging.getLogger("kcompat.delays")

# records per delivery batch, at most: what is due, so a few while on time, and up to
# this many while late — each delivery costs a Raft round and an append to the
# target, so only large batches catch up (read READ_CHUNK at a time, a turn each)
DELIVERY_BATCH = 2000
READ_CHUNK = 500
# a chunk is read READ_PIECE records at a time, and its turn ends once READ_TURN_S has
# gone by: each record may cost a pread, and while worker threads are busy (a produce
# of delayed records splitting its batches) each pread gives the GIL up and waits up to
# the switch interval to get it back — in the 1M soak 100 records took up to 46 ms
READ_PIECE = 25
READ_TURN_S = 0.005
# entries promoted per turn of the delivery loop at most, shared by the schedule
# partitions led here: PROMOTE_TURN (~15 ms) once a slot is about to begin
# (``Schedule.urgent``; less and a large slot is not promoted by the time it
# begins on a loaded node: the 1M soak's calm lateness p50 went from 0 to 300 ms),
# PROMOTE_TURN_CALM (~4 ms) in the seconds before: a slot is promoted from
# ``PROMOTE_AHEAD_MS`` before it begins, and at a turn every 50 ms that is
# 60,000 entries a second, more than a busy node's producers schedule
PROMOTE_TURN = 12_000
PROMOTE_TURN_CALM = 3_000
MOVE_BATCH = 500  # records copied forward per batch (a JSON op each: ~5 us to apply)
DELIVERY_BYTES = 1 << 20  # and about this many bytes (one record at least)
# a delivery waits until the earliest of its records has been due this long (at
# least): what comes due meanwhile goes with it. Each delivery costs a Raft round
# and an append to the target whatever its size; records coming due a few per
# millisecond would otherwise go a few per delivery
DELIVERY_LINGER_MS = 50
# a target whose records come due steadily lingers longer: up to LINGER_MAX_MS, for
# about DELIVERY_TARGET records a delivery, once STEADY_RECORDS would come due within
# LINGER_MAX_MS (fewer: each delivery costs little in all, and lateness matters more).
# On a 2-core host 300k records due over 30 s cost 62-67 us of CPU each at 50 ms and
# 34 us at 200 ms (bench/delivery_live.py)
LINGER_MAX_MS = 250
DELIVERY_TARGET = 500
STEADY_RECORDS = 100
IDLE_WAKE_S = 1.0
RETRY_S = 0.2
CREATE_WAIT_S = 5.0
WRITE_TIMEOUT_S = 5.0
# a delivery's append to its target: short, so that a dead leader costs little
# (a re-send that was stored after all is a duplicate for the target)
SEND_TIMEOUT_S = 1.0
TARGET_GONE_S = 30.0  # a target missing this long (metadata caught up) was deleted
RETRY_MAX_S = 5.0
COMPACT_CHECK_S = 0.5  # how often a leader looks whether a snapshot is due (cheap)
# a delivery refused for itself (not for a passing leader change): worth a warning
_REFUSED = (ErrorCode.out_of_order_sequence_number, ErrorCode.invalid_producer_epoch,
            ErrorCode.corrupt_message, ErrorCode.invalid_record)
LATENESS_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class DelayService:
    def __init__(self, state: BrokerState, cluster: ClusterRuntime, calls: PeerCalls,
                 controller: Controller) -> None:
        self.state = state
        self.cluster = cluster
        self.calls = calls
        self.controller = controller
        self.logs: dict[int, ScheduleLog] = {}
        self.leading: set[int] = set()
        self._busy: set[tuple[int, Target]] = set()
        self._lingers: dict[tuple[int, Target], int] = {}  # learnt by ``linger_after``
        self._missing_since: dict[Target, float] = {}  # targets not (yet) in the metadata
        self._stored: dict[int, StoredRecords] = {}  # schedule partition -> its reader
        # schedule partition -> where its last snapshots written here were taken
        self._snapshots: dict[int, list[int]] = {}
        self._wake = trio.Event()
        self.lateness: BatchLateness | None = None
        self.delivered: Counter | None = None
        self.retries: Counter | None = None
        self.dead_letters: Counter | None = None
        self.throttled: Counter | None = None
        self.pressure = Backpressure()  # what goes in and out of each schedule partition
        cluster.machines[SCHEDULE_TOPIC] = self  # fed by the replication host

    # -- the replicated state machine over __kc_schedule ----------------------------------

    def apply(self, index: int, batch: memoryview, header: wbatch.BatchHeader) -> None:
        self._log(index).feed(batch, header)
        if index in self.leading:
            self._wake.set()

    def on_role(self, index: int, leading: bool) -> None:
        self._stored.pop(index, None)  # a new leadership reads its log afresh
        if index in self.logs:  # what a past leadership here sent is sent again
            self.logs[index].stored.clear()
        if leading:
            self.leading.add(index)
            log.log(logging.INFO if len(self._log(index)) else logging.DEBUG,
                    "delivering %d scheduled records of %s-%d", len(self._log(index)),
                    SCHEDULE_TOPIC, index)
        else:
            self.leading.discard(index)
        self._wake.set()

    def restore(self, index: int, start: int) -> None:
        """The log starts at ``start``, past what was applied (a restart after
        the log start moved, or a follower sent its leader's log start): the
        machine starts again from the snapshot the log holds there."""
        had = self.logs.get(index)
        log.log(logging.INFO if had is not None and len(had) else logging.DEBUG,
                "%s-%d: the log starts at %d, past what was applied: rebuilding from the "
                "snapshot there", SCHEDULE_TOPIC, index, start)
        self.logs[index] = ScheduleLog(fresh_from=start, reread=partial(self._reread, index))
        self._stored.pop(index, None)

    def _reread(self, index: int, machine: ScheduleLog, start: int, end: int) -> None:
        group = self.cluster.group_of(SCHEDULE_TOPIC, index)
        if group is not None:
            for batch, header in group.storage.plog.batches(start, end):
                machine.feed(batch, header)

    def _log(self, index: int) -> ScheduleLog:
        found = self.logs.get(index)
        if found is None:
            found = self.logs[index] = ScheduleLog(reread=partial(self._reread, index))
        return found

    # -- produce: schedule what a stored batch took out ----------------------------------

    async def prepare(self, topic: str, index: int, split: Split,
                      timeout_s: float) -> tuple[ErrorCode, str | None, int]:
        """Create what ``split`` needs (the schedule topic, a dead-letter
        topic); (error, message, the schedule partition of ``topic``-``index``)."""
        wait_s = min(timeout_s, CREATE_WAIT_S)
        for needed in {SCHEDULE_TOPIC, *split.topics}:
            if needed not in self.state.topics:
                auto_create(self.controller, needed)
                await self.cluster.wait_leaders(needed, wait_s)
            if needed not in self.state.topics:
                return ErrorCode.request_timed_out, f"{needed} is being created; retry", -1
        partitions = self.state.topics[SCHEDULE_TOPIC].partitions
        return ErrorCode.none, None, partition_for(f"{topic}-{index}", partitions)

    async def schedule(self, topic: str, index: int, split: Split, base_offset: int,
                       timeout_s: float) -> tuple[ErrorCode, str | None]:
        """Write the moves and cancellations of ``split`` (stored at
        ``base_offset`` in ``topic``-``index``) to the schedule log — in the
        producer's transaction if its batch is transactional (the caller has
        added the schedule partition to it)."""
        code, message, schedule_index = await self.prepare(topic, index, split, timeout_s)
        if code != ErrorCode.none:
            return code, message
        partitions = {topic: self.state.topics[topic].partitions for topic in split.topics}
        build = partial(schedule_batches, topic, index, split, base_offset, partitions, now_ms())
        # a large split is built in a worker thread, the loop going on meanwhile
        batches = (await run_cpu(build) if len(split.taken) > SCHEDULE_BATCH
                   else build())
        for batch in batches:  # in order: a cancellation follows what it cancels
            code, _offset = await self.calls.append(SCHEDULE_TOPIC, schedule_index, batch,
                                                    timeout_s)
            if code != ErrorCode.none:  # a retry schedules again; the log drops repeats
                return code, f"the records to move could not be scheduled ({code.name}); retry"
        self.pressure.scheduled(schedule_index, len(split.taken), trio.current_time())
        self._count_moves(topic, split)
        return ErrorCode.none, None

    # -- delivery: the leader of each schedule partition -----------------------------------

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._compact_loop)
            while True:
                self._wake = trio.Event()
                async with background_turn():  # promotions: a chunk of the lane
                    wait_s = self._start_due(nursery, now_ms())
                with trio.move_on_after(wait_s):
                    await self._wake.wait()

    def _start_due(self, nursery: trio.Nursery, now: int) -> float:
        """Start a delivery task per target with due records (or one in
        flight); how long to sleep before looking again."""
        wait_s = IDLE_WAKE_S
        served = [index for index in sorted(self.leading)
                  if self.cluster.serving_machine(SCHEDULE_TOPIC, index) is None]
        turn = PROMOTE_TURN if any(self._log(index).schedule.urgent(now)
                                   for index in served) else PROMOTE_TURN_CALM
        share = max(turn // max(len(self.leading), 1), 1)
        for index in served:
            slog = self._log(index)
            for target in [*slog.inflight, *slog.due_targets(now, share, DELIVERY_LINGER_MS)]:
                self._spawn(nursery, index, target)
            due = slog.next_due_ms()
            if slog.schedule.promoting(now):
                wait_s = 0.0  # a slot promoted in turns: the next turn at once
            elif due is not None and due + DELIVERY_LINGER_MS > now:
                # (what is due but busy wakes us when done)
                wait_s = min(wait_s, (due + DELIVERY_LINGER_MS - now) / 1000)
        return wait_s

    def _spawn(self, nursery: trio.Nursery, index: int, target: Target) -> None:
        """One ``_serve_target`` task per (schedule partition, target) at a time."""
        key = (index, target)
        if key in self._busy:
            return
        self._busy.add(key)

        async def task() -> None:
            try:
                await self._serve_target(index, target)
            except Exception:
                log.exception("delivering to %s-%d failed", *target)
                await trio.sleep(RETRY_S)
            finally:
                self._busy.discard(key)
                self._wake.set()
        nursery.start_soon(task)

    async def _serve_target(self, index: int, target: Target) -> None:
        """Deliver what is due for ``target``, batch after batch, while there
        is: finish the delivery in flight (or fix a new one with an ``out``
        record), append it, then commit its ``done`` together with the next
        ``out`` — one Raft round and an append per batch, the ``done``
        waiting through the next batch's linger. Stops when this broker no
        longer leads ``index``."""
        slog = self._log(index)
        records: list[Any] = []  # the done of the delivery just stored, if any
        planned: dict[int, Tail] = {}  # entry -> its record, read to plan the batch
        key = (index, target)
        while True:
            if records or target not in slog.inflight:
                wait_s = self._linger_s(slog, target,
                                        self._lingers.get(key, DELIVERY_LINGER_MS))
                if wait_s > 0:  # the done (if any) waits too: committed with the next out
                    await trio.sleep(wait_s)
                async with background_turn():
                    entries = slog.schedule.due(now_ms(), DELIVERY_BATCH, target)
                if entries:
                    entries, planned = await self._plan(index, entries)
                    async with background_turn():  # planning and writing: turns apart
                        records.append(out_record(target, entries, now_ms()))
            if records and not await self._commit(index, records):
                return
            delivery = slog.inflight.get(target)
            if delivery is None or not await self._send(index, delivery, planned):
                return
            now = now_ms()
            if slog.inflight.get(target) is delivery:
                slog.stored.add(target)
            self._observe(delivery, now)
            self.pressure.delivered(index, len(delivery.entries), trio.current_time())
            self._lingers[key] = linger_after(delivery.entries)
            records = [done_record(target, delivery.seq, now)]

    @staticmethod
    def _linger_s(slog: ScheduleLog, target: Target, linger_ms: int) -> float:
        """How long to wait, a record of ``target`` being due, until the
        earliest has been due for ``linger_ms`` (what comes due meanwhile
        goes in the same delivery); 0 when nothing is due or the earliest
        has waited enough."""
        first = slog.schedule.earliest_due(target)
        now = now_ms()
        if first is None or not now - linger_ms < first <= now:
            return 0.0
        return (first + linger_ms - now) / 1000

    async def _commit(self, index: int, records: list[Any]) -> bool:
        """Append ``records`` (ops) to schedule partition ``index`` through
        Raft; False when they were not committed (this broker no longer
        leads it, or its disk failed)."""
        code, _ = await self.calls.append_locally(
            SCHEDULE_TOPIC, index, encode_batch(records), WRITE_TIMEOUT_S)
        return code == ErrorCode.none

    async def _plan(self, index: int, entries: list[Pending]
                    ) -> tuple[list[Pending], dict[int, Tail]]:
        """The first of the due ``entries`` that fit a delivery batch
        (``DELIVERY_BYTES``, one at least) and their records, read
        ``READ_CHUNK`` at a time, a turn of the loop each."""
        tails = await self._read(index, entries, DELIVERY_BYTES)
        n = take_tails_within(tails, DELIVERY_BYTES)
        return entries[:n], dict(zip(map(attrgetter("entry"), entries[:n]), tails, strict=False))

    async def _read(self, index: int, entries: list[Pending],
                    bytes_max: int | None = None) -> list[Tail]:
        """The records of ``entries``, read ``READ_CHUNK`` at a time, a turn
        of the loop each — fewer when ``READ_TURN_S`` ran out first; with
        ``bytes_max``, only until more than that is read."""
        tails: list[Tail] = []
        start = size = 0  # (the running size: each turn weighs only what it read)
        while start < len(entries):
            async with background_turn():
                stored, chunk_end = self._records(index), min(start + READ_CHUNK, len(entries))
                deadline = time.monotonic() + READ_TURN_S
                while start < chunk_end:
                    piece = stored.tails(entries[start:min(start + READ_PIECE, chunk_end)])
                    tails += piece
                    size += tails_size(piece)
                    start += len(piece)
                    if time.monotonic() >= deadline:
                        break
            if bytes_max is not None and size > bytes_max and len(tails) > 1:
                break  # (``take_tails_within`` would leave some out)
        return tails

    async def _send(self, index: int, delivery: Delivery,
                    planned: dict[int, Tail]) -> bool:
        """Append the delivery's batch to its target until it is stored (True);
        False when this broker stops leading ``index`` first or the target is
        gone (dropped). ``planned``: records already read for it."""
        topic, partition = delivery.target
        records = list(map(planned.get, map(attrgetter("entry"), delivery.entries)))
        if None in records:  # not planned here (a delivery in flight when leadership came)
            read = iter(await self._read(index, [p for p, r in zip(delivery.entries, records,
                                                                    strict=True) if r is None]))
            records = [r if r is not None else next(read) for r in records]
        async with background_turn():
            batch = delivery_batch(records, internal_producer_id(index),  # type: ignore[arg-type]
                                   delivery.seq)
        attempt = 0
        while self.cluster.serving_machine(SCHEDULE_TOPIC, index) is None:
            if self._gone(delivery.target):
                left = self._log(index).pending_by_target.get(delivery.target, 0)
                log.warning("dropping %d scheduled records of %s-%d: the partition is gone",
                            left + len(delivery.entries), topic, partition)
                await self.calls.append_locally(SCHEDULE_TOPIC, index, encode_batch(
                    [drop_record(delivery.target, now_ms())]), WRITE_TIMEOUT_S)
                return False
            code, _offset = await self.calls.append(topic, partition, batch, SEND_TIMEOUT_S)
            if code == ErrorCode.none:
                return True
            if code in _REFUSED and attempt % 50 == 0:  # not a passing leader change
                log.warning("delivery of %d scheduled records to %s-%d refused: %s; retrying",
                            len(delivery.entries), topic, partition, code.name)
            else:
                log.debug("delivery to %s-%d: %s; retrying", topic, partition, code.name)
            await trio.sleep(min(RETRY_S * 2 ** min(attempt, 5), RETRY_MAX_S))
            attempt += 1
        return False  # the next leader finishes it

    # -- bounded state: snapshots and the log start ------------------------------------------

    async def _compact_loop(self) -> None:
        while True:
            await trio.sleep(COMPACT_CHECK_S)
            for index in sorted(self.leading):
                if self._snapshot_due(index):
                    try:
                        await self._compact(index)
                    except Exception:
                        log.exception("compacting %s-%d failed", SCHEDULE_TOPIC, index)

    def _snapshot_due(self, index: int) -> bool:
        """Enough came after the last snapshot: ``kc.schedule.snapshot.min.records``,
        or half the pending records if more (restart replays at most that
        much after the snapshot; a snapshot costs about 40 bytes per pending
        record, so their cost per record scheduled stays flat)."""
        group = self.cluster.group_of(SCHEDULE_TOPIC, index)
        slog = self.logs.get(index)
        if group is None or slog is None or slog.fresh_from is not None or \
                self.cluster.serving_machine(SCHEDULE_TOPIC, index) is not None:
            return False
        plog = group.storage.plog
        since = plog.log_end_offset - max(slog.snapshot_at, plog.log_start_offset)
        least = int(self.state.config["kc.schedule.snapshot.min.records"])
        return since >= max(least, len(slog) // 2)

    async def _compact(self, index: int) -> None:
        """Copy forward the pending records older than the snapshot before the
        last one (few: they outlived two snapshots), snapshot the state, then
        move the log start to the lowest offset still needed — below the
        snapshot, only batches holding a pending record — and delete the
        segments wholly below it: disk follows what is pending, and a
        replica that restarts reads the snapshot, not the history."""
        slog = self._log(index)
        older = self._snapshots.get(index, [])
        if len(older) >= 2:
            await self._move_older(index, older[-2])
        group = self.cluster.group_of(SCHEDULE_TOPIC, index)
        if group is None or not group.is_leader or self._log(index) is not slog:
            return
        at = group.applied
        capture = slog.capture(at)
        batches, low = await run_cpu(snapshot_batches, capture, now_ms())
        for batch in batches:
            code, _offset = await self.calls.append_locally(SCHEDULE_TOPIC, index, batch,
                                                            WRITE_TIMEOUT_S)
            if code != ErrorCode.none:
                log.debug("snapshot of %s-%d not written: %s", SCHEDULE_TOPIC, index, code.name)
                return
        self._snapshots[index] = [*older[-2:], at]
        plog = group.storage.plog
        if group.is_leader and plog.log_start_offset < low <= group.hw:
            plog.delete_records_before(low, now_ms())
            self.cluster.log_starts_moved(SCHEDULE_TOPIC, index)
        log.info("%s-%d: snapshot of %d pending records at offset %d (%d batches); the log "
                 "starts at %d", SCHEDULE_TOPIC, index, len(slog), at, len(batches),
                 plog.log_start_offset)

    async def _move_older(self, index: int, before: int) -> None:
        """Copy the pending records held in batches below ``before`` to the log
        end, ``MOVE_BATCH`` per batch (a record delivered or cancelled
        meanwhile is left: the copy is ignored)."""
        slog = self._log(index)
        image = slog.schedule.export()
        found = await run_cpu(below, image, before)
        stored = self._records(index)
        for start in range(0, len(found), MOVE_BATCH):
            chunk = found[start:start + MOVE_BATCH]
            records = [move_record(stored.record(p), p, now_ms()) for p in chunk]
            code, _offset = await self.calls.append_locally(
                SCHEDULE_TOPIC, index, encode_batch(records), WRITE_TIMEOUT_S)
            if code != ErrorCode.none:
                return
        if found:
            log.info("%s-%d: %d pending records copied forward", SCHEDULE_TOPIC, index,
                     len(found))

    def _gone(self, target: Target) -> bool:
        """The target partition does not exist — for long enough, with this
        broker's metadata caught up, that it is not just a topic created a
        moment ago elsewhere (a new dead-letter topic) whose record has not
        reached this broker yet."""
        if target in self.cluster.assignments:
            self._missing_since.pop(target, None)
            return False
        now = trio.current_time()
        since = self._missing_since.setdefault(target, now)
        return self.cluster.caught_up and now - since >= TARGET_GONE_S

    def _records(self, index: int) -> StoredRecords:
        """The reader of the stored records of schedule partition ``index``."""
        found = self._stored.get(index)
        if found is None:
            group = self.cluster.group_of(SCHEDULE_TOPIC, index)
            assert group is not None
            found = self._stored[index] = StoredRecords(group.storage.plog.batch_slice)
        return found

    # -- backpressure ----------------------------------------------------------------------

    def overdue_s(self, index: int) -> float:
        """How late schedule partition ``index``, if led here, is with what is
        due: now minus the earliest due time not yet delivered (0 when on time;
        ``ScheduleLog.earliest_due_ms``: at most one slot early)."""
        slog = self.logs.get(index)
        if slog is None or index not in self.leading:
            return 0.0
        earliest = slog.earliest_due_ms()
        return 0.0 if earliest is None else max(now_ms() - earliest, 0) / 1000

    def throttle_ms(self, topic: str, index: int) -> int:
        """The throttle for a produce that scheduled records of ``topic``-``index``:
        while their schedule partition is more than ``delay_pressure.FROM_S``
        late, the producer waits until what it is scheduled there does not
        outpace what it delivers, and at least as long as it is late beyond
        that — Kafka's quota throttle (``throttle_time_ms``, the connection
        muted), so delivery catches up instead of the broker falling further
        behind. Known only where the schedule partition is led (here);
        elsewhere 0."""
        meta = self.state.topics.get(SCHEDULE_TOPIC)
        if meta is None:
            return 0
        schedule_index = partition_for(f"{topic}-{index}", meta.partitions)
        throttle = self.pressure.throttle_ms(schedule_index, self.overdue_s(schedule_index),
                                             trio.current_time())
        if throttle and self.throttled is not None:
            self.throttled.inc(throttle / 1000)
        return throttle

    # -- metrics ---------------------------------------------------------------------------

    def export(self, registry: CollectorRegistry) -> None:
        self.lateness = BatchLateness(
            "kcompat_delayed_delivery_lateness_seconds",
            "Time from a delayed record's due time to its delivery (committed)",
            LATENESS_BUCKETS_S)
        registry.register(self.lateness)
        self.delivered = Counter("kcompat_delayed_records_delivered",
                                 "Delayed records delivered, per topic", ["topic"],
                                 registry=registry)
        self.retries = Counter("kcompat_retries", "Records produced to a retry topic and "
                               "scheduled for another attempt, per retry topic", ["topic"],
                               registry=registry)
        self.dead_letters = Counter("kcompat_dlq_appends", "Records moved to a dead-letter "
                                    "topic after their last attempt, per dead-letter topic",
                                    ["topic"], registry=registry)
        self.throttled = Counter("kcompat_delayed_backpressure_throttle_seconds",
                                 "Throttle given to producers of delayed records (and retries) "
                                 "while their schedule partition is late", registry=registry)
        registry.register(_PendingCollector(self))

    def _count_moves(self, topic: str, split: Split) -> None:
        if self.retries is None or self.dead_letters is None:
            return
        routes = split.taken.routes
        if routes is None:
            return  # delayed records only (a retry topic's: a dead-letter topic, or retries)
        retried = sum(route[3] for route in routes)  # a metric's lock per batch, not per record
        if retried:
            self.retries.labels(topic).inc(retried)
        for target, count in collections.Counter(
                target for _, target, _, retry in routes if not retry and target is not None).items():
            self.dead_letters.labels(target).inc(count)

    def _observe(self, delivery: Delivery, now: int) -> None:
        if self.lateness is not None and self.delivered is not None:
            self.lateness.observe_dues(now, [p.due_ms for p in delivery.entries])
            self.delivered.labels(delivery.target[0]).inc(len(delivery.entries))


def linger_after(entries: Sequence[Pending]) -> int:
    """A target's linger after a delivery of ``entries`` (earliest first),
    in ms: from the rate at which they came due, long enough for about
    ``DELIVERY_TARGET`` records — ``DELIVERY_LINGER_MS`` to ``LINGER_MAX_MS`` —
    when at least ``STEADY_RECORDS`` come due within ``LINGER_MAX_MS``, else
    ``DELIVERY_LINGER_MS`` (few records: lateness matters more than cost)."""
    # (over DELIVERY_LINGER_MS at least: records due at one time tell no rate)
    per_ms = len(entries) / max(entries[-1].due_ms - entries[0].due_ms, DELIVERY_LINGER_MS)
    if per_ms * LINGER_MAX_MS < STEADY_RECORDS:
        return DELIVERY_LINGER_MS
    return int(min(max(DELIVERY_TARGET / per_ms, DELIVERY_LINGER_MS), LINGER_MAX_MS))


def pending_summary(service: DelayService, topic: str | None) -> list[dict[str, Any]]:
    """Per schedule partition led here: the records waiting per target partition
    (of ``topic`` only, when given), the earliest due time of all it holds and
    how late it is — counts kept as records come and go, nothing walked per
    record (the HTTP API's view of delayed records)."""
    out = []
    for index in sorted(service.leading):
        slog = service.logs.get(index)
        if slog is None:
            continue
        counts = slog.waiting_by_target()
        targets = [[t, p, n] for (t, p), n in sorted(counts.items())
                   if n and (topic is None or t == topic)]
        if topic is not None and not targets:
            continue
        out.append({"schedule_partition": index, "earliest_due_ms": slog.earliest_due_ms(),
                    "overdue_s": service.overdue_s(index), "targets": targets})
    return out


class _PendingCollector(Collector):
    def __init__(self, service: DelayService) -> None:
        self.service = service

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        gauge = GaugeMetricFamily("kcompat_delayed_records_pending",
                                  "Delayed records waiting (scheduled, not yet delivered), per "
                                  "target partition; reported by the schedule partition's leader",
                                  labels=["topic", "partition"])
        for index in sorted(self.service.leading):
            slog = self.service.logs.get(index)
            if slog is None:
                continue
            for (topic, partition), count in sorted(slog.waiting_by_target().items()):
                gauge.add_metric((topic, str(partition)), count)
        yield gauge
        late = GaugeMetricFamily("kcompat_delayed_delivery_overdue_seconds",
                                 "How late each schedule partition led here is with its due "
                                 "records (0: on time)", labels=["partition"])
        for index in sorted(self.service.leading):
            late.add_metric((str(index),), self.service.overdue_s(index))
        yield late
