"""One segment of a partition log: a ``.log`` file of batches plus its indexes.

Theory of operation
-------------------
A segment is named by its base offset and holds whole RecordBatch v2 batches
back to back, each already carrying its assigned ``baseOffset`` and
``partitionLeaderEpoch``. The log file is opened once through the
``FileStore``: ``append`` writes a batch with one gathered write of
caller-supplied parts (so the two rewritten header fields need no copy of the
batch), reads are positional and never move a file pointer.

In memory the segment tracks its size, the next offset after its last batch,
its maximum batch timestamp and the base offset of the batch holding it, and
the max timestamp of its first batch (the clock of ``segment.ms`` rolls, as in
Kafka; the creation time stands in while it is empty or untimestamped).

Every ``index_interval_bytes`` of appended log, the offset index gets an entry
for the batch being appended and the time index an entry if the running
maximum timestamp grew since its last entry. To find the batch that contains
an offset, look up the greatest index entry <= offset, then walk batch headers
forward in what one pread returns (about an index interval: one or two
syscalls a look-up, not one per batch).

A write that fails (``OSError``: a full disk, EIO, a short write followed by
an error) changes nothing the segment tracks, and the bytes it may have left
at the end of the file are cut off before the error goes on
(``_cut_torn_tail``): a failed append leaves the segment as it was, so a
later one, once the disk has room again, continues a whole log.

``recover`` rebuilds the state and both indexes by scanning every batch and
checking framing, magic, CRC32C and that offsets are contiguous (only
growing in a compacted log: the cleaner leaves gaps); it truncates
the file at the first bad batch. ``load_indexes`` instead trusts the index
files of a cleanly rolled segment and only walks the headers after the last
offset-index entry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from kcompat.log import header_walk
from kcompat.log.config import INT32_MAX, LogConfig
from kcompat.log.files import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SEGMENT_SUFFIXES,
    TIME_INDEX_SUFFIX,
    offset_path,
)
from kcompat.log.index import OffsetIndex, TimeIndex
from kcompat.log.store import OS_STORE, FileStore, StoredFile
from kcompat.wire.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    BatchHeader,
    batch_length_at,
    compute_crc,
    parse_header,
)

# the most a look-up reads at once while it walks headers from an index entry
# (``batch_of``; about ``index_interval_bytes``, one header past it)
WALK_CHUNK_MAX = 64 << 10


class LogSegment:
    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        file: StoredFile,
        created_ms: int,
        indexes: tuple[OffsetIndex, TimeIndex] | None = None,
        store: FileStore = OS_STORE,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.config = config
        self.file: StoredFile | None = file
        self.store = store
        self.created_ms = created_ms
        self._reset_state()
        if indexes is None:
            indexes = self._new_indexes()
        self.offset_index, self.time_index = indexes

    def path(self, suffix: str) -> Path:
        return offset_path(self.directory, self.base_offset, suffix)

    def _new_indexes(self) -> tuple[OffsetIndex, TimeIndex]:
        return (OffsetIndex.create(self.path(INDEX_SUFFIX), self.base_offset, self.store),
                TimeIndex.create(self.path(TIME_INDEX_SUFFIX), self.base_offset, self.store))

    @property
    def _f(self) -> StoredFile:
        assert self.file is not None, f"segment {self.base_offset} is closed"
        return self.file

    # -- opening -------------------------------------------------------------

    @classmethod
    def create(
        cls, directory: Path, base_offset: int, config: LogConfig, now_ms: int,
        store: FileStore = OS_STORE,
    ) -> LogSegment:
        """A new empty segment; any files with its name are replaced."""
        path = offset_path(directory, base_offset, LOG_SUFFIX)
        return cls(directory, base_offset, config, store.open(path, truncate=True), now_ms,
                   store=store)

    @classmethod
    def open_existing(
        cls,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        now_ms: int,
        next_base_offset: int | None,
        trust_indexes: bool,
        store: FileStore = OS_STORE,
    ) -> tuple[LogSegment, bool]:
        """Open a segment written earlier. With ``trust_indexes`` its index files
        are loaded and checked against the log; returns (segment, ready). When not
        ready, the caller must run ``recover`` before using the segment."""
        file = store.open(offset_path(directory, base_offset, LOG_SUFFIX))
        size = file.size()
        indexes = None
        if trust_indexes:
            indexes = _load_indexes(directory, base_offset, size, next_base_offset, store)
        segment = cls(directory, base_offset, config, file, now_ms, indexes, store)
        segment.size_bytes = size
        if indexes is None:
            return segment, False
        if not segment._restore_tail_state():
            return segment, False
        time_last = segment.time_index.last_entry()
        return segment, time_last is None or time_last[1] < segment.next_offset

    def _reset_state(self) -> None:
        self.size_bytes = 0
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.first_batch_timestamp = -1
        self._bytes_since_index = 0

    def _restore_tail_state(self) -> bool:
        """Derive next offset and max timestamp from the indexes plus a walk of the
        headers after the last offset-index entry; False if the log disagrees."""
        last = self.offset_index.last_entry()
        offset, position = last if last is not None else (self.base_offset, 0)
        self.next_offset = self.base_offset
        time_last = self.time_index.last_entry()
        self.max_timestamp, self.offset_of_max_timestamp = time_last or (-1, -1)
        self.first_batch_timestamp = -1
        end = position
        for pos, header in self.iter_headers(position):
            if pos == position and last is not None and header.base_offset != offset:
                return False
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.base_offset
            self.next_offset = header.next_offset
            end = pos + header.size
        if end != self.size_bytes or (last is not None and self.next_offset <= offset):
            return False
        self._bytes_since_index = self.size_bytes - position
        if self.size_bytes:
            self.first_batch_timestamp = self.header_at(0).max_timestamp
        return True

    def recover(self, min_base_offset: int, on_batch: Callable[[BatchHeader], None],
                gaps: bool = False) -> bool:
        """Rescan and validate every batch, rebuild the indexes, and truncate the
        file at the first torn or corrupt batch. Returns True if it truncated."""
        file_size = self._f.size()
        self.offset_index.close()
        self.time_index.close()
        self.offset_index, self.time_index = self._new_indexes()
        self._reset_state()
        expected = min_base_offset
        for pos, batch in self._iter_raw_batches(file_size):
            header = parse_header(batch)
            if not _batch_valid(header, batch, expected, exact=pos > 0 and not gaps):
                break
            self._track(pos, header)
            self.size_bytes = pos + header.size
            expected = header.next_offset
            on_batch(header)
        truncated = self.size_bytes < file_size
        if truncated:
            self._f.truncate(self.size_bytes)
            self._f.sync()
        self.offset_index.write_pending()
        self.time_index.write_pending()
        return truncated

    def _iter_raw_batches(self, file_size: int) -> Iterator[tuple[int, memoryview]]:
        """Whole batches read in chunks; stops at a batch that is cut off."""
        chunk = self.config.recovery_chunk_bytes
        pos = 0
        while file_size - pos >= HEADER_SIZE:
            buf = memoryview(self._f.pread(min(chunk, file_size - pos), pos))
            off = 0
            while len(buf) - off >= LOG_OVERHEAD:
                size = batch_length_at(buf, off)
                if size < HEADER_SIZE or pos + off + size > file_size:
                    return
                if off + size > len(buf):
                    if off == 0:  # a batch larger than the chunk: read it alone
                        yield pos, memoryview(self._f.pread(size, pos))
                        off = size
                    break
                yield pos + off, buf[off : off + size]
                off += size
            pos += off

    # -- writing -------------------------------------------------------------

    def would_overflow(self, size: int, last_offset: int) -> bool:
        """True if a batch of ``size`` bytes ending at ``last_offset`` cannot go
        into this (non-empty) segment."""
        if self.size_bytes == 0:
            return False
        too_big = self.size_bytes + size > self.config.segment_bytes
        return too_big or last_offset - self.base_offset > INT32_MAX

    def roll_due(self, now_ms: int, batch_timestamp: int) -> bool:
        """True if the segment is non-empty and a batch of max timestamp
        ``batch_timestamp`` comes more than ``segment_ms`` after its first
        batch's (Kafka's rule: record time, so old timestamps replayed do not
        roll a segment per batch); by the wall clock since the segment was
        created only where its first batch has no timestamp."""
        if self.size_bytes == 0:
            return False
        if self.first_batch_timestamp >= 0:
            return batch_timestamp - self.first_batch_timestamp > self.config.segment_ms
        return now_ms - self.created_ms > self.config.segment_ms

    def append(self, parts: Sequence[bytes | bytearray | memoryview], header: BatchHeader) -> int:
        """Write one batch given as ``parts`` (``header`` carries its assigned
        base offset); returns its file position."""
        position = self.size_bytes
        try:
            written = self._f.append(parts)
        except OSError:
            self._cut_torn_tail()
            raise
        assert written == header.size, f"batch parts are {written} bytes, header says {header.size}"
        self._track(position, header)
        self.size_bytes += written
        return position

    def _cut_torn_tail(self) -> None:
        """A failed write (a full disk, EIO) may have left part of its batch at
        the end of the file: cut the file back to the last whole batch, so the
        next append lands where the segment's state says and the log is never
        corrupt. Best effort: if even the truncation fails (a dead disk), the
        tail stays, and recovery cuts it (a torn batch fails its CRC)."""
        try:
            if self._f.size() > self.size_bytes:
                self._f.truncate(self.size_bytes)
        except OSError:
            pass

    def _track(self, position: int, header: BatchHeader) -> None:
        if position == 0:
            self.first_batch_timestamp = header.max_timestamp
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.base_offset
        if self._bytes_since_index > self.config.index_interval_bytes:
            self.offset_index.append(header.base_offset, position)
            if self.max_timestamp >= 0:
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index = 0
        self._bytes_since_index += header.size
        self.next_offset = header.next_offset

    def truncate_to(self, offset: int) -> None:
        """Drop the batch containing ``offset`` and everything after it."""
        position = self.position_of(offset)
        if position >= self.size_bytes:
            return
        cut_base = self.header_at(position).base_offset
        self._f.truncate(position)
        self.size_bytes = position
        self.offset_index.truncate_to_position(position)
        self.time_index.truncate_to_offset(cut_base)
        ok = self._restore_tail_state()
        assert ok, "segment state inconsistent after truncation"
        self._f.sync()  # last: a failed sync (EIO) leaves the state matching the file

    # -- reading -------------------------------------------------------------

    def read(self, position: int, size: int) -> bytes:
        return self._f.pread(size, position)

    def header_at(self, position: int) -> BatchHeader:
        return parse_header(self._f.pread(HEADER_SIZE, position))

    def batch_size_at(self, position: int) -> int:
        return batch_length_at(self._f.pread(LOG_OVERHEAD, position), 0)

    def iter_headers(self, position: int = 0) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each whole batch from ``position``, read in chunks."""
        chunk = self.config.recovery_chunk_bytes
        end = self.size_bytes
        while end - position >= HEADER_SIZE:
            buf = self._f.pread(min(chunk, end - position), position)
            off = 0
            while len(buf) - off >= HEADER_SIZE:
                size = batch_length_at(buf, off)
                if size < HEADER_SIZE or position + off + size > end:
                    return
                yield position + off, parse_header(buf, off)
                off += size
            if off == 0:
                return
            position += off

    def position_of(self, offset: int) -> int:
        """Position of the first batch whose last offset >= ``offset`` (the batch
        containing it), or the segment size if there is none."""
        return self.batch_of(offset)[0]

    def batch_of(self, offset: int) -> tuple[int, BatchHeader | None]:
        """``position_of``, with the header of the batch there, read on the way
        (None at the segment's end): a reader needs no second read of it."""
        if offset >= self.next_offset:
            return self.size_bytes, None
        _, position = self.offset_index.lookup(offset)
        # the headers after the index entry, read a window at a time
        # (``header_walk``): a pread per header was a syscall each, and each
        # gave the GIL up and waited to take it back behind a busy worker
        # thread (a Fetch over many partitions held the loop 160 ms on 10 %
        # of a CPU)
        window = min(self.config.index_interval_bytes, WALK_CHUNK_MAX) + HEADER_SIZE
        found = header_walk.find(self._f, position, self.size_bytes - position, offset, window)
        return found if found is not None else (self.size_bytes, None)

    def find_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(base offset, max timestamp) of the first batch whose max timestamp
        >= ``timestamp``, or None if this segment has none."""
        if self.max_timestamp < timestamp:
            return None
        entry = self.time_index.lookup(timestamp)
        position = self.position_of(entry[1]) if entry is not None else 0
        for _, header in self.iter_headers(position):
            if header.max_timestamp >= timestamp:
                return header.base_offset, header.max_timestamp
        return None

    def written_ms(self) -> int:
        """The file's mtime: no batch of the segment was written later."""
        return self._f.mtime_ms()

    def largest_timestamp_ms(self) -> int:
        """Max batch timestamp, or the file's mtime when no batch has one (the
        clock of ``retention.ms``, as in Kafka)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return self._f.mtime_ms()

    # -- lifecycle -----------------------------------------------------------

    def fsync(self) -> None:
        self._f.sync()
        self.offset_index.fsync()
        self.time_index.fsync()

    def write_indexes(self) -> None:
        """Write the indexes' pending entries to their files (no sync)."""
        self.offset_index.write_pending()
        self.time_index.write_pending()

    def sync_written(self) -> None:
        """Sync what was written to the log and index files, writing nothing:
        safe in a thread beside the log's (a file closed meanwhile: a no-op)."""
        f = self.file
        if f is not None:
            f.sync()
        self.offset_index.sync_file()
        self.time_index.sync_file()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
        try:
            self.offset_index.close()
        finally:  # an index whose last entries cannot be written is rebuilt on open
            self.time_index.close()

    def delete(self) -> None:
        self.close()
        for suffix in SEGMENT_SUFFIXES:
            self.store.remove(self.path(suffix))


def _batch_valid(header: BatchHeader, batch: memoryview, expected: int, exact: bool) -> bool:
    """A recovered batch is valid if well-formed, CRC-clean and at the next
    offset — or past it when ``exact`` is off: a compacted log has gaps where
    the log cleaner removed whole batches (here or at the leader this replica
    copied). The base offset lies outside the CRC; contiguity is its check."""
    if header.magic != MAGIC_V2 or header.last_offset_delta < 0 or header.records_count < 0:
        return False
    if header.base_offset < expected or (exact and header.base_offset != expected):
        return False
    return compute_crc(batch) == header.crc


def _load_indexes(
    directory: Path, base_offset: int, log_size: int, next_base_offset: int | None,
    store: FileStore,
) -> tuple[OffsetIndex, TimeIndex] | None:
    offset_index = OffsetIndex.load(
        offset_path(directory, base_offset, INDEX_SUFFIX), base_offset, log_size,
        next_base_offset, store)
    time_index = TimeIndex.load(
        offset_path(directory, base_offset, TIME_INDEX_SUFFIX), base_offset, next_base_offset,
        store)
    if offset_index is not None and time_index is not None:
        return offset_index, time_index
    for index in (offset_index, time_index):
        if index is not None:
            index.close()
    return None
