"""The state of one share-partition (KIP-932), sans-IO.

Theory of operation
-------------------
A share group reads a partition cooperatively: its members *acquire* records
for a while and acknowledge each one. This machine owns the in-flight state of
one (share group, topic-partition), as Kafka 4.4's ``SharePartition`` does:

* the **share-partition start offset** (SPSO): every offset below it is done
  (acknowledged, archived or gone from the log) and forgotten;
* the **read offset**: the first offset the machine has not been told about
  yet. Every offset in ``[SPSO, read offset)`` has a state: ``AVAILABLE``,
  ``ACQUIRED`` (by one member, under a lock that expires at
  ``lock_deadline_ms``), ``ACKNOWLEDGED`` or ``ARCHIVED`` (Kafka's ids 0, 1,
  2, 4), and a **delivery count**, raised by one on each acquisition.

The host reads the log; the machine decides. ``acquire(member, max_records,
now_ms, records, read_end_offset)`` takes what the host read from
``read_offset`` on — ``(offset, group key)`` per record, ascending, and the
offset its read ended at: an offset in between that holds no record (a
compacted key, a transaction marker, an aborted record under read_committed)
is a *gap* and is archived with delivery count 0. It acquires AVAILABLE
records in offset order — those already in flight first, then new ones — and
returns the ranges, like ShareFetch's AcquiredRecords; the host then serves
the batches holding them. New records are taken only while the in-flight
window ``[SPSO, read offset)`` is shorter than ``max_record_locks`` (Kafka's
``share.partition.max.record.locks``), and only as many as the acquisition
needs, so a record is learnt when it is first offered.

Rules (Kafka 4.4 unless marked kcompat):

* ``acknowledge(member, batches, now_ms)`` is all or nothing, like Kafka's
  rollback of the partition's acknowledgements: a malformed batch (first >
  last, ack types neither one nor one per offset, unknown type, batches out of
  order or overlapping) is ``INVALID_REQUEST``; an offset that is not
  ACQUIRED by that member is ``INVALID_RECORD_STATE``. Offsets past the read
  offset (never handed out) are ``INVALID_REQUEST`` while records are in
  flight, ``INVALID_RECORD_STATE`` when none is (FINDINGS F24; Kafka fails a
  range from below the SPSO to past the log end with UNKNOWN_SERVER_ERROR,
  F22).
  Offsets below the SPSO are skipped. ACCEPT → ACKNOWLEDGED; REJECT and GAP →
  ARCHIVED; RELEASE → AVAILABLE; RENEW (KIP-1222) moves the lock deadline to
  ``now_ms`` + the lock duration. (kcompat: GAP on a gap offset is accepted.)
* A record that goes back to AVAILABLE (RELEASE, lock expiry) with its
  delivery count at ``delivery_count_limit`` is ARCHIVED instead; it, and a
  REJECTed record, is a *dead letter* (KIP-1191) for the host to copy.
* A record about to get its last delivery (limit > 2) is delivered alone, as
  Kafka isolates a possible poison record.
* ``release_member`` (the member left or its share session closed) makes its
  records AVAILABLE at once (no backoff) and keeps their delivery count, so
  the next member gets them one delivery later; a record at the limit is
  ARCHIVED, a dead letter. Kafka 4.4.0 does so (a consumer closed holding
  records: the next one sees delivery count 2; at limit 2, nobody sees them
  a third time), so a record that kills its consumers reaches the limit.
* ``tick(now_ms)`` expires locks; every entry point ticks first, so a late
  timer never lets a member acknowledge after its deadline.
* The SPSO moves over the ACKNOWLEDGED/ARCHIVED prefix, and to the log start
  offset when retention passes it (``advance_log_start``).
* kcompat ``ordering_message_group`` (``kc.share.ordering=message-group``):
  a record whose group key is not None is acquirable only when no earlier
  record of its group in this partition is ACQUIRED or AVAILABLE — it is the
  head of its group. Other groups pass it by; order holds across RELEASE,
  lock expiry, REJECT and member loss because the head never changes but by
  reaching ACKNOWLEDGED/ARCHIVED. A hot group can fill the window: lookahead
  is bounded by ``max_record_locks``.
* kcompat redelivery backoff: a record RELEASEd or timed out with delivery
  count n is acquirable again only ``backoff_ms`` × ``multiplier``^(n−1)
  (at most ``backoff_max_ms``) later; 0 turns it off.

Persistence: ``snapshot()`` is the whole state as a ``ShareState`` — the SPSO,
the read offset and ``StateBatch`` ranges (first, last, state, delivery count,
as Kafka's share coordinator stores them, plus the lock holder, its deadline
and the backoff time), with the group keys of unfinished records.
``take_update()`` is the same form for what changed since the last call (a
ShareUpdate to the coordinator's ShareSnapshot). ``restore(snapshot)`` then
``apply(update)`` in order rebuilds the same machine on any replica; the host
makes an update durable before it answers the fetch or acknowledgement that
made it, so a delivery count is never lost below what a consumer saw.

* Throttling, as Kafka 4.4 isolates records that keep coming back: the
  records one acquisition of new records took form an in-flight *batch*
  (stored with the state: ``ShareState.batch_starts``; a state stored
  without them takes its ranges as batches, as Kafka rebuilds its cache
  after a leader change). A batch holding an
  acquirable record delivered at least half the limit times (rounded up,
  at least 2) is *throttled*: it is acquired only first in a fetch, and
  nothing after it; from its first such record at most the batch's size
  halved once per delivery past that threshold (at least one).

Not here (yet): KIP-1191's transient ARCHIVING state that holds
the SPSO until a dead letter is written (the host takes ``take_dead_letters``
after each call).

Cost: the window is stored as runs of records that share their state
(``group.share_runs``), as Kafka keeps in-flight batches whole until an
acknowledgement cuts one. An operation costs the runs it touches: acquiring
500 new records grows one run (a few operations per record read), an
acknowledgement of one type over a fetch changes one run, and its update is
one ``StateBatch``; acquiring known records scans the runs, not the records.
Per-record work is left where the input is per record (a ShareAcknowledge
with one type per offset, the log's records offered one by one, dead letters).

Its value types (the configuration, ``AcquiredRecords``, ``ShareState`` and
the rest) live in ``share_types`` and are re-exported here.

Pure and deterministic: no clock, no I/O.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections import deque
from collections.abc import Iterable, Sequence

from kio.schema.errors import ErrorCode

from kcompat.group.share_runs import TERMINAL as TERMINAL  # importers take them from here
from kcompat.group.share_runs import RecordState as RecordState
from kcompat.group.share_runs import Run, Runs, grown_by, type_runs
from kcompat.group.share_types import ACK_TYPES
from kcompat.group.share_types import DELIVERY_LIMIT as DELIVERY_LIMIT
from kcompat.group.share_types import REJECTED as REJECTED
from kcompat.group.share_types import AckBatch as AckBatch
from kcompat.group.share_types import AckType as AckType
from kcompat.group.share_types import AcquiredRecords as AcquiredRecords
from kcompat.group.share_types import DeadLetter as DeadLetter
from kcompat.group.share_types import ShareConfig as ShareConfig
from kcompat.group.share_types import ShareState as ShareState
from kcompat.group.share_types import StateBatch as StateBatch
from kcompat.group.share_types import start_offset_for_reset as start_offset_for_reset


class SharePartition:
    def __init__(self, start_offset: int, config: ShareConfig | None = None) -> None:
        self.config = config or ShareConfig()  # group configs may change: replace it
        self._w = Runs(start_offset)  # the window, as runs (``share_runs``)
        self._groups: dict[bytes, deque[int]] = {}  # key -> unfinished offsets, ascending
        self._dead: list[DeadLetter] = []
        self._reported = (start_offset, start_offset)  # start, read of the last update
        # where each in-flight batch begins: what one acquisition of new records
        # took (Kafka's cached batches; the runs merge across them): throttling
        # sizes its acquisitions by them (``_take_throttled``)
        self._starts: list[int] = []
        self._starts_sent: tuple[int, ...] = ()  # as the last update carried them

    # -- what the host reads -------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self._w.start

    @property
    def read_offset(self) -> int:
        """The first offset not read yet: the host reads the log from here."""
        return self._w.read_offset

    @property
    def end_offset(self) -> int:
        """Kafka's share-partition end offset: the last offset in flight."""
        return self.read_offset - 1 if self._w.runs else self._w.start

    @property
    def run_count(self) -> int:
        """Runs the window is kept as (what its operations cost)."""
        return len(self._w.runs)

    def read_limit_offset(self) -> int:
        """Records at or past this offset are not taken now (the window is full)."""
        return self._w.start + self.config.max_record_locks

    def record(self, offset: int) -> StateBatch | None:
        run = self._w.at(offset)
        return None if run is None else StateBatch(offset, offset, *run.fields())

    def counts(self) -> dict[RecordState, int]:
        out = dict.fromkeys(RecordState, 0)
        for run in self._w.runs:
            out[run.state] += run.size
        return out

    def in_flight(self, limit: int) -> list[tuple[int, int, RecordState, int, str | None, int]]:
        """The first ``limit`` runs not done yet (AVAILABLE or ACQUIRED), in
        offset order: (first, last, state, delivery count, member, lock
        deadline) — what an operator looks at; a run, not a record, each."""
        out = []
        for run in self._w.runs:
            if run.state in TERMINAL:
                continue
            out.append((run.first, run.last, run.state, run.count, run.member, run.deadline))
            if len(out) >= limit:
                break
        return out

    def take_dead_letters(self) -> list[DeadLetter]:
        out, self._dead = self._dead, []
        return out

    def next_deadline_ms(self) -> int | None:
        """When ``tick`` next has work: a lock expires or a backoff ends."""
        w = self._w
        while w.locks and w.lock_live(*w.locks[0]) is None:
            heapq.heappop(w.locks)
        while w.backoffs and w.backoff_live(*w.backoffs[0]) is None:
            heapq.heappop(w.backoffs)
        tops = [heap[0][0] for heap in (w.locks, w.backoffs) if heap]
        return min(tops) if tops else None

    # -- transitions ---------------------------------------------------------

    def tick(self, now_ms: int) -> bool:
        """Expire locks and backoffs due by ``now_ms``; True if any did, so a
        record may be acquirable again (the host retries its parked fetches)."""
        w = self._w
        woke = False
        while w.locks and w.locks[0][0] <= now_ms:
            deadline_ms, offset = heapq.heappop(w.locks)
            run = w.lock_live(deadline_ms, offset)
            if run is not None:  # archived, it may free its group
                self._release(run.first, run.last, deadline_ms)
                woke = True
        while w.backoffs and w.backoffs[0][0] <= now_ms:
            not_before_ms, offset = heapq.heappop(w.backoffs)
            run = w.backoff_live(not_before_ms, offset)
            if run is not None:
                run.not_before = -1
                w.touch(run.first, run.last)
                w.mend(w.index(run.first), w.index(run.first) + 1)
                woke = True
        w.drop_terminal_prefix()
        return woke

    def next_fetch_offset(self, now_ms: int) -> int:
        """The first offset an acquisition would take now (Kafka's next fetch
        offset): the first acquirable record in flight, else the read offset."""
        for run in self._w.runs:
            if self._acquirable(run, now_ms):
                return run.first
        return self.read_offset

    def acquire(self, member_id: str, max_records: int, now_ms: int,
                records: Iterable[tuple[int, bytes | None]] = (),
                read_end_offset: int | None = None,
                fetch_end: int | None = None) -> list[AcquiredRecords]:
        """Acquire up to ``max_records`` for ``member_id``; ``records`` and
        ``read_end_offset`` describe what the host read from ``read_offset``.
        ``fetch_end``: nothing at or past it is taken (the batches a fetch's
        byte limit lets it hand out end there; ``records`` stop there too)."""
        self.tick(now_ms)
        taken: list[list[int]] = []  # [first, last, delivery count]
        if max_records > 0 and self._acquire_known(member_id, max_records, now_ms, taken,
                                                   fetch_end):
            before = self.read_offset
            self._acquire_new(member_id, max_records, now_ms, records, read_end_offset, taken)
            self._note_batch(before)
        self._w.drop_terminal_prefix()
        return [AcquiredRecords(f, last, c) for f, last, c in taken]

    def acknowledge(self, member_id: str, batches: Sequence[AckBatch],
                    now_ms: int) -> ErrorCode:
        """Apply every acknowledgement or none; the partition's error code."""
        self.tick(now_ms)
        error = _check_shape(batches)
        if error is not ErrorCode.none:
            return error
        plan: list[tuple[int, int, int]] = []  # first, last, ack type
        for first, last, types in batches:
            for a, b, ack in type_runs(max(first, self._w.start), last, first, types):
                error = self._check_ack(member_id, a, b, ack, plan)
                if error is not ErrorCode.none:
                    return error
        for a, b, ack in plan:
            self._apply_ack(a, b, AckType(ack), now_ms)
        self._w.drop_terminal_prefix()
        return ErrorCode.none

    def release_member(self, member_id: str, now_ms: int) -> int:
        """The member is gone: its records are AVAILABLE again (ARCHIVED at
        the delivery limit), their delivery counted. How many."""
        self.tick(now_ms)
        held = [(run.first, run.last) for run in self._w.runs
                if run.state is RecordState.ACQUIRED and run.member == member_id]
        limit = self.config.delivery_count_limit
        for first, last in held:
            for a, b, run in list(self._w.pieces(first, last)):
                if run.count >= limit:
                    self._finish(a, b, RecordState.ARCHIVED)
                    self._dead.extend(DeadLetter(o, run.count, DELIVERY_LIMIT)
                                      for o in range(a, b + 1))
                else:
                    self._make_available(a, b, -1)
        self._w.drop_terminal_prefix()
        return sum(last - first + 1 for first, last in held)

    def advance_log_start(self, log_start_offset: int) -> None:
        """Retention or DeleteRecords moved the log start: forget what is below."""
        w = self._w
        if log_start_offset <= w.start:
            return
        k = 0
        for run in w.runs:
            if run.first >= log_start_offset:
                break
            if run.last >= log_start_offset:  # trimmed: its timer moves to its new first
                run.first = log_start_offset
                w.time(run)
                break
            if run.key is not None and run.state not in TERMINAL:
                self._ungroup(run.first, run.key)
            k += 1
        del w.runs[:k]
        w.start = log_start_offset if not w.runs else w.runs[0].first

    # -- persistence ---------------------------------------------------------

    def snapshot(self) -> ShareState:
        return self._state([(self._w.start, self.read_offset - 1)], True)

    @property
    def has_update(self) -> bool:
        """Whether ``take_update`` has anything to replicate: a changed
        offset, or a start or read offset that moved (an acknowledgement of
        the first records in flight changes no offset left in the window)."""
        return bool(self._w.dirty) or (self._w.start, self.read_offset) != self._reported

    def take_update(self) -> ShareState:
        """What changed since the last call (or the snapshot), to replicate."""
        spans = self._w.take_dirty()
        self._reported = (self._w.start, self.read_offset)
        return self._state(spans, False)

    @classmethod
    def restore(cls, state: ShareState, config: ShareConfig | None = None) -> SharePartition:
        machine = cls(state.start_offset, config)
        machine.apply(state)
        machine._reported = (machine._w.start, machine.read_offset)
        machine._starts_sent = state.batch_starts
        if not state.batch_starts:  # stored before batches were: its ranges, as Kafka
            machine._starts = sorted({b.first_offset for b in state.batches})  # after a move
        return machine

    def apply(self, update: ShareState) -> None:
        """Replay a snapshot or update taken from the leader's machine."""
        w = self._w
        self.advance_log_start(update.start_offset)
        if update.batch_starts:
            self._starts = list(update.batch_starts)
        if w.read_offset < update.read_offset:
            if not update.batch_starts:
                self._note_batch(w.read_offset, update.read_offset)
            w.append(Run(w.read_offset, update.read_offset - 1, RecordState.ARCHIVED))
        for batch in update.batches:
            first = max(batch.first_offset, w.start)
            if first > batch.last_offset:
                continue
            i, j = w.span(first, batch.last_offset)
            for run in w.runs[i:j]:
                run.state, run.count = batch.state, batch.delivery_count
                run.member, run.deadline = batch.member_id, batch.lock_deadline_ms
                run.not_before = batch.not_before_ms
            w.mend(i, j)
        for offset, key in update.group_keys:
            if w.start <= offset < w.read_offset:
                i, _j = w.span(offset, offset)
                w.runs[i].key = key
        self._rebuild()

    # -- internals -----------------------------------------------------------

    def _acquirable(self, run: Run, now_ms: int) -> bool:
        if run.state is not RecordState.AVAILABLE or run.not_before > now_ms:
            return False
        if self.config.ordering_message_group and run.key is not None:
            return self._groups[run.key][0] == run.first
        return True

    def _take(self, first: int, last: int, count: int, member_id: str, now_ms: int,
              taken: list[list[int]]) -> None:
        """Offsets ``first`` .. ``last``, AVAILABLE with ``count`` deliveries,
        acquired by ``member_id``."""
        w = self._w
        i, j = w.span(first, last)
        deadline = now_ms + self.config.record_lock_duration_ms
        for run in w.runs[i:j]:
            run.state, run.member, run.count = RecordState.ACQUIRED, member_id, count + 1
            run.deadline, run.not_before = deadline, -1
        w.mend(i, j)
        heapq.heappush(w.locks, (deadline, first))
        w.touch(first, last)
        if taken and taken[-1][1] == first - 1 and taken[-1][2] == count + 1:
            taken[-1][1] = last
        else:
            taken.append([first, last, count + 1])

    def _offer(self, run: Run, member_id: str, now_ms: int, taken: list[list[int]],
               max_records: int, got: list[int], fetch_end: int | None = None) -> bool:
        """Acquire what ``max_records`` (``got``: taken so far) leaves of
        ``run`` (below ``fetch_end``) if it may be; False when the acquisition
        is complete."""
        if not self._acquirable(run, now_ms):
            return True
        limit = self.config.delivery_count_limit
        last_attempt = limit > 2 and run.count + 1 >= limit
        if last_attempt and got[0]:
            return False  # delivered alone, in a later fetch
        size = 1 if last_attempt else min(run.size, max_records - got[0])
        if fetch_end is not None:
            size = min(size, fetch_end - run.first)
        self._take(run.first, run.first + size - 1, run.count, member_id, now_ms, taken)
        got[0] += size
        return not last_attempt and got[0] < max_records

    def _acquire_known(self, member_id: str, max_records: int, now_ms: int,
                       taken: list[list[int]], fetch_end: int | None = None) -> bool:
        w = self._w
        got = [0]
        i = 0
        checked = -1  # the last offset of the last batch found not throttled
        while i < len(w.runs):
            run = w.runs[i]
            if fetch_end is not None and run.first >= fetch_end:
                return False
            if not self._acquirable(run, now_ms):
                i += 1
                continue
            first, last = self._batch_of(run.first)
            if last > checked and self._throttled(run.first, last, now_ms):
                if not got[0]:  # alone in its fetch, and nothing after it
                    self._take_throttled(run.first, first, last, member_id, now_ms, taken,
                                         fetch_end, max_records)
                return False
            checked = last  # not throttled: nor is the rest of its batch
            after = min(run.last, last) + 1  # a batch at a time: the next may be throttled
            if not self._offer(run, member_id, now_ms, taken, max_records, got,
                               after if fetch_end is None else min(after, fetch_end)):
                return False
            i = w.index(after) if after < w.read_offset else len(w.runs)
        return True

    def _note_batch(self, first: int, end: int | None = None) -> None:
        """Offsets from ``first`` to the read offset (or ``end``) were read
        in one acquisition: a batch (``_starts``); the batches wholly below
        the start offset are forgotten."""
        if (self.read_offset if end is None else end) > first:
            self._starts.append(first)
        keep = bisect_right(self._starts, self._w.start) - 1
        if keep > 0:
            del self._starts[:keep]

    def _batch_of(self, offset: int) -> tuple[int, int]:
        """The first and last offsets of the in-flight batch holding ``offset``."""
        starts = self._starts
        k = bisect_right(starts, offset)
        first = starts[k - 1] if k else self._w.start
        last = starts[k] - 1 if k < len(starts) else self.read_offset - 1
        return first, last

    def _throttle_count(self) -> int:
        """Kafka's throttling threshold: half the delivery limit rounded up, at least 2."""
        return max(2, -(-self.config.delivery_count_limit // 2))

    def _throttled(self, first: int, last: int, now_ms: int) -> bool:
        """Whether a record acquirable in ``first`` .. ``last`` (of one batch)
        was delivered ``_throttle_count`` times or more."""
        at = self._throttle_count()
        return any(run.count >= at and self._acquirable(run, now_ms)
                   for _a, _b, run in self._w.pieces(first, last))

    def _take_throttled(self, offset: int, first: int, last: int, member_id: str,
                        now_ms: int, taken: list[list[int]], fetch_end: int | None,
                        max_records: int) -> None:
        """Acquire from a throttled batch (``first`` .. ``last``) from
        ``offset``, as Kafka isolates a record that keeps coming back: from
        the first record delivered ``_throttle_count`` times or more, at most
        the batch's size halved per delivery past the threshold (at least
        one), and a record about to get its last delivery alone."""
        limit, at = self.config.delivery_count_limit, self._throttle_count()
        end = last if fetch_end is None else min(last, fetch_end - 1)
        quota: int | None = None
        got = 0
        since = 0  # records taken before the quota applied (from the first throttled one)
        while offset <= end and got < max_records:
            run = self._w.at(offset)
            if run is None:
                return
            if not self._acquirable(run, now_ms):
                offset = run.last + 1
                continue
            final = limit > 2 and run.count + 1 == limit
            if final and got:
                return
            if quota is None and run.count >= at:
                quota = max(1, (last - first + 1) >> (run.count - at + 1))
                since = got
            n = 1 if final else min(min(run.last, end) - offset + 1, max_records - got)
            if quota is not None:
                n = min(n, quota - (got - since))
            self._take(offset, offset + n - 1, run.count, member_id, now_ms, taken)
            got += n
            if final or (quota is not None and got - since >= quota):
                return
            offset += n

    def _acquire_new(self, member_id: str, max_records: int, now_ms: int,
                     records: Iterable[tuple[int, bytes | None]], read_end_offset: int | None,
                     taken: list[list[int]]) -> None:
        """Learn and offer the records read; a record without a group key is
        always acquirable (acquired at once), so a stretch of them only moves
        the end of one run (``tail``): a few operations per record."""
        w = self._w
        got = [sum(last - first + 1 for first, last, _c in taken)]
        deadline = now_ms + self.config.record_lock_duration_ms
        tail: Run | None = None  # the run the records join, acquired in this call
        grown = -1  # the first offset it grew by
        limit = self.read_limit_offset()
        complete = False
        for offset, key in records:
            if tail is not None:
                if key is None and offset == tail.last + 1 and offset < limit:
                    tail.last = offset
                    got[0] += 1
                    if got[0] >= max_records:
                        complete = True
                        break
                    continue
                grown_by(w, tail, grown, taken)
                tail = None
            if offset < w.read_offset:
                continue
            self._learn_gaps(offset)
            limit = self.read_limit_offset()
            if offset >= limit:
                return
            if key is None:
                w.append(Run(offset, offset, RecordState.ACQUIRED, 1, member_id, deadline))
                tail, grown = w.runs[-1], offset
                got[0] += 1
                if got[0] >= max_records:
                    complete = True
                    break
                continue
            run = Run(offset, offset, RecordState.AVAILABLE, key=key)
            w.runs.append(run)
            w.touch(offset, offset)
            self._groups.setdefault(key, deque()).append(offset)
            if not self._offer(run, member_id, now_ms, taken, max_records, got):
                return
        if tail is not None:
            grown_by(w, tail, grown, taken)
        if not complete:
            self._learn_gaps(w.read_offset if read_end_offset is None else read_end_offset)

    def _learn_gaps(self, end: int) -> None:
        """The offsets from the read offset to ``end`` (within the window's
        limit) hold no record: archived unseen."""
        w = self._w
        while w.read_offset < end and w.read_offset < self.read_limit_offset():
            if not w.runs:  # all of it would be archived and left behind at once
                w.start = end
                return
            last = min(end, self.read_limit_offset()) - 1
            w.touch(w.read_offset, last)
            w.append(Run(w.read_offset, last, RecordState.ARCHIVED))
            w.drop_terminal_prefix()

    def _check_ack(self, member_id: str, first: int, last: int, ack: int,
                   plan: list[tuple[int, int, int]]) -> ErrorCode:
        """Add ``first`` .. ``last`` acknowledged as ``ack`` to ``plan`` (gaps
        acknowledged as gaps left out), or the error that refuses it all."""
        if first > last:
            return ErrorCode.none
        for a, b, run in self._w.pieces(first, last):
            if run.state is RecordState.ARCHIVED and not run.count and ack == AckType.GAP:
                continue  # a gap acknowledged as one
            if run.state is not RecordState.ACQUIRED or run.member != member_id:
                return ErrorCode.invalid_record_state
            if plan and plan[-1][1] == a - 1 and plan[-1][2] == ack:
                plan[-1] = (plan[-1][0], b, ack)
            else:
                plan.append((a, b, ack))
        if last >= self._w.read_offset:
            # never handed out (F24): Kafka 4.4 answers INVALID_REQUEST past
            # what it holds in flight, INVALID_RECORD_STATE when it holds nothing
            return ErrorCode.invalid_request if self._w.runs else ErrorCode.invalid_record_state
        return ErrorCode.none

    def _apply_ack(self, first: int, last: int, ack: AckType, now_ms: int) -> None:
        if ack is AckType.RENEW:
            w = self._w
            i, j = w.span(first, last)
            for run in w.runs[i:j]:
                run.deadline = now_ms + self.config.record_lock_duration_ms
            w.mend(i, j)
            for _a, _b, run in w.pieces(first, last):
                w.time(run)
            w.touch(first, last)
        elif ack is AckType.RELEASE:
            self._release(first, last, now_ms)
        elif ack is AckType.ACCEPT:
            self._finish(first, last, RecordState.ACKNOWLEDGED)
        else:
            if ack is AckType.REJECT:
                for _a, _b, run in self._w.pieces(first, last):
                    self._dead.extend(DeadLetter(o, run.count, REJECTED)
                                      for o in range(max(_a, first), _b + 1))
            self._finish(first, last, RecordState.ARCHIVED)

    def _release(self, first: int, last: int, now_ms: int) -> None:
        """RELEASE or lock expiry (``now_ms`` is then the deadline, so the
        backoff does not depend on the timer's lateness) of ACQUIRED records:
        available again, or archived at the limit."""
        limit = self.config.delivery_count_limit
        for a, b, run in list(self._w.pieces(first, last)):
            count = run.count
            if count >= limit:
                self._finish(a, b, RecordState.ARCHIVED)
                self._dead.extend(DeadLetter(o, count, DELIVERY_LIMIT)
                                  for o in range(a, b + 1))
            else:
                backoff_ms = self.config.backoff_ms(count)
                self._make_available(a, b, now_ms + backoff_ms if backoff_ms else -1)

    def _make_available(self, first: int, last: int, not_before_ms: int) -> None:
        w = self._w
        i, j = w.span(first, last)
        for run in w.runs[i:j]:
            run.state, run.member, run.deadline = RecordState.AVAILABLE, None, -1
            run.not_before = not_before_ms
        w.mend(i, j)
        if not_before_ms >= 0:
            for _a, _b, run in w.pieces(first, last):
                w.time(run)
        w.touch(first, last)

    def _finish(self, first: int, last: int, state: RecordState) -> None:
        w = self._w
        i, j = w.span(first, last)
        for run in w.runs[i:j]:
            run.state, run.member, run.deadline, run.not_before = state, None, -1, -1
            if run.key is not None:
                self._ungroup(run.first, run.key)
        w.mend(i, j)
        w.touch(first, last)

    def _ungroup(self, offset: int, key: bytes) -> None:
        offsets = self._groups[key]
        if offsets[0] == offset:
            offsets.popleft()
        else:
            offsets.remove(offset)
        if not offsets:
            del self._groups[key]

    def _rebuild(self) -> None:
        w = self._w
        self._groups = {}
        for run in w.runs:
            if run.key is not None and run.state not in TERMINAL:
                self._groups.setdefault(run.key, deque()).append(run.first)
        w.rebuild_timers()
        w.drop_terminal_prefix()

    def _state(self, spans: list[tuple[int, int]], whole: bool) -> ShareState:
        """The state of ``spans``; the batch starts if ``whole`` or changed
        since the last update (an update without them leaves them as they were)."""
        batches, keys = self._w.batches(spans)
        starts = tuple(self._starts[max(0, bisect_right(self._starts, self._w.start) - 1):])
        if not whole:
            starts, self._starts_sent = (() if starts == self._starts_sent else starts), starts
        return ShareState(self._w.start, self.read_offset,
                          tuple(StateBatch(a, b, *fields) for a, b, fields in batches),
                          tuple(keys), starts)


def _check_shape(batches: Sequence[AckBatch]) -> ErrorCode:
    previous_last = -1
    for first, last, types in batches:
        count = last - first + 1
        if first < 0 or count < 1 or len(types) not in (1, count) or first <= previous_last:
            return ErrorCode.invalid_request
        if not ACK_TYPES.issuperset(types):
            return ErrorCode.invalid_request
        previous_last = last
    return ErrorCode.none
