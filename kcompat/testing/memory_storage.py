"""An in-memory Raft log storage that can crash and lose unsynced writes.

Theory of operation
-------------------
``MemoryStorage`` implements ``kcompat.raft.storage.WritableLogStorage``. It
keeps two copies of the state — hard state, snapshot and entries: the
*current* one every read sees, and the *durable* one. Each write changes the
current state at once and is appended to a journal; ``sync`` replays the
journal onto the durable state and clears it. ``crash`` throws the current
state away and restarts from the durable one plus a prefix of the journal
(all of it lost by default; with an ``rng`` a random prefix survives, as a
file system that keeps writes in order but not all of them). So a runtime
that sends a message before syncing what the message depends on is caught.

``compact`` is the application's side of snapshots: it records a snapshot of
the committed prefix and drops the entries below it (it is journalled too).

Membership: configuration entries are kept like any entry (``Entry.voters``)
and indexed by offset, so ``voter_history`` (``raft.storage.MembershipStorage``)
and ``voters`` answer without scanning the log; the snapshot keeps its
``voters``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from random import Random

from kcompat.raft.types import Entry, HardState, Snapshot, SnapshotId


@dataclass(slots=True)
class _State:
    hard_state: HardState = HardState()
    snapshot: Snapshot = Snapshot(SnapshotId(0, 0))
    entries: list[Entry] = field(default_factory=list)
    configs: list[int] = field(default_factory=list)  # offsets of configuration entries

    def copy(self) -> _State:
        return _State(self.hard_state, self.snapshot, list(self.entries), list(self.configs))

    def drop_configs(self, lo: int, hi: int | None = None) -> None:
        """Forget the configuration entries at offsets in ``[lo, hi)``."""
        self.configs = [c for c in self.configs if not (lo <= c and (hi is None or c < hi))]

    @property
    def log_end(self) -> int:
        return self.entries[-1].end if self.entries else self.snapshot.id.end

    def position(self, offset: int) -> int:
        """List position of the entry starting at ``offset`` (or len)."""
        i = bisect_left(self.entries, offset, key=lambda e: e.index)
        assert i == len(self.entries) or self.entries[i].index == offset, (
            f"{offset} is not an entry boundary"
        )
        return i


_Op = tuple[str, object]


def _apply(state: _State, op: _Op) -> None:
    kind, arg = op
    if kind == "hard_state":
        assert isinstance(arg, HardState)
        state.hard_state = arg
    elif kind == "install":
        assert isinstance(arg, Snapshot)
        state.snapshot = arg
        state.entries.clear()
        state.configs.clear()
    elif kind == "compact":
        assert isinstance(arg, Snapshot)
        del state.entries[: state.position(arg.id.end)]
        state.drop_configs(0, arg.id.end)
        state.snapshot = arg
    elif kind == "truncate":
        assert isinstance(arg, int)
        del state.entries[state.position(max(arg, state.snapshot.id.end)) :]
        state.drop_configs(arg)
    elif kind == "append":
        assert isinstance(arg, tuple)
        assert not arg or arg[0].index == state.log_end, "append must start at the log end"
        state.entries.extend(arg)
        state.configs.extend(e.index for e in arg if e.voters is not None)
    else:  # pragma: no cover - a bug in this module
        raise AssertionError(kind)


class MemoryStorage:
    def __init__(self) -> None:
        self._current = _State()
        self._durable = _State()
        self._journal: list[_Op] = []
        self.syncs = 0

    # -- LogStorage --------------------------------------------------------------

    def hard_state(self) -> HardState:
        return self._current.hard_state

    def snapshot_id(self) -> SnapshotId:
        return self._current.snapshot.id

    def snapshot(self) -> Snapshot:
        return self._current.snapshot

    def log_end(self) -> int:
        return self._current.log_end

    def epochs(self) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        for e in self._current.entries:
            if not out or e.term > out[-1][0]:
                out.append((e.term, e.index))
        return out

    def voter_history(self) -> tuple[frozenset[int] | None, list[tuple[int, frozenset[int]]]]:
        state = self._current
        out = []
        for offset in state.configs:
            voters = state.entries[state.position(offset)].voters
            assert voters is not None
            out.append((offset, voters))
        return state.snapshot.voters, out

    def voters(self) -> frozenset[int] | None:
        """The voter set the stored log ends with (None: the configured)."""
        state = self._current
        if not state.configs:
            return state.snapshot.voters
        return state.entries[state.position(state.configs[-1])].voters

    def configs_from(self, offset: int) -> int:
        """How many configuration entries the log holds at or after ``offset``."""
        return sum(1 for c in self._current.configs if c >= offset)

    def entries(self, lo: int, hi: int, max_bytes: int) -> list[Entry]:
        state = self._current
        out: list[Entry] = []
        for e in state.entries[state.position(lo) :]:
            if e.end > hi or (out and (max_bytes <= 0 or e.size_bytes > max_bytes)):
                break
            out.append(e)
            max_bytes -= e.size_bytes
        return out

    # -- WritableLogStorage ------------------------------------------------------

    def install_snapshot(self, snapshot: Snapshot) -> None:
        self._write(("install", snapshot))

    def compact(self, snapshot: Snapshot) -> None:
        self._write(("compact", snapshot))

    def truncate(self, offset: int) -> None:
        self._write(("truncate", offset))

    def append(self, entries: Sequence[Entry]) -> None:
        self._write(("append", tuple(entries)))

    def set_hard_state(self, hard_state: HardState) -> None:
        self._write(("hard_state", hard_state))

    def sync(self) -> None:
        for op in self._journal:
            _apply(self._durable, op)
        self._journal.clear()
        self.syncs += 1

    # -- faults and inspection ----------------------------------------------------

    def crash(self, rng: Random | None = None) -> int:
        """Lose unsynced writes (all, or a random suffix of them when ``rng`` is
        given); returns how many journalled writes were lost."""
        keep = rng.randint(0, len(self._journal)) if rng is not None else 0
        for op in self._journal[:keep]:
            _apply(self._durable, op)
        lost = len(self._journal) - keep
        self._journal.clear()
        self._current = self._durable.copy()
        return lost

    @property
    def unsynced(self) -> int:
        return len(self._journal)

    def all_entries(self) -> list[Entry]:
        """Every entry of the current log (a copy)."""
        return list(self._current.entries)

    def entry_at(self, offset: int) -> Entry | None:
        state = self._current
        i = bisect_left(state.entries, offset + 1, key=lambda e: e.index) - 1
        if i >= 0 and state.entries[i].index <= offset < state.entries[i].end:
            return state.entries[i]
        return None

    def _write(self, op: _Op) -> None:
        _apply(self._current, op)
        self._journal.append(op)
