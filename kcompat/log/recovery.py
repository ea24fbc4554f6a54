"""Recovery of a partition directory on open (Kafka's LogLoader, simplified).

Theory of operation
-------------------
1. A log cleaner swap cut short is finished or forgotten
   (``cleaner.recover_swap``); leftover ``*.tmp`` files (a crash during an
   atomic write), ``*.deleted`` files (a deleted segment's, whose unlink was
   left to a later pass: ``deferred_io``) and index files without a ``.log``
   are deleted.
2. Segments are opened in base-offset order. A segment is *scanned* — every
   batch re-read, framing, magic and CRC32C checked, offsets required to be
   contiguous (to grow, in a log that is or was compacted: the cleaner leaves
   gaps), and in a log never compacted, to end at the next segment's base
   (the new segment of a roll starts where the old one ended: a shorter one
   lost a tail a crash took before its deferred sync, while the next
   segment's name survived) — if it is the active (last) one, or if the shutdown was not
   clean and it lies at or after the segment holding the newest producer
   snapshot, or if its index files are missing or fail their sanity checks.
   Snapshots are written only by a clean close, after it synced every segment
   and index (rolling a segment of a log never compacted syncs nothing:
   ``partition_log``), and every
   batch written since lies at or past the snapshot's offset; so any segment
   that may hold unsynced data is scanned. (A snapshot a truncation removed
   cannot come back with newer segments trusted below it: their names become
   durable only with a directory sync, which makes the removal durable too.) Other segments trust their
   indexes. At the first torn or corrupt batch the file is truncated there and
   every later segment is deleted: what follows a hole cannot be trusted
   (and was never acknowledged: an acknowledgement waits for a sync pass
   that covers every segment rolled out before it).
3. The leader epoch cache is loaded from its checkpoint and, from the first
   scanned segment on, rebuilt from the batches' ``partitionLeaderEpoch``.
   The checkpoint may lack the epochs begun since the last clean close (an
   append does not rewrite it: ``partition_log``); they all lie in scanned
   segments, at or after the newest snapshot.
4. Producer state comes from the newest snapshot at or below the log end
   offset, then the batch headers after it are replayed through
   ``ProducerStateTable.apply`` (without a snapshot, the whole log is
   replayed). Snapshots above the log end are deleted, and only the newest
   ``snapshots_kept`` are kept.
5. Finally the ``clean-shutdown`` marker is removed, so that a later crash is
   seen as one.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kcompat.log.cleaner import CHECKPOINT_FILE, recover_swap
from kcompat.log.config import LogConfig
from kcompat.log.epoch_cache import LeaderEpochCache
from kcompat.log.files import (
    CLEAN_SHUTDOWN_FILE,
    DELETED_SUFFIX,
    LEADER_EPOCH_FILE,
    LOG_START_OFFSET_FILE,
    LOG_SUFFIX,
    SEGMENT_SUFFIXES,
    SNAPSHOT_SUFFIX,
    TMP_SUFFIX,
    TXN_INDEX_SUFFIX,
    atomic_write,
    offset_path,
    offsets_with_suffix,
    read_int_file,
)
from kcompat.log.segment import LogSegment
from kcompat.log.store import OS_STORE, FileStore
from kcompat.log.txn_index import AbortedTxn, TxnIndex
from kcompat.txn.producer_state import CompletedTxn, ProducerStateTable
from kcompat.wire.batch import BatchError, BatchHeader
from kcompat.wire.records import marker_aborts


@dataclass(slots=True)
class RecoveredLog:
    segments: list[LogSegment]
    log_start_offset: int
    producers: ProducerStateTable
    epochs: LeaderEpochCache
    truncated: bool  # a torn or corrupt tail was cut off
    txn_indexes: dict[int, TxnIndex]  # segment base offset -> aborted transactions
    # a brand-new directory: its entry and its files' entries are synced by the
    # log's first sync pass (off the event loop), not here
    unsynced_dirs: tuple[Path, ...] = ()
    gaps: bool = False  # the log is or was compacted: offsets may skip (``_open_segments``)


def recover(directory: Path, config: LogConfig, now_ms: int,
            store: FileStore = OS_STORE) -> RecoveredLog:
    new = store.make_dirs(directory)
    clean = store.exists(directory / CLEAN_SHUTDOWN_FILE)
    _remove_leftovers(directory, store)
    persisted_start = read_int_file(directory / LOG_START_OFFSET_FILE, store) or 0
    epochs = load_epoch_cache(directory, store)
    bases = offsets_with_suffix(directory, LOG_SUFFIX, store)
    gaps = config.compact or store.exists(directory / CHECKPOINT_FILE)  # ever compacted
    if not bases:
        segment = LogSegment.create(directory, persisted_start, config, now_ms, store)
        segments, truncated = [segment], False
    else:
        snapshots = offsets_with_suffix(directory, SNAPSHOT_SUFFIX, store)
        scan_from = _first_scanned(bases, snapshots[-1] if snapshots else None, clean)
        segments, truncated = _open_segments(directory, config, now_ms, bases, scan_from, epochs,
                                             store, gaps)
    log_end = segments[-1].next_offset
    log_start = min(max(persisted_start, segments[0].base_offset), log_end)
    epochs.truncate_from_end(log_end)
    epochs.truncate_from_start(log_start)
    if not new:  # (a new log has no epochs to forget)
        atomic_write(directory / LEADER_EPOCH_FILE, epochs.to_text().encode(), store)
    if log_start != persisted_start:
        atomic_write(directory / LOG_START_OFFSET_FILE, str(log_start).encode(), store)
    producers, txn_indexes = rebuild_transactions(directory, segments, log_end, store)
    prune_snapshots(directory, log_end, config.snapshots_kept, store)
    store.remove(directory / CLEAN_SHUTDOWN_FILE)
    if new:  # the directory's name and its files survive a crash once synced
        return RecoveredLog(segments, log_start, producers, epochs, truncated, txn_indexes,
                            (directory.parent, directory), gaps)
    store.sync_dir(directory)
    return RecoveredLog(segments, log_start, producers, epochs, truncated, txn_indexes,
                        gaps=gaps)


def rebuild_transactions(
    directory: Path, segments: list[LogSegment], log_end: int, store: FileStore = OS_STORE
) -> tuple[ProducerStateTable, dict[int, TxnIndex]]:
    """Producer state plus every segment's aborted-transaction index: entries
    below the replay start come from the ``.txnindex`` files, the rest are
    rebuilt by the replay; files are rewritten when they differ."""
    aborted: list[AbortedTxn] = []

    def collect(done: CompletedTxn) -> None:
        if done.aborted:
            aborted.append(AbortedTxn(done.producer_id, done.first_offset, done.last_offset,
                                      done.first_offset))

    producers, start = rebuild_producer_state(directory, segments, log_end, collect, store)
    indexes: dict[int, TxnIndex] = {}
    bases = [s.base_offset for s in segments]
    for i, segment in enumerate(segments):
        index = TxnIndex.load(offset_path(directory, segment.base_offset, TXN_INDEX_SUFFIX),
                              store)
        end = bases[i + 1] if i + 1 < len(bases) else log_end
        kept = [e for e in index.entries if e.last_offset < min(start, end)]
        kept += [e for e in aborted if segment.base_offset <= e.last_offset < end]
        if kept != index.entries:
            index.rewrite(kept)
        indexes[segment.base_offset] = index
    return producers, indexes


def _remove_leftovers(directory: Path, store: FileStore) -> None:
    recover_swap(directory, store)  # a cleaner pass cut short: finish or forget its swap
    names = set(store.names(directory))
    for name in sorted(names):
        if name.endswith(TMP_SUFFIX) or name.endswith(DELETED_SUFFIX):
            store.remove(directory / name)
            continue
        for suffix in SEGMENT_SUFFIXES[1:]:
            if name.endswith(suffix) and name[: -len(suffix)] + LOG_SUFFIX not in names:
                store.remove(directory / name)


def _first_scanned(bases: list[int], newest_snapshot: int | None, clean: bool) -> int:
    """Index of the first segment whose batches must all be re-validated."""
    last = len(bases) - 1
    if clean:
        return last
    if newest_snapshot is None:
        return 0
    return min(last, max(0, bisect_right(bases, newest_snapshot) - 1))


def _open_segments(
    directory: Path,
    config: LogConfig,
    now_ms: int,
    bases: list[int],
    scan_from: int,
    epochs: LeaderEpochCache,
    store: FileStore,
    gaps: bool,
) -> tuple[list[LogSegment], bool]:
    segments: list[LogSegment] = []
    rebuilding_epochs = False

    def on_batch(header: BatchHeader) -> None:
        epochs.assign(header.partition_leader_epoch, header.base_offset)

    for i, base in enumerate(bases):
        next_base = bases[i + 1] if i + 1 < len(bases) else None
        segment, ready = LogSegment.open_existing(
            directory, base, config, now_ms, next_base, trust_indexes=i < scan_from, store=store
        )
        segments.append(segment)
        if ready:
            continue
        if not rebuilding_epochs:
            epochs.truncate_from_end(base)
            rebuilding_epochs = True
        previous_end = segments[-2].next_offset if len(segments) > 1 else base
        cut = segment.recover(max(base, previous_end), on_batch, gaps)
        if cut or (not gaps and next_base is not None and segment.next_offset != next_base):
            for later in bases[i + 1 :]:
                for suffix in SEGMENT_SUFFIXES:
                    store.remove(offset_path(directory, later, suffix))
            return segments, True
    return segments, False


def load_epoch_cache(directory: Path, store: FileStore = OS_STORE) -> LeaderEpochCache:
    """The checkpointed cache, or an empty one if missing or malformed (the
    scan of the log then rebuilds what it can)."""
    try:
        return LeaderEpochCache.from_text(store.read(directory / LEADER_EPOCH_FILE).decode())
    except (OSError, ValueError):
        return LeaderEpochCache()


def rebuild_producer_state(
    directory: Path,
    segments: list[LogSegment],
    log_end_offset: int,
    on_completed: Callable[[CompletedTxn], None] | None = None,
    store: FileStore = OS_STORE,
) -> tuple[ProducerStateTable, int]:
    """Newest usable snapshot <= ``log_end_offset`` plus a replay of the batch
    headers after it (control batches are read to learn commit or abort; each
    transaction they close goes to ``on_completed``). Returns the table and the
    offset the replay started from."""
    table, start = ProducerStateTable(), 0
    for offset in reversed(offsets_with_suffix(directory, SNAPSHOT_SUFFIX, store)):
        if offset > log_end_offset:
            continue
        try:
            data = store.read(offset_path(directory, offset, SNAPSHOT_SUFFIX))
            table, start = ProducerStateTable.from_snapshot(data), offset
            break
        except (OSError, ValueError, KeyError, TypeError):
            continue
    for segment in segments:
        if segment.next_offset <= start:
            continue
        position = segment.position_of(start) if start > segment.base_offset else 0
        for pos, header in segment.iter_headers(position):
            if header.base_offset < start:
                continue
            if not header.is_control:
                table.apply(header)
                continue
            try:
                aborts = marker_aborts(segment.read(pos, header.size))
            except BatchError:
                aborts = True  # an unreadable marker: treat the transaction as aborted
            completed = table.apply(header, aborts)
            if completed is not None and on_completed is not None:
                on_completed(completed)
    return table, start


def prune_snapshots(directory: Path, log_end_offset: int, keep: int,
                    store: FileStore = OS_STORE) -> None:
    """Delete snapshots above ``log_end_offset`` and all but the newest ``keep``."""
    offsets = offsets_with_suffix(directory, SNAPSHOT_SUFFIX, store)
    valid = [o for o in offsets if o <= log_end_offset]
    stale = [o for o in offsets if o > log_end_offset] + valid[:-keep]
    for offset in stale:
        store.remove(offset_path(directory, offset, SNAPSHOT_SUFFIX))
