"""Safety invariants of a Raft cluster, checked after every Ready.

Theory of operation
-------------------
``InvariantChecker`` watches every node's Ready (after it was persisted) and
keeps a little history; a violation raises ``InvariantViolation``. Precisely:

* **Election safety** (Raft §5.2): at most one node is ever leader of a term.
* **Log matching** (§5.3): an entry is identified by (end offset, term). Every
  entry ever written is registered with its payload and its predecessor's
  (end offset, term); a second write of the same identity must agree on both.
  By induction, two logs holding the same identity agree on the whole prefix.
* **Committed entries never change**: when a node's high watermark moves, the
  entries newly below it (read from its storage) are recorded as committed; a
  committed offset recorded twice must be the same entry. The cluster-wide
  committed prefix is the largest high watermark ever reported, so it is
  monotonic by construction and its content immutable by this check.
* **Leader completeness** (§5.4): when a node first acts as leader of a term,
  its log holds every committed entry at or above its log start (and its
  snapshot, if it ends inside the committed prefix, ends on a committed
  entry of the same term). Since leaders only append, this covers the term.
* **High watermark monotonic per node while alive**: a node's reported high
  watermark never goes down until it crashes (``on_crash`` forgets it).
* **Snapshots are committed**: a snapshot a node installs ends on a committed
  entry boundary with that entry's term, if that offset is known committed.
* **One voter change at a time** (thesis §4.1): no log ever holds more than
  one configuration entry at or past the cluster's committed prefix — a
  leader appends a change only once the previous one is committed, and every
  log is a prefix of some leader's log.
* **The voter set follows the log**: after each Ready a node's voter set in
  force is the one its stored log ends with (its last configuration entry,
  else its snapshot's, else the configured) — so a change truncated away, or
  lost in a crash, is reverted.
* **Quiet means settled** (``check_quiesced``, for quiescent groups): a
  quiesced leader's whole log is committed and durable; a quiesced follower
  knows its leader and its high watermark is its log end (it stopped only on
  the leader's word that it has everything).
"""

from __future__ import annotations

from kcompat.raft import NO_NODE, Entry, Raft, Ready, Role
from kcompat.testing.memory_storage import MemoryStorage


class InvariantViolation(AssertionError):
    pass


class InvariantChecker:
    def __init__(self) -> None:
        self.leaders: dict[int, int] = {}
        self.written: dict[tuple[int, int], tuple[bytes, int, int]] = {}
        self.committed: dict[int, Entry] = {}  # by entry start offset
        self.committed_terms: dict[int, int] = {}  # entry end offset -> term
        self.committed_end = 0
        self.hw: dict[int, int] = {}
        self.checked_leaders: set[tuple[int, int]] = set()

    def on_crash(self, node_id: int) -> None:
        self.hw.pop(node_id, None)

    def on_ready(self, node_id: int, raft: Raft, storage: MemoryStorage, ready: Ready) -> None:
        if ready.snapshot is not None:
            self._check_snapshot(node_id, ready.snapshot.id.end, ready.snapshot.id.term)
        if ready.entries:
            self._check_written(node_id, storage, ready.entries)
        self._check_hw(node_id, storage, ready.high_watermark)
        if ready.entries or ready.snapshot is not None or ready.truncate_from is not None:
            self._check_config(node_id, raft, storage)
        if raft.role is Role.LEADER:
            self._check_leader(node_id, raft)

    def check_quiesced(self, node_id: int, raft: Raft) -> None:
        """Quiet means settled (see above); call after each processed Ready."""
        if not raft.quiesced:
            return
        log = raft.log
        if raft.role is Role.LEADER:
            if not raft.high_watermark == log.end == log.stable_end:
                what = f"hw {raft.high_watermark}, log end {log.end}, durable {log.stable_end}"
                self._fail(node_id, f"quiesced leader with {what}")
        elif raft.leader == NO_NODE or raft.high_watermark != log.end:
            what = f"leader {raft.leader}, hw {raft.high_watermark}, log end {log.end}"
            self._fail(node_id, f"quiesced {raft.role.value} with {what}")

    def _fail(self, node_id: int, what: str) -> None:
        raise InvariantViolation(f"node {node_id}: {what}")

    def _check_written(self, node_id: int, storage: MemoryStorage, entries: tuple[Entry, ...]) -> None:
        first = entries[0]
        before = storage.entry_at(first.index - 1)
        prev_term = before.term if before is not None else storage.snapshot_id().term
        for e in entries:
            identity = (e.data, e.index, prev_term)
            known = self.written.setdefault((e.end, e.term), identity)
            if known != identity:
                self._fail(node_id, f"log matching: entry {e.end}/{e.term} is {identity}, was {known}")
            prev_term = e.term

    def _check_hw(self, node_id: int, storage: MemoryStorage, hw: int) -> None:
        old = self.hw.get(node_id, storage.snapshot_id().end)
        if hw < old:
            self._fail(node_id, f"high watermark went back from {old} to {hw}")
        self.hw[node_id] = hw
        offset = max(old, storage.snapshot_id().end)
        while offset < hw:
            e = storage.entry_at(offset)
            if e is None:
                self._fail(node_id, f"committed offset {offset} missing from its log")
                return
            known = self.committed.setdefault(e.index, e)
            if known != e:
                self._fail(node_id, f"committed entry at {e.index} is {e}, was {known}")
            self.committed_terms[e.end] = e.term
            offset = e.end
        self.committed_end = max(self.committed_end, hw)

    def _check_config(self, node_id: int, raft: Raft, storage: MemoryStorage) -> None:
        stored = storage.voters()
        if raft.log.voters != stored:
            self._fail(node_id, f"voters {raft.log.voters} in force, its log ends with {stored}")
        pending = storage.configs_from(self.committed_end)
        if pending > 1:
            entries = [e for e in storage.all_entries()
                       if e.voters is not None and e.index >= self.committed_end]
            self._fail(node_id, f"{pending} uncommitted voter changes (committed "
                       f"below {self.committed_end}): {entries}")

    def _check_leader(self, node_id: int, raft: Raft) -> None:
        term = raft.term
        leader = self.leaders.setdefault(term, node_id)
        if leader != node_id:
            self._fail(node_id, f"election safety: {leader} and {node_id} lead term {term}")
        if (term, node_id) in self.checked_leaders:
            return
        self.checked_leaders.add((term, node_id))
        log = raft.log
        self._check_snapshot(node_id, log.start, log.snapshot_id.term)
        for index, e in self.committed.items():
            if index >= log.start and log.term_at(e.end - 1) != e.term:
                self._fail(node_id, f"leader completeness: term {term} leader lacks {e}")

    def _check_snapshot(self, node_id: int, end: int, term: int) -> None:
        if end == 0 or end > self.committed_end:
            return
        known = self.committed_terms.get(end)
        if known is None or known != term:
            self._fail(node_id, f"snapshot {end}/{term} is not a committed boundary ({known})")
