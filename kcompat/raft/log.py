"""The core's view of the Raft log: its shape in memory, payloads in storage.

Theory of operation
-------------------
``RaftLog`` knows, for the whole log ``[start, end)``:

* ``snapshot_id`` — everything below ``start`` is in a snapshot whose last
  entry has term ``snapshot_id.term``;
* ``epochs`` — (term, first offset) for each term with entries in the log,
  strictly increasing (Kafka's leader-epoch cache). The term at any offset is
  found by bisection, so the core never reads storage to learn a term.

Payloads live in two places. Storage holds ``[start, stable_end)`` exactly.
``unstable`` holds every entry at or after ``stable_end``: entries handed out
in a Ready but not yet acknowledged by ``advance``, and entries appended since.
``written_end`` is where storage's log will end once every Ready handed out so
far is applied; a truncation below it (the storage holds, or is about to
hold, entries that are no longer in the log) records ``truncate_pending``,
which the next Ready carries so storage drops its stale tail. Because the
runtime advances each Ready before asking for the next, at ``ready()`` time
``stable_end == written_end`` and every unstable entry is new to storage.

Offsets handed to ``truncate`` and ``entries_from`` must be entry boundaries
(a fetch offset is always a log end; a truncation point is always the start of
an epoch — see ``end_for_term``), so an entry is never split. Below the
commit index the log may have gaps: a partition's log cleaner removes whole
batches of committed entries (never the first of an epoch), so
``entries_from`` may start past ``lo`` and ``append`` may land past ``end``.

Membership: ``configs`` lists (offset, voter set) for each configuration
entry in ``[start, end)`` and ``base_voters`` is the voter set of the snapshot
(``None``: the configured voters) — so ``voters``, the set in force, is the
last configuration *in the log*, committed or not, and follows the log as it
is appended, truncated, compacted and replaced by a snapshot. A restart reads
both from storage (``storage.voter_history``, optional: a storage that never
held a configuration entry need not have it).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from kcompat.raft.storage import LogStorage, voter_history
from kcompat.raft.types import Entry, EpochEnd, Snapshot, SnapshotId


class RaftLog:
    def __init__(self, storage: LogStorage) -> None:
        self.storage = storage
        self.snapshot_id: SnapshotId = storage.snapshot_id()
        self.end: int = storage.log_end()
        self.epochs: list[tuple[int, int]] = list(storage.epochs())
        self.stable_end: int = self.end
        self.written_end: int = self.end
        self.unstable: list[Entry] = []
        self.truncate_pending: int | None = None
        self.snapshot_pending: Snapshot | None = None
        self.base_voters, configs = voter_history(storage)
        self.configs: list[tuple[int, frozenset[int]]] = list(configs)
        assert self.end >= self.start, "log end below log start"
        assert not self.epochs or self.epochs[0][1] == self.start, "epochs must start at start"

    # -- shape -----------------------------------------------------------------

    @property
    def start(self) -> int:
        return self.snapshot_id.end

    @property
    def last_term(self) -> int:
        """The term of the last entry (of the snapshot if the log is empty)."""
        return self.epochs[-1][0] if self.epochs else self.snapshot_id.term

    @property
    def voters(self) -> frozenset[int] | None:
        """The voter set in force: the last configuration in the log (None:
        the configured voters)."""
        return self.configs[-1][1] if self.configs else self.base_voters

    def voters_at(self, end: int) -> frozenset[int] | None:
        """The voter set in force once the entries below ``end`` are applied
        (what a snapshot ending at ``end`` records)."""
        i = bisect_left(self.configs, end, key=lambda c: c[0])
        return self.configs[i - 1][1] if i else self.base_voters

    @property
    def pending_config(self) -> int | None:
        """The offset of the last configuration entry (None if the log has none)."""
        return self.configs[-1][0] if self.configs else None

    def term_at(self, offset: int) -> int:
        """The term of the entry holding ``offset``; ``start - 1`` gives the
        snapshot's term. -1 when the offset is outside the known log."""
        if offset == self.start - 1:
            return self.snapshot_id.term
        if offset < self.start or offset >= self.end:
            return -1
        i = bisect_right(self.epochs, offset, key=lambda e: e[1])
        return self.epochs[i - 1][0]

    def end_for_term(self, term: int) -> EpochEnd | None:
        """OffsetForLeaderEpoch over this log: the largest term <= ``term`` and
        the offset where the next higher term starts (``end`` for the last
        term). None when ``term`` is below the snapshot's term: the answer lies
        inside the snapshot."""
        if term < self.snapshot_id.term:
            return None
        i = bisect_right(self.epochs, term, key=lambda e: e[0])
        found = self.epochs[i - 1][0] if i else self.snapshot_id.term
        end = self.epochs[i][1] if i < len(self.epochs) else self.end
        return EpochEnd(found, end)

    def is_up_to_date(self, last_term: int, log_end: int) -> bool:
        """Raft §5.4.1: a candidate's log is at least as up-to-date as ours."""
        return (last_term, log_end) >= (self.last_term, self.end)

    # -- changes ---------------------------------------------------------------

    def append(self, entry: Entry) -> None:
        """Append ``entry`` at the log end — or past it, over a gap the leader's
        log cleaner left (committed offsets whose batches it removed)."""
        assert entry.index >= self.end, f"entry at {entry.index}, log end {self.end}"
        assert entry.term >= self.last_term, "terms never go down along the log"
        if not self.epochs or entry.term > self.epochs[-1][0]:
            self.epochs.append((entry.term, entry.index))
        if entry.voters is not None:
            self.configs.append((entry.index, entry.voters))
        self.unstable.append(entry)
        self.end = entry.end

    def truncate(self, offset: int) -> None:
        """Drop every entry at or after ``offset`` (an entry boundary)."""
        assert offset >= self.start, f"truncate to {offset} below log start {self.start}"
        if offset >= self.end:
            return
        while self.epochs and self.epochs[-1][1] >= offset:
            self.epochs.pop()
        while self.configs and self.configs[-1][0] >= offset:
            self.configs.pop()  # an uncommitted voter change reverts with its entry
        self.end = offset
        self.stable_end = min(self.stable_end, offset)
        keep = bisect_right(self.unstable, offset - 1, key=lambda e: e.index)
        del self.unstable[keep:]
        assert not self.unstable or self.unstable[-1].end == offset, "split an entry"
        if offset < self.written_end:
            self.written_end = offset
            pending = self.truncate_pending
            self.truncate_pending = offset if pending is None else min(pending, offset)

    def restore(self, snapshot: Snapshot) -> None:
        """Replace the whole log by ``snapshot`` (a follower installing one)."""
        self.snapshot_id = snapshot.id
        self.end = self.stable_end = self.written_end = snapshot.id.end
        self.epochs = []
        self.base_voters, self.configs = snapshot.voters, []
        self.unstable.clear()
        self.truncate_pending = None
        self.snapshot_pending = snapshot

    def compact(self, snapshot_id: SnapshotId) -> None:
        """Storage now holds a snapshot ending at ``snapshot_id.end`` and has
        dropped the entries below it."""
        new_start = snapshot_id.end
        assert self.start <= new_start <= self.stable_end, "compact outside the stable log"
        assert snapshot_id.term == self.term_at(new_start - 1), "snapshot term mismatch"
        below = bisect_right(self.epochs, new_start, key=lambda e: e[1])
        if below and new_start < self.end:
            term = self.epochs[below - 1][0]
            self.epochs[: below] = [(term, new_start)]
        else:
            del self.epochs[:below]
        folded = bisect_left(self.configs, new_start, key=lambda c: c[0])
        if folded:
            self.base_voters = self.configs[folded - 1][1]
            del self.configs[:folded]
        self.snapshot_id = snapshot_id

    def handed_out(self) -> None:
        """``ready()`` has handed every pending change to the runtime."""
        assert self.stable_end == self.written_end, "a Ready was not advanced"
        self.written_end = self.end
        self.truncate_pending = None
        self.snapshot_pending = None

    def stable_to(self, end: int) -> None:
        """``advance``: storage now holds everything below ``end`` — less if the
        log was truncated or replaced by a snapshot since that Ready."""
        if self.snapshot_pending is not None:
            return
        end = min(end, self.written_end)
        if end <= self.stable_end:
            return
        keep = bisect_right(self.unstable, end - 1, key=lambda e: e.index)
        del self.unstable[:keep]
        self.stable_end = end

    # -- reads -----------------------------------------------------------------

    def entries_from(self, lo: int, max_bytes: int) -> list[Entry]:
        """Whole entries from ``lo`` (an entry boundary) up to about
        ``max_bytes`` — at least one if ``lo < end``."""
        if lo >= self.end:
            return []
        out: list[Entry] = []
        if lo < self.stable_end:
            out = self.storage.entries(lo, self.stable_end, max_bytes)
            assert out and out[0].index >= lo, f"storage has no entry at or after {lo}"
            lo = out[-1].end
            max_bytes -= sum(e.size_bytes for e in out)
            if lo < self.stable_end or max_bytes <= 0:
                return out
        i = bisect_right(self.unstable, lo - 1, key=lambda e: e.index)
        for e in self.unstable[i:]:
            if out and (max_bytes <= 0 or e.size_bytes > max_bytes):
                break
            out.append(e)
            max_bytes -= e.size_bytes
        return out
