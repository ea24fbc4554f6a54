"""The log of one partition: an ordered list of segments, the last one active.

Theory of operation
-------------------
Offsets: ``log_start_offset`` is the first offset a reader may ask for (raised
by DeleteRecords and retention, persisted in ``log-start-offset``);
``log_end_offset`` is the offset the next appended batch gets. Every batch
lives in exactly one segment; segments are sorted by base offset and only the
last (active) one is written.

Append (the hot path) never copies the batch: it is written as four parts —
the new baseOffset, the original batchLength, the new partitionLeaderEpoch, and
the original bytes from ``magic`` on — both rewritten fields lying outside the
CRC. A new segment is rolled first when the batch would push the active one
past ``segment_bytes`` or its timestamp is more than ``segment_ms`` after the
active segment's first batch (record time, as Kafka rolls). Rolling syncs
nothing (an fsync and a directory sync on the broker's event loop held it
up to 93 ms, issue 31): the old segment's index entries are written, and
its files and the new segment's directory entry join what the next sync pass
makes durable (``dirty_files``, below). So any segment rolled since the last
sync pass may hold unsynced data — all of them written since the last clean
close, which syncs every one before it writes the producer snapshot that
recovery trusts the segments below (``recovery``). Recovery finds a rolled
segment that lost its tail by its end: a new segment starts where the old
one ended. Not in a log that is or was compacted, whose segments may end
short of the next (the cleaner drops batches); there a roll still fsyncs the
old segment first, and only the directory sync is deferred. After the
write, the producer state table and the leader epoch cache learn the batch.

The epoch checkpoint (``leader-epoch-checkpoint``) is not rewritten when an
append starts a new epoch — the first append of every leadership, which on
the broker's event loop cost two fsyncs (75–90 ms on a busy disk, issue 31).
It only has to be right where recovery trusts it, and recovery trusts it
only below the segment of the last clean close's producer snapshot: after a
crash every segment from there is scanned and its epochs rebuilt from the
batches themselves (``recovery``). So the new epoch stays in memory
(``_epochs_unwritten``) until the next rewrite that happens anyway (a
truncation, a new log start) or the clean close, which writes it before its
snapshot and marker. (Kafka writes it at each new epoch: its recovery trusts
the checkpoint up to the recovery point, ours up to the last clean close.)

Durability is the caller's choice: ``dirty_files`` hands out what was
written since the last call — the active segment's file, every segment rolled
out since (``deferred_io.RolledSegment``), the directory entries not synced
yet — and the broker syncs them in a worker thread, one fsync serving many
produce requests; an acknowledgement that waits for that pass covers a batch
whose segment was rolled out before the pass ran. ``flush`` syncs all of it
synchronously. All file access goes through the ``FileStore`` the log was
opened with (``store``).

Deletion is by whole segments: retention by time (a segment's max timestamp,
or its file mtime when it has none, older than ``retention_ms``), by size
(oldest first while the rest still reaches ``retention_bytes``), and
everything wholly below ``log_start_offset`` (DeleteRecords). The segments
leave the list, the log start moves and the files are closed and renamed
``.deleted`` at once, so no reader finds a deleted segment; writing
``log-start-offset``, the unlinks and the directory sync are file work left
to ``defer_io`` (the broker's flusher runs it in a worker thread;
``take_deferred_io``), or done at once when the log has none. A clean close
does what is left. A crash before that work finds the old start (and maybe
the segments, or their ``.deleted`` files, which recovery removes): never a
start past a record that was kept. (``deferred_io.StartOffsetFile``: a
truncation writes the start on the log's thread meanwhile.)

Disk errors (``OSError`` from the store: a full disk, EIO) never leave the
state in memory half changed: an append that fails changes nothing (the
segment cuts what reached the file), and a truncation or reset completes its
state in memory — segments, epochs, producer state — before it raises the
first failure of its I/O (``deferred_io.Steps``); the caller (the broker's
``disk_faults``) retries the writes.

Reads return bytes of a single segment starting at the batch that holds the
requested offset: Kafka's fetch semantics, including min-one-batch and a cut
trailing batch. Opening runs ``recovery.recover``; see that module.
"""

from __future__ import annotations

import errno
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kcompat.log import cleaner
from kcompat.log.config import LogConfig
from kcompat.log.deferred_io import (
    DirSync,
    Removal,
    RolledSegment,
    StartOffsetFile,
    Steps,
    retire,
)
from kcompat.log.epoch_cache import LeaderEpochCache
from kcompat.log.files import (
    CLEAN_SHUTDOWN_FILE,
    LEADER_EPOCH_FILE,
    LOG_START_OFFSET_FILE,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    TXN_INDEX_SUFFIX,
    atomic_write,
    offset_path,
)
from kcompat.log.recovery import prune_snapshots, rebuild_transactions, recover
from kcompat.log.retention import below_start_count, expired_count
from kcompat.log.segment import LogSegment
from kcompat.log.store import OS_STORE, Durable, FileStore, StoredFile
from kcompat.log.txn_index import AbortedTxn, TxnIndex
from kcompat.txn.producer_state import ProducerStateTable
from kcompat.wire.batch import BatchError, BatchHeader, epoch_field, iter_headers, offset_field
from kcompat.wire.records import marker_aborts

REPLAY_CHUNK_BYTES = 1 << 20


class OffsetOutOfRange(Exception):
    """An offset outside [log_start_offset, log_end_offset] (OFFSET_OUT_OF_RANGE)."""

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(f"offset {offset} is outside [{log_start_offset}, {log_end_offset}]")
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


@dataclass(frozen=True, slots=True)
class FileSlice:
    """``length`` bytes at ``position`` of ``file``."""

    file: StoredFile
    position: int
    length: int
    first: BatchHeader | None = None  # the header of the batch at ``position``, if read

    def read(self) -> bytes:
        return self.file.pread(self.length, self.position)


class PartitionLog:
    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: list[LogSegment],
        log_start_offset: int,
        producers: ProducerStateTable,
        epochs: LeaderEpochCache,
        txn_indexes: dict[int, TxnIndex] | None = None,
        store: FileStore = OS_STORE,
    ) -> None:
        self.directory = directory
        self.store = store
        self._config = config
        self._segments = segments
        self._log_start_offset = log_start_offset
        self.producers = producers
        self._epochs = epochs
        self._epochs_unwritten = False  # an append's new epoch is not in the checkpoint yet
        self._txn_indexes = txn_indexes or {}
        # by id of the file: written since the last sync pass (a rolled
        # segment's as its ``RolledSegment``)
        self._dirty: dict[int, Durable] = {}
        self._unsynced_dirs: tuple[Path, ...] = ()  # directory entries not synced yet
        self._rolled: list[RolledSegment] = []  # rolled out, maybe not synced yet
        self._removals: list[Path] = []  # deleted segments' renamed files, to unlink
        self._start_file = StartOffsetFile(directory / LOG_START_OFFSET_FILE, store,
                                           lambda: self._log_start_offset, log_start_offset)
        # runs the deferred file work later, off this thread (the broker's
        # ``Flusher.defer``); None: at once, here
        self.defer_io: Callable[[PartitionLog], None] | None = None
        self._closed = False
        self._cleaning = False  # a cleaner pass holds a plan (no second one)
        self.recovered_truncation = False  # open() cut off a torn or corrupt tail
        self._gaps = config.compact  # is or was compacted: a roll syncs (see the module)

    @classmethod
    def open(cls, directory: Path, config: LogConfig, now_ms: int,
             store: FileStore = OS_STORE) -> PartitionLog:
        """Open (creating if missing) and recover the log in ``directory``."""
        r = recover(directory, config, now_ms, store)
        log = cls(directory, config, r.segments, r.log_start_offset, r.producers, r.epochs,
                  r.txn_indexes, store)
        log.recovered_truncation = r.truncated
        log._unsynced_dirs = r.unsynced_dirs
        log._gaps = r.gaps
        return log

    # -- state ---------------------------------------------------------------

    @property
    def config(self) -> LogConfig:
        return self._config

    @config.setter
    def config(self, config: LogConfig) -> None:
        """A changed configuration (a topic's AlterConfigs, a new dynamic
        broker default) reaches every segment at once: the active one rolls
        by the new ``segment.ms`` / ``segment.bytes``."""
        self._config = config
        for segment in self._segments:
            segment.config = config
        if config.compact and not self._gaps:  # recovery will accept gaps from now on
            self._gaps = True
            for rolled in self._rolled:
                if not rolled.done:
                    rolled.sync()

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self._segments)

    @property
    def segment_base_offsets(self) -> list[int]:
        return [s.base_offset for s in self._segments]

    def segment_written_ms(self) -> list[tuple[int, int]]:
        """(base offset, file mtime) of every segment, oldest first: the mtime
        bounds from above the time any batch of the segment was written here."""
        return [(s.base_offset, s.written_ms()) for s in self._segments]

    @property
    def leader_epochs(self) -> list[tuple[int, int]]:
        """The leader epoch cache: (epoch, start offset) pairs, oldest first."""
        return list(self._epochs.entries)

    @property
    def latest_epoch(self) -> int:
        return self._epochs.latest_epoch

    # -- append --------------------------------------------------------------

    def append(
        self, batch: memoryview, header: BatchHeader, leader_epoch: int, now_ms: int,
        base_offset: int | None = None,
    ) -> BatchHeader:
        """Append one validated batch at ``log_end_offset`` (or at ``base_offset``
        past it: a replica copying a leader's cleaned log, whose gaps it keeps)
        stamped with ``leader_epoch``; returns its header with the assigned offsets."""
        assert len(batch) == header.size, "batch and header disagree on the size"
        active = self._segments[-1]
        at = active.next_offset if base_offset is None else base_offset
        assert at >= active.next_offset, f"append at {at} below the log end {active.next_offset}"
        if active.would_overflow(header.size, at + header.last_offset_delta) or \
                active.roll_due(now_ms, header.max_timestamp):
            active = self._roll(now_ms)
        new_header = header.placed(at, leader_epoch)
        parts: list[bytes | memoryview] = [
            offset_field(new_header.base_offset),
            batch[8:12],
            epoch_field(leader_epoch),
            batch[16:],
        ]
        active.append(parts, new_header)
        self._mark_dirty(active)
        if new_header.is_control:
            self._apply_marker(batch, new_header, active.base_offset)
        else:
            self.producers.apply(new_header)
        if self._epochs.assign(leader_epoch, new_header.base_offset):
            self._epochs_unwritten = True  # written at the clean close (see the module)
        return new_header

    def _apply_marker(self, batch: memoryview, header: BatchHeader, segment_base: int) -> None:
        try:
            aborts = marker_aborts(batch)
        except BatchError:
            aborts = True
        done = self.producers.apply(header, aborts)
        if done is not None and done.aborted:
            lso = self.producers.first_unstable_offset()
            self._txn_index(segment_base).append(AbortedTxn(
                done.producer_id, done.first_offset, done.last_offset,
                done.first_offset if lso is None else min(lso, done.first_offset)))

    def _txn_index(self, segment_base: int) -> TxnIndex:
        index = self._txn_indexes.get(segment_base)
        if index is None:
            path = offset_path(self.directory, segment_base, TXN_INDEX_SUFFIX)
            index = self._txn_indexes[segment_base] = TxnIndex.load(path, self.store)
        return index

    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction (bounds the LSO)."""
        return self.producers.first_unstable_offset()

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start, end), oldest first."""
        found: list[AbortedTxn] = []
        for base in sorted(self._txn_indexes):
            found += self._txn_indexes[base].overlapping(start, end)
        return found

    def active_first_timestamp_ms(self) -> int | None:
        """When the active segment's first batch was written (None: it is empty)."""
        active = self._segments[-1]
        if not active.size_bytes:
            return None
        return active.first_batch_timestamp if active.first_batch_timestamp >= 0 \
            else active.created_ms

    def roll(self, now_ms: int) -> None:
        """Start a new active segment now (if the active one holds data)."""
        if self._segments[-1].size_bytes:
            self._roll(now_ms)

    def _roll(self, now_ms: int) -> LogSegment:
        """A new active segment. The old segment's files (unless the log is or
        was compacted: then here) and the new one's directory entry are
        synced by the next sync pass (see the module). A failure (a full
        disk) changes nothing."""
        old = self._segments[-1]
        if self._gaps:  # (a compacted log: see the module)
            old.fsync()
            self._sync_txn_index(old.base_offset)
            self._forget(old)
        else:
            old.write_indexes()
        segment = LogSegment.create(self.directory, old.next_offset, self.config, now_ms,
                                    self.store)
        self._segments.append(segment)
        if not self._gaps:
            rolled = RolledSegment(old)
            self._rolled = [r for r in self._rolled
                            if not r.done and r.segment.file is not None]
            self._rolled.append(rolled)
            if old.file is not None:
                self._dirty[id(old.file)] = rolled
        self._dir_unsynced(self.directory)
        return segment

    def _dir_unsynced(self, directory: Path) -> None:
        if directory not in self._unsynced_dirs:
            self._unsynced_dirs += (directory,)

    def _mark_dirty(self, segment: LogSegment) -> None:
        if segment.file is not None:
            self._dirty[id(segment.file)] = segment.file

    def _forget(self, segment: LogSegment) -> None:
        if segment.file is not None:
            self._dirty.pop(id(segment.file), None)

    def _sync_txn_index(self, segment_base: int) -> None:
        index = self._txn_indexes.get(segment_base)
        if index is not None:
            index.sync()

    # -- read ----------------------------------------------------------------

    def locate(self, offset: int, max_bytes: int, max_offset: int) -> FileSlice | None:
        """Where ``read`` would read from; None when there is nothing to return."""
        self._check_offset(offset)
        if offset >= max_offset:  # (the batch holding it ends at or past the bound)
            return None  # a reader at the high watermark, entries past it: no walk
        i = self._segment_index(offset)
        while i < len(self._segments) and self._segments[i].next_offset <= offset:
            i += 1  # past a segment's last batch: the data is in a later one
        if i == len(self._segments):
            return None
        segment = self._segments[i]
        start, first = segment.batch_of(offset)
        end = segment.size_bytes
        if max_offset < segment.next_offset:
            end = segment.position_of(max_offset)
        if end <= start:
            return None
        size = first.size if first is not None else segment.batch_size_at(start)
        return FileSlice(segment._f, start, min(end - start, max(max_bytes, size)), first)

    def read(self, offset: int, max_bytes: int, max_offset: int) -> bytes:
        """Bytes of one segment from the batch containing ``offset``: whole batches
        below ``max_offset``, at most ``max_bytes`` (the last batch may be cut)
        but always at least one whole batch. b"" at the log end or when nothing
        lies below ``max_offset``. Raises OffsetOutOfRange."""
        where = self.locate(offset, max_bytes, max_offset)
        if where is None:
            return b""
        return where.read()

    def batches(self, start: int, end: int) -> Iterator[tuple[memoryview, BatchHeader]]:
        """Every whole batch from the one holding ``start`` up to ``end``, read a
        chunk at a time: how the coordinators and the metadata store replay
        their logs."""
        offset = start
        while offset < end:
            chunk = self.read(offset, REPLAY_CHUNK_BYTES, end)
            if not chunk:
                return
            view = memoryview(chunk)
            before = offset
            for pos, header in iter_headers(chunk):
                yield view[pos : pos + header.size], header
                offset = header.next_offset
            if offset <= before:  # a batch that ends before where it was read: not a log
                raise OSError(errno.EIO, f"{self.directory.name}: the batches read at "
                              f"offset {before} do not go past it")

    def read_batch_at(self, offset: int) -> bytes:
        """The whole batch containing ``offset`` (< log_end_offset)."""
        return self.batch_slice(offset).read()

    def batch_slice(self, offset: int) -> FileSlice:
        """Where the whole batch containing ``offset`` (< log_end_offset) is."""
        if offset == self.log_end_offset:
            raise OffsetOutOfRange(offset, self._log_start_offset, self.log_end_offset)
        where = self.locate(offset, 0, self.log_end_offset)
        assert where is not None, f"no batch holds offset {offset}"
        return where

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(base offset, max timestamp) of the first batch whose max timestamp
        is >= ``timestamp``, or None. Batches below log_start_offset are skipped."""
        for segment in self._segments:
            found = segment.find_timestamp(timestamp)
            if found is None:
                continue
            if found[0] >= self._log_start_offset:
                return found
            return self._first_from_start(timestamp)
        return None

    def _first_from_start(self, timestamp: int) -> tuple[int, int] | None:
        i = self._segment_index(self._log_start_offset)
        for segment in self._segments[i:]:
            start = segment.position_of(self._log_start_offset)
            for _, header in segment.iter_headers(start):
                if header.max_timestamp >= timestamp:
                    return header.base_offset, header.max_timestamp
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(base offset, timestamp) of the first batch holding the largest max
        timestamp (ListOffsets MAX_TIMESTAMP), or None if no batch has one."""
        best: tuple[int, int] | None = None
        for segment in self._segments:
            if segment.max_timestamp >= 0 and (best is None or segment.max_timestamp > best[1]):
                best = segment.offset_of_max_timestamp, segment.max_timestamp
        return best

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest epoch <= ``epoch``, its end offset)."""
        return self._epochs.end_offset_for(epoch, self.log_end_offset)

    def _check_offset(self, offset: int) -> None:
        if not self._log_start_offset <= offset <= self.log_end_offset:
            raise OffsetOutOfRange(offset, self._log_start_offset, self.log_end_offset)

    def _segment_index(self, offset: int) -> int:
        return max(0, bisect_right(self._segments, offset, key=lambda s: s.base_offset) - 1)

    # -- deletion ------------------------------------------------------------

    def delete_records_before(self, offset: int, now_ms: int | None = None) -> None:
        """DeleteRecords: raise log_start_offset to ``offset`` and delete the
        segments wholly below it. ``now_ms`` dates the empty segment rolled when
        ``offset`` is the log end (default: the active segment's creation time).
        The new start and the unlinks reach the disk later (``defer_io``)."""
        if offset > self.log_end_offset:
            raise OffsetOutOfRange(offset, self._log_start_offset, self.log_end_offset)
        if offset <= self._log_start_offset:
            return
        if offset == self.log_end_offset and self._segments[-1].size_bytes:
            self._roll(self._segments[-1].created_ms if now_ms is None else now_ms)
        self._move_log_start(offset)
        io = Steps()
        self._delete_oldest(below_start_count(self._segments, offset), io)
        self._defer()
        io.raise_first()

    def enforce_retention(self, now_ms: int, high_watermark: int | None = None) -> int:
        """Delete whole segments by retention.ms, retention.bytes (when
        cleanup.policy has ``delete``) and log start offset (``retention``);
        returns how many were deleted. When the active segment goes too, a
        new empty one is rolled at the log end first, which becomes the log
        start: a quiet topic's expired records do not outlive retention.ms.
        Their files go later, as DeleteRecords' (``delete_records_before``)."""
        count = below_start_count(self._segments, self._log_start_offset)
        if self.config.delete:  # (cleanup.policy=compact alone: no time or size limit)
            hw = self.log_end_offset if high_watermark is None else high_watermark
            count = expired_count(self._segments, self.config, now_ms, count, hw,
                                  self.log_end_offset)
            if count == len(self._segments):
                self._roll(now_ms)
        if count > 0:
            io = Steps()
            self._delete_oldest(count, io)
            self._defer()
            io.raise_first()
        return count

    def _delete_oldest(self, count: int, io: Steps) -> None:
        """Drop the ``count`` oldest segments now: closed, their files renamed
        ``.deleted``; the unlinks are left to ``take_deferred_io``."""
        gone = self._segments[:count]
        del self._segments[:count]
        for segment in gone:
            self._forget(segment)
            self._txn_indexes.pop(segment.base_offset, None)
            self._removals += retire(segment, self.store, io)
        if self._segments[0].base_offset > self._log_start_offset:
            self._move_log_start(self._segments[0].base_offset)

    def _move_log_start(self, offset: int) -> None:
        """The log start in memory; ``log-start-offset`` is written later
        (``take_deferred_io``), the epoch checkpoint at its next rewrite:
        recovery cuts a stale one's entries below the start itself."""
        self._log_start_offset = offset
        if self._epochs.truncate_from_start(offset):
            self._epochs_unwritten = True

    def _set_log_start_offset(self, offset: int, io: Steps) -> None:
        """The log start in memory and on disk now (a truncation's)."""
        self._log_start_offset = offset
        epochs_changed = self._epochs.truncate_from_start(offset)
        io.run(self._start_file.write)
        if epochs_changed:
            io.run(self._write_epochs)

    def take_deferred_io(self) -> Durable | None:
        """The file work of the deletions so far, to run off this thread (None:
        none): its ``sync`` writes the log start, unlinks, syncs the directory."""
        if self._closed or not (self._removals or self._start_file.behind):
            return None
        paths, self._removals = self._removals, []
        return Removal(self.store, self.directory, paths, self._start_file.write_deferred)

    def _defer(self) -> None:
        if self.defer_io is not None:
            self.defer_io(self)
            return
        work = self.take_deferred_io()
        if work is not None:
            work.sync()

    def truncate_to(self, offset: int) -> None:
        """Drop every batch at or after ``offset``. A batch containing ``offset``
        goes whole, so the new log end is that batch's base offset; if that is
        not above log_start_offset the log is emptied and restarts at
        min(offset, log_start_offset)."""
        if offset >= self.log_end_offset:
            return
        io = Steps()
        if offset <= self._log_start_offset or self._batch_base(offset) <= self._log_start_offset:
            self._truncate_fully(min(offset, self._log_start_offset), io)
        else:
            keep = bisect_right(self._segments, offset, key=lambda s: s.base_offset)
            for segment in self._segments[keep:]:
                self._forget(segment)
                io.run(segment.delete)
            del self._segments[keep:]
            io.run(self._segments[-1].truncate_to, offset)
            io.run(self.store.sync_dir, self.directory)
        self._truncated(self.log_end_offset, io)

    def reset_to(self, offset: int) -> None:
        """Drop every batch and restart the empty log at ``offset`` (a Raft
        follower installing a leader's snapshot that ends past this log)."""
        io = Steps()
        self._truncate_fully(offset, io)
        self._truncated(offset, io)

    def _truncated(self, log_end: int, io: Steps) -> None:
        """The state in memory follows a truncation to ``log_end``, whatever
        of its I/O failed (``io``: raised last)."""
        epochs_changed = self._epochs.truncate_from_end(log_end)
        io.run(prune_snapshots, self.directory, log_end, self.config.snapshots_kept,
               self.store)
        self.producers, self._txn_indexes = rebuild_transactions(
            self.directory, self._segments, log_end, self.store)
        if epochs_changed:
            io.run(self._write_epochs)
        io.raise_first()

    def _batch_base(self, offset: int) -> int:
        """Base offset of the batch holding ``offset`` (in [start, end))."""
        i = self._segment_index(offset)
        while self._segments[i].next_offset <= offset:
            i += 1
        _position, header = self._segments[i].batch_of(offset)
        assert header is not None, f"no batch holds {offset}"
        return header.base_offset

    def _truncate_fully(self, offset: int, io: Steps) -> None:
        created_ms = self._segments[-1].created_ms
        for segment in self._segments:
            self._forget(segment)
            io.run(segment.delete)
        self._segments = [LogSegment.create(self.directory, offset, self.config, created_ms,
                                            self.store)]
        io.run(self.store.sync_dir, self.directory)
        self._set_log_start_offset(offset, io)  # its state first, then its files

    def _write_epochs(self) -> None:
        self._epochs_unwritten = False
        atomic_write(self.directory / LEADER_EPOCH_FILE, self._epochs.to_text().encode(),
                     self.store)

    # -- compaction (``cleaner``) ---------------------------------------------

    def cleaner_plan(self, high_watermark: int, now_ms: int,
                     max_keys: int = 1 << 20) -> cleaner.Plan | None:
        """A cleaning pass that is due now, with its own read handles on the
        segments (so a worker thread can run it), or None."""
        if not self.config.compact or self._closed or self._cleaning:
            return None
        end = cleaner.first_uncleanable(self._segments, self.config, high_watermark,
                                        self.first_unstable_offset(), now_ms)
        segments = cleaner.cleanable(self._segments, end)
        if not segments:
            return None
        end = self._segments[len(segments)].base_offset  # cleaned below a segment boundary
        checkpoint = cleaner.Checkpoint.load(self.directory, self.store)
        is_due, dirty, total = cleaner.due(self.config, segments, checkpoint, now_ms)
        if not is_due:
            return None
        readers = [self.store.open(s.path(LOG_SUFFIX)) for s in segments]
        lasts = frozenset(p.batches[-1].base_offset for p in self.producers.producers.values()
                          if p.batches)
        self._cleaning = True
        return cleaner.Plan(
            self.directory, self.config, self.store, segments, readers, end, checkpoint,
            frozenset(start for _, start in self._epochs.entries), lasts,
            cleaner.aborted_by_producer(self.aborted_transactions(0, end)), dirty, total, now_ms,
            max_keys)

    def cleaner_done(self, result: cleaner.Result | None, plan: cleaner.Plan) -> bool:
        """Swap a finished pass in (None: it failed); True if the log changed.
        Runs on the thread that owns the log, between appends."""
        self._cleaning = False
        for reader in plan.readers:
            reader.close()
        if result is None or self._closed:
            if not self._closed:
                cleaner.discard(self.directory, self.store)
            return False
        segments = cleaner.install(self.directory, self._segments, result, self.store)
        if segments is None:
            return False
        for rewrite in result.rewrites:  # a merged segment's index holds its group's
            if rewrite.new is not None and len(rewrite.olds) > 1:
                bases = [s.base_offset for s in rewrite.olds]
                entries = [e for b in bases if b in self._txn_indexes
                           for e in self._txn_indexes[b].entries]
                self._txn_index(bases[0]).rewrite(entries)
        kept = {s.base_offset for s in segments}
        for base in [b for b in self._txn_indexes if b not in kept]:
            del self._txn_indexes[base]
        self._segments = segments
        checkpoint = plan.checkpoint
        checkpoint.add(result.end, plan.now_ms, self.config.delete_retention_ms)
        checkpoint.next_delete_ms = (plan.now_ms + self.config.delete_retention_ms
                                     if result.keeps_deletes else -1)
        checkpoint.save(self.directory, self.store)
        return bool(result.rewrites)

    # -- durability and lifecycle --------------------------------------------

    def dirty_files(self) -> list[Durable]:
        """What was written since the last call (now considered clean): the
        files appended to, the segments rolled out since (their indexes too),
        and the directory entries not synced yet (a new log's, a rolled log's
        new segment) — nothing of it synced on the caller's thread; sync them."""
        files = self.take_dir_syncs()
        files.extend(self._dirty.values())
        self._dirty.clear()
        return files

    def take_dir_syncs(self) -> list[Durable]:
        """The directory entries not synced yet (once), e.g. before a file
        beside the log's must be durable."""
        if not self._unsynced_dirs:
            return []
        dirs, self._unsynced_dirs = self._unsynced_dirs, ()
        return [DirSync(self.store, dirs)]

    def flush(self) -> None:
        """Sync now everything written: the directory entries, the segments
        rolled out that no pass has synced yet (one may be under way), the
        active segment (its indexes, its aborted-transaction index)."""
        DirSync(self.store, self._unsynced_dirs).sync()
        self._unsynced_dirs = ()
        for rolled in self._rolled:
            if not rolled.done:
                rolled.sync()
        self._rolled.clear()
        self._segments[-1].fsync()
        self._sync_txn_index(self._segments[-1].base_offset)
        self._dirty.clear()

    def close(self, clean: bool = True) -> None:
        """Close the files. A clean close also fsyncs, writes a producer-state
        snapshot at log_end_offset and the clean-shutdown marker."""
        if self._closed:
            return
        self._closed = True
        self._start_file.close()
        io = Steps()  # a full disk or EIO: the files are closed all the same
        if clean:
            io.run(self._close_cleanly)
        for segment in self._segments:
            io.run(segment.close)
        io.raise_first()

    def _close_cleanly(self) -> None:
        """Everything recovery will trust is synced before the snapshot and
        the marker: every segment (``flush``), every aborted-transaction
        index, the log start (then the deleted segments' files go)."""
        self.flush()
        for index in self._txn_indexes.values():
            index.sync()  # (only one with unsynced entries costs an fsync)
        self._start_file.write()
        removals, self._removals = self._removals, []
        for path in removals:
            self.store.remove(path)
        if self._epochs_unwritten:
            self._write_epochs()
        snapshot = offset_path(self.directory, self.log_end_offset, SNAPSHOT_SUFFIX)
        atomic_write(snapshot, self.producers.to_snapshot(), self.store)
        atomic_write(self.directory / CLEAN_SHUTDOWN_FILE, b"", self.store)

    def delete(self) -> None:
        """Remove the whole partition directory (topic deletion)."""
        self.close(clean=False)
        self.store.remove_tree(self.directory)
