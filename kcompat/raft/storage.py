"""The storage the Raft core reads, and how a runtime writes a Ready into it.

Theory of operation
-------------------
The core does not own the log (docs/architecture.md, principle 2: the partition log *is* the Raft
log). It keeps only the log's shape in memory — log start, log end and the
leader-epoch list, the same small table Kafka keeps as its leader-epoch
checkpoint — and reads payloads through :class:`LogStorage` when it must send
entries or a snapshot. All writes are effects in a ``Ready`` that the runtime
applies with a :class:`WritableLogStorage` (``persist_ready`` shows the order)
and then reports with ``advance``.

``kcompat.log.PartitionLog`` maps onto this protocol as:

=======================  ====================================================
LogStorage               PartitionLog
=======================  ====================================================
log_start / log_end      log_start_offset / log_end_offset
epochs()                 leader_epochs (the (epoch, start offset) cache)
entries(lo, hi, max)     read(lo, max_bytes, hi) split into batches (each
                         batch -> Entry(baseOffset, partitionLeaderEpoch, bytes,
                         lastOffsetDelta + 1, isControl))
snapshot()               the latest metadata snapshot file; for plain
                         partitions an empty Snapshot at log_start_offset
truncate(offset)         truncate_to(offset)
append(entries)          append(batch, header, leader_epoch=entry.term)
compact / snapshots      delete_records_before / snapshot writer
sync()                   flush (or the group-commit flusher)
voter_history()          (optional) the snapshot's voter set and the
                         VotersRecord control batches in the log
=======================  ====================================================

Membership (see ``node``): a configuration entry (``Entry.voters`` set) must
be stored so that ``entries`` gives it back with its voter set, and a
snapshot keeps the voter set in force at its end (``Snapshot.voters``; the
runtime asks the core, ``Raft.voters_at``). A storage that holds either
implements ``voter_history`` (:class:`MembershipStorage`) so a restart knows
the current voters; one that never did — every partition log today — need
not, and the core uses ``RaftConfig.voters``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from kcompat.raft.types import Entry, HardState, Ready, Snapshot, SnapshotId


class LogStorage(Protocol):
    """Read side: the durable state a node restarts from, and payload reads.

    Invariants the core relies on: entries are contiguous from ``log_start`` to
    ``log_end``; ``epochs()`` lists (term, first offset) for each term that has
    an entry in that range, both strictly increasing, the first starting at
    ``log_start`` when the log is not empty; ``snapshot_id()`` ends exactly at
    ``log_start`` (``SnapshotId(0, 0)`` for a log that was never compacted).
    """

    def hard_state(self) -> HardState: ...

    def snapshot_id(self) -> SnapshotId: ...

    def log_end(self) -> int: ...

    def epochs(self) -> list[tuple[int, int]]: ...

    def entries(self, lo: int, hi: int, max_bytes: int) -> list[Entry]:
        """Whole entries from the one starting at ``lo`` (an entry boundary),
        ending at or before ``hi``, totalling at most ``max_bytes`` (no more
        once the budget is spent) — but at least one entry when ``lo < hi``."""
        ...

    def snapshot(self) -> Snapshot:
        """The latest snapshot (its id equals ``snapshot_id()``)."""
        ...


class MembershipStorage(Protocol):
    """Optional read side for dynamic membership."""

    def voter_history(self) -> tuple[frozenset[int] | None, list[tuple[int, frozenset[int]]]]:
        """The snapshot's voter set (None: the configured voters) and, in
        offset order, (offset, voter set) of each configuration entry in
        ``[log_start, log_end)``."""
        ...


def voter_history(
    storage: LogStorage,
) -> tuple[frozenset[int] | None, list[tuple[int, frozenset[int]]]]:
    """``storage.voter_history()``, or no configuration at all when the
    storage does not implement it."""
    history = getattr(storage, "voter_history", None)
    if history is None:
        return None, []
    base, configs = history()
    return base, list(configs)


class WritableLogStorage(LogStorage, Protocol):
    """Write side, used by the runtime (never by the core)."""

    def install_snapshot(self, snapshot: Snapshot) -> None:
        """Replace the whole log by ``snapshot``: start = end = snapshot end."""
        ...

    def compact(self, snapshot: Snapshot) -> None:
        """The application's snapshot of the committed prefix below
        ``snapshot.id.end``: keep it and drop those entries; then tell the
        core with ``Raft.compact(snapshot.id)``."""
        ...

    def truncate(self, offset: int) -> None:
        """Drop every entry at or after ``offset`` (an entry boundary)."""
        ...

    def append(self, entries: Sequence[Entry]) -> None:
        """Append entries starting exactly at the log end."""
        ...

    def set_hard_state(self, hard_state: HardState) -> None: ...

    def sync(self) -> None:
        """Make everything written so far durable."""
        ...


def persist_ready(storage: WritableLogStorage, ready: Ready) -> None:
    """Steps 1-5 of the Ready contract: write the state changes, then sync."""
    write_ready(storage, ready)
    if ready.must_sync:
        storage.sync()


def write_ready(storage: WritableLogStorage, ready: Ready) -> None:
    """Steps 1-4 of the Ready contract (no sync)."""
    if ready.snapshot is not None:
        storage.install_snapshot(ready.snapshot)
    if ready.truncate_from is not None:
        storage.truncate(ready.truncate_from)
    if ready.entries:
        storage.append(ready.entries)
    if ready.hard_state is not None:
        storage.set_hard_state(ready.hard_state)
