"""The hard states (term, vote) of every partition group of this broker, in one journal.

Theory of operation
-------------------
Raft must make a group's term and vote durable before it sends the messages
that depend on them. With one ``quorum-state`` file per partition, each
change costs a file write, two fsyncs and a rename, so a broker failure that
makes a thousand groups elect at once queued thousands of fsyncs behind each
other and the elections timed out before they were durable. Here every
partition group's change of one driver round is one record appended to
``raft-hard-states.log`` in the data directory, and the round's sync pass
makes all of them durable with one fsync (TiKV and etcd keep every group's
Raft state in one engine for the same reason). The metadata quorum keeps its
own ``quorum-state`` file.

Records are 20 bytes: group id (i64), term (i32), vote (i32), CRC-32 of
those 16 bytes (u32); the last record of a group wins. Loading stops at the
first torn or corrupt record and cuts the file there (a record is written
only before the sync that the messages depending on it wait for, so a lost
tail was never relied on). When the journal holds several times more records
than groups it is rewritten with one record per live group (atomically:
temporary file, sync, rename, directory sync).

A write or sync of the journal that fails (a full disk, EIO) leaves no torn
record behind: a failed append is cut off and its records wait in memory for
the next round; after a failed sync the driver calls ``rewind``, which cuts
the file back to what the last good sync covered, so the records are written
again rather than trusted to pages a failed fsync may have dropped (the
driver holds back the groups whose votes they carry meanwhile, ``disk_faults``).

A partition directory from before the journal still has its ``quorum-state``
file: ``PartitionLogStorage`` reads it when the journal has no record of the
group.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from pathlib import Path

from kcompat.log.files import atomic_write
from kcompat.log.store import Durable, FileStore, StoredFile
from kcompat.raft import HardState

FILE_NAME = "raft-hard-states.log"
_RECORD = struct.Struct(">qiiI")
_BODY = struct.Struct(">qii")
COMPACT_MIN_RECORDS = 4096


def _record(gid: int, hs: HardState) -> bytes:
    body = _BODY.pack(gid, hs.term, hs.vote)
    return body + struct.pack(">I", zlib.crc32(body))


class HardStateJournal:
    def __init__(self, data_dir: Path, store: FileStore,
                 live: Callable[[], set[int]] | None = None) -> None:
        self.path = Path(data_dir) / FILE_NAME
        self._store = store
        self._live = live  # the group ids still hosted (compaction drops the others)
        self.states: dict[int, HardState] = {}
        self._records = 0
        self._pending: dict[int, HardState] = {}
        self._must_sync = False
        self._file: StoredFile = self._load()
        self._synced = self._records  # records the last good sync covered

    def _load(self) -> StoredFile:
        store = self._store
        if not store.exists(self.path):
            f = store.open(self.path, truncate=True)
            store.sync_dir(self.path.parent)
            return f
        data = store.read(self.path)
        good = 0
        for pos in range(0, len(data) - _RECORD.size + 1, _RECORD.size):
            gid, term, vote, crc = _RECORD.unpack_from(data, pos)
            if zlib.crc32(data[pos:pos + _BODY.size]) != crc:
                break
            self.states[gid] = HardState(term, vote)
            good = pos + _RECORD.size
        f = store.open(self.path)
        if good != len(data):
            f.truncate(good)  # a torn or corrupt tail, never relied on
            f.sync()
        self._records = good // _RECORD.size
        return f

    def get(self, gid: int) -> HardState | None:
        return self._pending.get(gid) or self.states.get(gid)

    def put(self, gid: int, hs: HardState, durable: bool) -> None:
        """Taken now, written by ``write_pending`` (the driver's round)."""
        self._pending[gid] = hs
        self._must_sync |= durable

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    def dirty_files(self) -> list[Durable]:
        """``Syncable`` for the driver's sync pass (``write_pending``)."""
        return self.write_pending()

    def write_pending(self) -> list[Durable]:
        """Append the round's records; what the sync pass must make durable
        (nothing when no change needed durability: lone replicas, or
        ``kcompat.flush.mode=never``)."""
        if not self._pending:
            return []
        pending, self._pending = self._pending, {}
        try:
            self._file.append([b"".join(_record(gid, hs) for gid, hs in pending.items())])
        except OSError:
            self._pending = {**pending, **self._pending}  # written by a later round
            self._must_sync = True
            self._cut(self._records)
            raise
        self.states.update(pending)
        self._records += len(pending)
        durable, self._must_sync = self._must_sync, False
        if self._records > max(COMPACT_MIN_RECORDS, 4 * len(self.states)):
            self.compact()
            return []  # the rewrite is durable already
        return [_Sync(self, self._records)] if durable else []

    def _cut(self, records: int) -> None:
        """Cut the file back to ``records`` whole records (best effort: a torn
        tail left by a dead disk is cut by the next load)."""
        try:
            self._file.truncate(records * _RECORD.size)
        except OSError:
            return
        self._records = records

    def rewind(self) -> None:
        """A sync of the journal failed: cut it back to the last good sync
        (the groups whose records were lost write them again on retry)."""
        self._cut(self._synced)

    def compact(self) -> None:
        """Rewrite the journal with the last record of each live group."""
        live = self._live() if self._live is not None else set(self.states)
        self.states = {gid: hs for gid, hs in self.states.items() if gid in live}
        data = b"".join(_record(gid, hs) for gid, hs in sorted(self.states.items()))
        atomic_write(self.path, data, self._store)  # on failure the old file stays in use
        self._file.close()
        self._file = self._store.open(self.path)
        self._records = self._synced = len(self.states)

    def close(self) -> None:
        self._file.close()


class _Sync:
    """The journal's file synced by the driver's pass; notes how far it holds."""

    __slots__ = ("journal", "records")

    def __init__(self, journal: HardStateJournal, records: int) -> None:
        self.journal = journal
        self.records = records

    def sync(self) -> None:
        self.journal._file.sync()
        self.journal._synced = max(self.journal._synced, self.records)
