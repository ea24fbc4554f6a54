"""Aborted-transaction index of one segment (``<base>.txnindex``).

Theory of operation
-------------------
When an abort marker is appended, the transaction it closes — producer id,
first offset, last offset (the marker) and the LSO at that moment — is appended
to the index of the segment holding the marker, in Kafka's 34-byte entry
layout (version int16 = 0, four int64s). A ``read_committed`` fetch asks for
the aborted transactions overlapping the range it returns, and the consumer
uses them to drop aborted records. Entries are kept in memory (they are few),
the file is append-only; recovery rebuilds the entries of replayed segments
and truncation drops entries at or beyond the cut.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from kcompat.log.files import atomic_write
from kcompat.log.store import OS_STORE, FileStore

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TxnIndex:
    def __init__(self, path: Path, entries: list[AbortedTxn],
                 store: FileStore = OS_STORE) -> None:
        self.path = path
        self.entries = entries
        self.store = store
        self._unsynced = False

    @classmethod
    def load(cls, path: Path, store: FileStore = OS_STORE) -> TxnIndex:
        entries: list[AbortedTxn] = []
        try:
            data = store.read(path)
        except FileNotFoundError:
            data = b""
        for pos in range(0, len(data) - len(data) % ENTRY_SIZE, ENTRY_SIZE):
            version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
            if version != 0:
                break
            entries.append(AbortedTxn(pid, first, last, lso))
        return cls(path, entries, store)

    def append(self, entry: AbortedTxn) -> None:
        self.entries.append(entry)
        f = self.store.open(self.path)
        try:
            f.append([_ENTRY.pack(0, entry.producer_id, entry.first_offset,
                                  entry.last_offset, entry.last_stable_offset)])
        finally:
            f.close()
        self._unsynced = True

    def sync(self) -> None:
        """Make the appended entries durable (with the segment's flush)."""
        if self._unsynced:
            f = self.store.open(self.path)
            try:
                f.sync()
            finally:
                f.close()
            self._unsynced = False

    def rewrite(self, entries: list[AbortedTxn]) -> None:
        """Rewrite the whole index atomically (recovery, truncation)."""
        self.entries = list(entries)
        atomic_write(self.path, b"".join(
            _ENTRY.pack(0, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset)
            for e in self.entries), self.store)

    def overlapping(self, start: int, end: int) -> list[AbortedTxn]:
        """Entries whose transaction intersects offsets [start, end)."""
        return [e for e in self.entries if e.last_offset >= start and e.first_offset < end]
