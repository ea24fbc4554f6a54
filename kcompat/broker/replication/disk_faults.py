"""Disk faults the broker survives: a full disk, EIO on a write or an fsync.

Theory of operation
-------------------
docs/architecture.md, principle 10: a full disk (ENOSPC) or a failed write or fsync (EIO) of a
partition's log takes *that partition* offline for writes — Produce answers
KAFKA_STORAGE_ERROR (56), as Kafka answers for a partition in an offline log
directory — while the broker stays up: reads of what is stored, Metadata,
heartbeats and the partitions whose writes succeed carry on. The partition
comes back by itself: after a backoff the failed write is tried again, and
once it and its fsync succeed the partition takes writes again. One line is
logged when a partition goes offline and one when it is back, and every
failure counts in ``kcompat_storage_errors_total{kind,op}`` (kind: enospc,
eio or other; op: write, fsync or open); ``kcompat_storage_offline_partitions``
is how many are offline now.

A partition whose log cannot even be opened here — the metadata record that
creates it (or moves a replica here) applied while the disk is full — has no
replica on this broker until a retry after the backoff opens it
(``open_failed``, called by ``controller.metadata_apply``): the metadata log
goes on, and so does everything else.

Where the fault is caught. Every write of a partition log happens in one of
two places of the replication runtime, and both catch ``OSError`` here (the
cores — ``kcompat.raft``, the pure parts of ``kcompat.log`` — never see one);
a third place syncs:

* the leader's pre-write of a proposal (``propose_batch``, ``write_now``):
  the record is refused before anyone is answered — a ``StorageError``, which
  Produce answers KAFKA_STORAGE_ERROR and which the coordinators and the
  broker's own writers take as the ``NotLeaderError`` it subclasses (retry,
  re-discover), so none of their tasks dies of a full disk;
* the Raft driver's Ready round (``runtime._round``): the write of a Ready
  (``write``) and the round's fsync pass (``Flusher.sync_each``, which
  reports failures per target, so one partition's bad disk does not fail the
  others' round);
* and, under ``kcompat.flush.mode=always``, the produce path's own group
  commit for acks=0/1 (``Flusher.sync``): the produce answers
  KAFKA_STORAGE_ERROR and the handler reports the failure here (``fail``), so
  the partition is written again from its synced end like any other.

What the Raft core is told. Raft may count an entry towards the commit, send
it or acknowledge it only once it is durable, and the core learns that only
through ``advance``. A Ready whose write or fsync failed is therefore *not*
advanced: it is held here (``_Offline.ready``), its messages are not sent, its
group gets no new Ready and takes no proposal until the retry. Waiters for a
commit of that group (``wait_committed``) answer KAFKA_STORAGE_ERROR at once
instead of waiting for their timeout. Nothing acknowledged is lost: what an
acknowledgement promised was made durable by an fsync that succeeded before
it; what a failed round wrote was never acknowledged. An append answered
KAFKA_STORAGE_ERROR may still be stored by the retry (its entry is in the
Raft log already), exactly as one answered REQUEST_TIMED_OUT may: an
idempotent producer's retry finds it as a duplicate.

The retry (``due``): after the backoff (``BACKOFF_MIN_S`` doubling to
``BACKOFF_MAX_S``) the log is written again *from its synced end*: the end
the last good fsync of that partition log covered (``synced``, noted when
the round's pass began). What lies between it and the end the core holds
stable (``raft.log.stable_end``: a lone replica's Readies without a waiter
are advanced unsynced) is read back, the log is cut to the synced end
(``storage.trim``) and that stretch appended again, then the held Ready's
entries, truncation and hard state are written anew and fsynced in the
round. Writing again rather than only syncing again matters: after a failed
fsync Linux may have dropped the dirty pages and marked them clean, so a
second fsync succeeds without the data (PostgreSQL's "fsyncgate"), and a
power cut then finds zeros in the middle of the log — recovery would cut
every later batch, acknowledged ones included. Rewritten pages are dirty
again. The simulator's disk fails syncs that way (``memory_store``), and
the simulator catches a retry that only syncs again. A group that failed
fsyncs whatever it writes next (``sync_wanted``), even as a lone replica
with no waiter: an idempotent producer's retry of a refused append finds
the entry as a duplicate and is answered once it is committed.
For the same reason a failed sync of the hard-state journal cuts it back to
its last good sync (``HardStateJournal.rewind``) and every group whose term
or vote was in the round is held back with it. A torn tail cannot stay
behind: a failed append cuts what it wrote (``LogSegment.append``, the index
and journal writes likewise), and a crash's torn tail is cut by recovery.
A pre-write that failed holds no Ready, but its entry is in the core's log
already: the group is offline until its backoff passes, then first writes
the entries missing from storage (``_catch_up``: the producer state must
know the refused append, or an idempotent retry of it would be written a
second time), then takes proposals again on trial (``probing``); the partition is
back (one log line) once a Ready of it is made durable and advanced, and a
failure meanwhile continues the same episode with a longer backoff.

Not done here: a leader of a replicated partition that stays offline does not
hand its leadership to a healthy replica (Kafka moves leaders off an offline
log directory); its followers keep it while the broker heartbeats, so such a
partition waits for the disk, as a lone replica does. The metadata log is
handled the same way: a controller whose metadata writes fail stalls the
controller until its disk recovers.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio
from prometheus_client import CollectorRegistry, Counter, Gauge

from kcompat.broker.replication.group import Group, NotLeaderError
from kcompat.raft import Ready
from kcompat.raft.storage import write_ready

if TYPE_CHECKING:
    from kcompat.broker.replication.hard_states import HardStateJournal
    from kcompat.broker.storage.flusher import Flusher, Syncable
    from kcompat.log.partition_log import PartitionLog

log = logging.getLogger("kcompat.storage")

BACKOFF_MIN_S = 0.25
BACKOFF_MAX_S = 4.0


class StorageError(NotLeaderError, OSError):
    """This partition's log cannot be written now (KAFKA_STORAGE_ERROR). A
    ``NotLeaderError`` for the broker's own writers: they retry or re-discover."""


def error_kind(error: OSError) -> str:
    if error.errno == errno.ENOSPC:
        return "enospc"
    if error.errno == errno.EIO:
        return "eio"
    return "other"


@dataclass(eq=False)
class _Offline:
    group: Group
    since: float
    retry_at: float
    backoff: float
    ready: Ready | None = None  # the Ready whose write or fsync failed, not advanced
    failures: int = 1
    probing: bool = False  # taking writes again on trial: back once a Ready advances


@dataclass(eq=False)
class _Reopen:
    retry: Callable[[], None]
    since: float
    retry_at: float
    backoff: float


class DiskFaults:
    def __init__(self, node_id: int, touch: Callable[[Group], None],
                 clock: Callable[[], float] = trio.current_time) -> None:
        self.node_id = node_id
        self.touch = touch  # the runtime collects the group's Ready next round
        self.clock = clock
        self.offline: dict[int, _Offline] = {}
        self.counts: dict[tuple[str, str], int] = {}  # (kind, op) -> failures
        # group id -> the log end the last good fsync of its partition log covered
        self.synced: dict[int, int] = {}
        # partitions whose log could not be opened here: name -> the retry
        self.reopens: dict[str, _Reopen] = {}
        self._counter: Any = None

    def export(self, registry: CollectorRegistry) -> None:
        self._counter = Counter(
            "kcompat_storage_errors", "Failed writes and fsyncs of partition logs (the "
            "partition answers KAFKA_STORAGE_ERROR until a retry succeeds), per errno kind "
            "and operation", ["kind", "op"], registry=registry)
        Gauge("kcompat_storage_offline_partitions", "Partitions (Raft groups) offline for "
              "writes after a failed write or fsync, until a retry succeeds",
              registry=registry).set_function(lambda: len(self.offline) + len(self.reopens))

    @property
    def pending(self) -> bool:
        """A group held back or a partition to open again: ``due`` has work."""
        return bool(self.offline or self.reopens)

    def open_failed(self, name: str, error: OSError, retry: Callable[[], None]) -> None:
        """Opening partition ``name``'s log here failed (a full disk, EIO,
        e.g. applying the record that creates it): it has no replica here
        until ``retry``, called after a backoff, opens it."""
        self._count(error, "open")
        now = self.clock()
        entry = self.reopens.get(name)
        if entry is None:
            entry = self.reopens[name] = _Reopen(retry, now, now, BACKOFF_MIN_S)
            log.error("node %d: opening %s failed: %s; retrying", self.node_id, name, error)
        else:
            entry.backoff = min(entry.backoff * 2, BACKOFF_MAX_S)
            entry.retry = retry
        entry.retry_at = now + entry.backoff

    def _reopen(self, now: float) -> None:
        for name, entry in list(self.reopens.items()):
            if entry.retry_at > now:
                continue
            try:
                entry.retry()  # calls ``open_failed`` again if it fails
            except OSError as e:
                self.open_failed(name, e, entry.retry)
            if entry.retry_at <= now:
                del self.reopens[name]
                log.warning("node %d: %s opened after %.1f s", self.node_id, name,
                            now - entry.since)

    def _count(self, error: OSError, op: str) -> None:
        kind = error_kind(error)
        self.counts[(kind, op)] = self.counts.get((kind, op), 0) + 1
        if self._counter is not None:
            self._counter.labels(kind, op).inc()

    def is_offline(self, group: Group) -> bool:
        entry = self.offline.get(group.gid)
        return entry is not None and not entry.probing

    def check(self, group: Group) -> None:
        """Raise ``StorageError`` if ``group`` takes no writes now."""
        if self.is_offline(group):
            raise StorageError(errno.EIO, f"{group.name} is offline for writes after a disk "
                                          f"error (retrying)")

    def fail(self, group: Group, error: OSError, op: str, ready: Ready | None = None) -> None:
        """A write or fsync of ``group`` failed: count and log it, hold ``ready``
        back and take the group offline until its backoff passes."""
        self._count(error, op)
        now = self.clock()
        entry = self.offline.get(group.gid)
        if entry is None:
            entry = self.offline[group.gid] = _Offline(group, now, now, BACKOFF_MIN_S)
            log.error("node %d: %s of %s failed: %s; the partition answers "
                      "KAFKA_STORAGE_ERROR to writes until a retry succeeds", self.node_id, op,
                      group.name, error)
        else:
            entry.backoff = min(entry.backoff * 2, BACKOFF_MAX_S)
            entry.failures += 1
            log.debug("node %d: %s of %s failed again: %s", self.node_id, op, group.name, error)
        entry.retry_at = now + entry.backoff
        entry.probing = False
        # whatever it writes next is fsynced, even a lone replica's without a
        # waiter: an idempotent retry of a refused append finds its entry as a
        # duplicate and is answered once it is committed
        group.sync_wanted = True
        if ready is not None:
            entry.ready = ready
        group.notify()  # its commit waiters answer KAFKA_STORAGE_ERROR

    def _track(self, group: Group) -> None:
        """Start tracking ``group``'s synced end: what its log held before this
        process wrote to it counts as synced."""
        if group.gid not in self.synced:
            self.synced[group.gid] = group.raft.log.stable_end

    def _lower_synced(self, group: Group, end: int) -> None:
        if self.synced.get(group.gid, end) > end:
            self.synced[group.gid] = end

    def write_now(self, group: Group, write: Callable[[], None]) -> None:
        """A leader's pre-write; ``StorageError`` (the group offline) if it fails."""
        self._track(group)
        try:
            write()
        except OSError as e:
            self.fail(group, e, "write")
            raise StorageError(e.errno, f"{group.name}: {e.strerror or e}") from e

    def write(self, group: Group, ready: Ready) -> bool:
        """Steps 1-4 of the Ready contract; False (held back) if they fail."""
        self._track(group)
        try:
            self._write(group, ready)
        except OSError as e:
            self.fail(group, e, "write", ready)
            return False
        return True

    def due(self) -> list[tuple[Group, Ready]]:
        """The held Readies whose backoff passed, written again from the durable
        end (see the module docstring): they join this round and its fsync. A
        group offline after a failed pre-write takes writes again."""
        now = self.clock()
        if self.reopens:
            self._reopen(now)
        out: list[tuple[Group, Ready]] = []
        for gid, entry in list(self.offline.items()):
            group = entry.group
            if group.removed:
                del self.offline[gid]
                continue
            if entry.probing or entry.retry_at < 0 or entry.retry_at > now:
                continue
            ready = entry.ready
            if ready is None:  # a failed pre-write: proposals may try again
                if not self._catch_up(group, rewrite=True):
                    continue
                if group.raft.has_ready():
                    entry.probing = True
                    self.touch(group)
                else:
                    self.back(group)  # nothing of it is waiting to be written
                continue
            try:
                self._rewrite(group)
                self._write(group, ready)
            except OSError as e:
                self.fail(group, e, "write")
                continue
            entry.ready = None
            entry.retry_at = -1.0  # in this round's fsync
            group.sync_wanted = True  # its entries are fsynced whoever waits
            out.append((group, ready))
        return out

    def _write(self, group: Group, ready: Ready) -> None:
        storage = group.storage
        if ready.snapshot is not None:
            self._lower_synced(group, ready.snapshot.id.end)
        if ready.truncate_from is not None:
            self._lower_synced(group, ready.truncate_from)
        write_ready(storage, ready)
        end = group.raft.log.written_end
        storage.trim(end)
        self._lower_synced(group, end)

    def _rewrite(self, group: Group) -> None:
        """Cut the log back to its synced end and write again what lies between
        it and the end the core holds stable (read back from the page cache:
        a failed fsync may have dropped those pages from the disk)."""
        storage = group.storage
        stable = group.raft.log.stable_end
        # (from a segment rolled out before the failed pass too: a roll syncs
        # nothing, the pass synced it — ``partition_log``)
        start = max(min(stable, self.synced.get(group.gid, stable)),
                    storage.plog.log_start_offset)
        again = storage.entries(start, stable, 1 << 62) if start < stable else []
        storage.trim(start)
        self._lower_synced(group, start)
        storage.append(again)

    async def sync(self, flusher: Flusher, batch: list[tuple[Group, Ready]],
                   durable: list[Syncable], logs: list[PartitionLog],
                   journal: HardStateJournal) -> list[tuple[Group, Ready]]:
        """The round's fsync pass; the groups whose part of it succeeded (the
        others are held back). A partition log synced whole moves its synced
        end to where it ended when the pass began."""
        ends = {id(plog): plog.log_end_offset for plog in logs}
        failed = await flusher.sync_each(*durable, *logs)
        for group, _ready in batch:
            plog = group.storage.plog
            end = ends.get(id(plog))
            if end is not None and id(plog) not in failed:
                # (a stale pre-write cut meanwhile: no further than the log now ends)
                self.synced[group.gid] = min(end, plog.log_end_offset)
        return self.after_sync(batch, failed, journal)

    def after_sync(self, batch: list[tuple[Group, Ready]], failed: dict[int, OSError],
                   journal: HardStateJournal) -> list[tuple[Group, Ready]]:
        """The groups of the round whose fsync pass succeeded; the others are
        held back (``failed``: by id of the target, ``Flusher.sync_each``)."""
        if not failed:
            return batch
        journal_error = failed.get(id(journal))
        if journal_error is not None:
            journal.rewind()
        kept = []
        for group, ready in batch:
            storage = group.storage
            error = failed.get(id(storage.plog)) or failed.get(id(storage))
            if error is None and ready.hard_state is not None and storage.journal is not None:
                error = journal_error
            if error is None:
                kept.append((group, ready))
            else:
                self.fail(group, error, "fsync", ready)
        return kept

    def _catch_up(self, group: Group, rewrite: bool = False) -> bool:
        """Write the entries of the core's log that a failed pre-write left out
        of storage, before the group takes proposals again: a retry must find
        its first attempt in the producer state (a duplicate), not be
        written a second time. ``rewrite``: the log from its synced end first
        (an fsync may have failed: the produce path's group commit). False
        (offline again) if that fails."""
        try:
            if rewrite:
                self._rewrite(group)  # what a failed fsync may have dropped
            for entry in list(group.raft.log.unstable):
                group.storage.append_now(entry)
        except OSError as e:
            self.fail(group, e, "write")
            return False
        return True

    def advanced(self, group: Group) -> None:
        """``group``'s Ready was made durable and advanced: a group on trial or
        retried in this round is back (a Ready of a round already under way
        when the group went offline does not end its backoff)."""
        entry = self.offline.get(group.gid)
        if entry is not None and (entry.probing or entry.retry_at < 0) and \
                self._catch_up(group):
            self.back(group)

    def back(self, group: Group) -> None:
        entry = self.offline.pop(group.gid, None)
        if entry is not None:
            log.warning("node %d: %s takes writes again after %.1f s (%d failed attempts)",
                        self.node_id, group.name, self.clock() - entry.since, entry.failures)
