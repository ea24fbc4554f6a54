"""``WritableLogStorage`` over a ``PartitionLog``: the partition log is the Raft log.

Theory of operation
-------------------
This is the mapping table of ``kcompat.raft.storage`` made real. An entry is
one RecordBatch: ``Entry(baseOffset, partitionLeaderEpoch, bytes,
lastOffsetDelta + 1, isControl)``. Appending an entry writes its bytes through
``PartitionLog.append`` with ``leader_epoch = entry.term``; the log rewrites
``baseOffset`` and ``partitionLeaderEpoch`` (both outside the CRC), so the
bytes a leader proposes or a follower receives need not carry them. The
leader-change entry the core appends on winning an election (empty data,
``control``) becomes a real control batch (type 2, KRaft's LeaderChange), which
clients skip like any control batch. The metadata log has one per election;
a partition only when its new leader holds entries not yet known committed
(``RaftConfig.always_leader_change``), so a new topic starts at offset 0.
A configuration entry (``Entry.voters``) becomes a KRaftVoters control batch
(type 6, a ``VotersRecord``: ``voters_record``). Reading back, ``entries``
looks at the control flag of each batch first: an ordinary batch costs what
it always did, a control batch's first key is peeked at, and only a type-6
batch is decoded, so the entries a leader sends and a restart replays carry
their voters.

Pre-writes. On the leader, a produce must pass the idempotence check against
producer state that includes every earlier batch, and the offset it answers
must be final, all without an await. So the runtime writes a proposed batch
into the partition log at once (``append_now``), before the Ready that carries
it; ``append`` then skips an entry already present with the same term (same
index and term means the same entry in Raft). Anything else already present
at or past an entry's index is stale — a pre-write of a leader that lost its
term — and is truncated first; ``trim`` removes such a stale tail once the
core's log is known to end earlier. Durability is unaffected: nothing is
acknowledged or counted towards the commit before the driver's fsync.

Hard state (term and vote) lives in ``quorum-state`` in the partition
directory, replaced atomically. A brand-new partition starts in term -1, so
its first leader's term — its leader epoch — is 0, as in Kafka; a log
without the file (written by a single-node broker before it was a quorum of
one) starts in the term of its last batch. The snapshot is the empty snapshot at the log
start offset (as for a plain partition's prefix deleted by retention);
installing one empties the log and restarts it there. Its term is the term
of the entry below the log start as the Raft core knew it when the runtime
moved the start (``remember_start``); after a restart, the first epoch of the
log — exact unless the log start falls right at an epoch change.

Membership. ``quorum-voters`` in the partition directory (replaced
atomically) records the voter set of each snapshot installed or folded in
(end, voters) and the offset and voter set of each configuration entry
written; a partition that never had one has no file, and then membership
costs nothing beyond looking for the file once on open. The record is
written *before* the log changes that need it: before a configuration
entry's batch is appended, and before an installed snapshot resets the log;
a truncation that drops a configuration entry is durable (the log syncs
it) before the record forgets it. So the record never misses an entry the log holds; it
may name one a crash lost, or an install that never happened, and
``voter_history`` (run on open and when a Raft core starts over this
storage) drops those after reading the batch at each recorded offset in the
log — one read per configuration entry, no scan. The voter set at the log
start (``Snapshot.voters``, ``snapshot``) is the latest of a recorded
snapshot ending at or below it and a configuration entry below it: entries
below the log start stay recorded until the next write folds them into one
snapshot record, so retention and DeleteRecords, which move the log start
without this class, need no write of their own and leave nothing to lose in
a crash. The metadata log's storage is this class too
(``MetadataLogStorage`` adds checkpoint files).
"""

from __future__ import annotations

import json
import time
from bisect import bisect_right
from collections.abc import Sequence
from pathlib import Path

from kcompat.broker.replication.hard_states import HardStateJournal
from kcompat.broker.replication.voters_record import batch_voters, voters_batch
from kcompat.log.files import atomic_write
from kcompat.log.partition_log import PartitionLog
from kcompat.log.store import Durable
from kcompat.raft.types import Entry, HardState, Snapshot, SnapshotId
from kcompat.wire import batch as wbatch
from kcompat.wire.records import encode_batch

QUORUM_STATE_FILE = "quorum-state"
VOTERS_FILE = "quorum-voters"
CONTROL_LEADER_CHANGE = 2


def leader_change_batch(leader_id: int, now_ms: int) -> bytes:
    """A control batch with one LeaderChange record (key v0 type 2, value
    LeaderChangeMessage v0 — a flexible version: LeaderId, then Voters and
    GrantingVoters as empty compact arrays (length + 1 = 1), no tagged fields;
    Kafka's DumpLogSegments reads it)."""
    key = (0).to_bytes(2, "big") + CONTROL_LEADER_CHANGE.to_bytes(2, "big")
    value = (0).to_bytes(2, "big") + leader_id.to_bytes(4, "big", signed=True) + b"\x01\x01\x00"
    return encode_batch([(key, value, (), now_ms)], control=True)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class PartitionLogStorage:
    def __init__(self, plog: PartitionLog, node_id: int, fresh_term: int = 0,
                 journal: HardStateJournal | None = None, gid: int = 0) -> None:
        self.plog = plog
        self.node_id = node_id
        self._path = Path(plog.directory) / QUORUM_STATE_FILE
        self._store = plog.store
        # partition groups keep term and vote in the broker's journal (one
        # fsync per round for all groups); the metadata log in its own file
        self.journal = journal
        self.gid = gid
        self.durable_hard_state = True  # False: a lone replica, flush.mode=never
        self._hard_state = self._load_hard_state(fresh_term)
        self._hard_state_unwritten = False
        self._start_id: SnapshotId | None = None
        # membership (see "Membership" above): (end, voter set) of each
        # snapshot recorded, (offset, voter set) of each configuration entry
        self._voters_path = Path(plog.directory) / VOTERS_FILE
        self._bases: list[tuple[int, frozenset[int] | None]] = []
        self._configs: list[tuple[int, frozenset[int]]] = []
        self._tracking = self._load_voters()
        if self._tracking:
            self.voter_history()  # drop what a crash left recorded but not logged

    def _load_hard_state(self, fresh_term: int) -> HardState:
        """The stored term and vote; for a brand-new empty log ``fresh_term``
        (-1 for partitions: their first leader is elected in term 0, Kafka's
        first leader epoch)."""
        if self.journal is not None and (journaled := self.journal.get(self.gid)) is not None:
            return journaled
        try:
            doc = json.loads(self._store.read(self._path))
            return HardState(int(doc["term"]), int(doc["vote"]))
        except (OSError, ValueError, KeyError, TypeError):
            empty = self.plog.log_end_offset == 0
            return HardState(fresh_term if empty else max(self.plog.latest_epoch, 0))

    # -- LogStorage --------------------------------------------------------------

    def hard_state(self) -> HardState:
        return self._hard_state

    def remember_start(self, sid: SnapshotId) -> None:
        """The Raft core's exact id of the empty snapshot at the log start
        (its term is the term of the entry just below the start)."""
        self._start_id = sid

    def snapshot_id(self) -> SnapshotId:
        start = self.plog.log_start_offset
        if start == 0:
            return SnapshotId(0, 0)
        if self._start_id is not None and self._start_id.end == start:
            return self._start_id
        epochs = self.epochs()
        return SnapshotId(start, epochs[0][0] if epochs else max(self.plog.latest_epoch, 0))

    def log_end(self) -> int:
        return self.plog.log_end_offset

    def epochs(self) -> list[tuple[int, int]]:
        start, end = self.plog.log_start_offset, self.plog.log_end_offset
        out = [(e, max(s, start)) for e, s in self.plog.leader_epochs if s < end]
        return out

    def entries(self, lo: int, hi: int, max_bytes: int) -> list[Entry]:
        out: list[Entry] = []
        pos = lo
        while pos < hi:
            chunk = self.plog.read(pos, max(max_bytes, 1), hi)
            if not chunk:
                break
            for at, h in wbatch.iter_headers(chunk):
                if h.next_offset > hi or (out and max_bytes <= 0):
                    return out
                data = bytes(chunk[at : at + h.size])
                if h.is_control:  # a configuration entry is a KRaftVoters control batch
                    out.append(Entry(h.base_offset, h.partition_leader_epoch, data,
                                     h.last_offset_delta + 1, True, batch_voters(data)))
                else:
                    out.append(Entry(h.base_offset, h.partition_leader_epoch, data,
                                     h.last_offset_delta + 1))
                max_bytes -= h.size
                pos = h.next_offset
            if max_bytes <= 0:
                break
        return out

    def snapshot(self) -> Snapshot:
        return Snapshot(self.snapshot_id(), b"", self.start_voters())

    def start_voters(self) -> frozenset[int] | None:
        """The voter set in force at the log start (``Snapshot.voters``)."""
        return self._voters_at(self.plog.log_start_offset) if self._tracking else None

    # -- MembershipStorage ---------------------------------------------------------

    def voter_history(self) -> tuple[frozenset[int] | None, list[tuple[int, frozenset[int]]]]:
        """The voter set at the log start and the configuration entries in the
        log. Free for a log that never had one; else the recorded ones are
        checked against the log (a crash may have lost an entry recorded just
        before its batch was written, or a truncation not yet recorded)."""
        if not self._tracking:
            return None, []
        plog = self.plog
        start, end = plog.log_start_offset, plog.log_end_offset
        bases = [b for b in self._bases if b[0] <= start]  # an install that did not happen
        configs = []
        for offset, voters in self._configs:
            if offset >= start:
                found = self._config_at(offset) if offset < end else None
                if found is None:
                    continue
                voters = found
            configs.append((offset, voters))
        if (bases, configs) != (self._bases, self._configs):
            self._bases, self._configs = bases, configs
            self._write_voters()
        return self._voters_at(start), [c for c in configs if c[0] >= start]

    def _config_at(self, offset: int) -> frozenset[int] | None:
        """The voter set of the KRaftVoters batch at ``offset`` (None: none there)."""
        for batch, header in self.plog.batches(offset, offset + 1):
            if header.base_offset == offset and header.is_control:
                return batch_voters(batch)
            return None
        return None

    def _voters_at(self, end: int) -> frozenset[int] | None:
        """The voter set in force once the entries below ``end`` are applied:
        the latest recorded snapshot ending at or below ``end`` or configuration
        entry below it (a snapshot wins a tie: it is the leader's word)."""
        best_key, best = -1, None
        for base_end, voters in self._bases:
            if best_key <= base_end <= end:
                best_key, best = base_end, voters
        for offset, voters in self._configs:
            if best_key < offset + 1 <= end:
                best_key, best = offset + 1, voters
        return best

    def _load_voters(self) -> bool:
        """Read the recorded membership; False when there is none (a log that
        never held a configuration entry: nothing more to do, ever)."""
        try:
            doc = json.loads(self._store.read(self._voters_path))
        except FileNotFoundError:
            return False
        except ValueError as e:
            raise ValueError(f"{self._voters_path}: unreadable voter record: {e!r}") from None
        try:
            self._bases = [(int(end), None if v is None else frozenset(int(x) for x in v))
                           for end, v in doc["bases"]]
            self._configs = [(int(offset), frozenset(int(x) for x in v))
                             for offset, v in doc["configs"]]
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{self._voters_path}: unreadable voter record: {e!r}") from None
        return True

    def _write_voters(self) -> None:
        """Record the membership durably (before the log changes that need it).
        Whatever lies below the log start folds into one snapshot record there."""
        start = self.plog.log_start_offset
        bases = [(start, self._voters_at(start))] + [b for b in self._bases if b[0] > start]
        configs = [c for c in self._configs if c[0] >= start]
        self._bases, self._configs = bases, configs
        doc = {"bases": [[end, None if v is None else sorted(v)] for end, v in bases],
               "configs": [[offset, sorted(v)] for offset, v in configs]}
        atomic_write(self._voters_path, json.dumps(doc).encode(), self._store)
        self._tracking = True

    # -- WritableLogStorage --------------------------------------------------------

    def install_snapshot(self, snapshot: Snapshot) -> None:
        end = snapshot.id.end
        if self._tracking or snapshot.voters is not None:
            # recorded first, beside the old records: a crash before the log is
            # reset leaves a record past the log start, dropped on restart
            self._bases.append((end, snapshot.voters))
            self._write_voters()
        self.plog.reset_to(end)
        self._start_id = snapshot.id
        if self._tracking:
            self._bases, self._configs = [(end, snapshot.voters)], []

    def compact(self, snapshot: Snapshot) -> None:
        # the configuration entries below the new start stay recorded: the
        # voter set there needs no write (``_voters_at``)
        self.plog.delete_records_before(snapshot.id.end)
        self._start_id = snapshot.id

    def truncate(self, offset: int) -> None:
        self._truncate(offset)

    def _truncate(self, offset: int) -> None:
        """Drop the log from ``offset``; a configuration entry dropped with it
        is forgotten once the truncation is durable (a record never misses an
        entry the log holds)."""
        configs = self._configs
        if not configs or configs[-1][0] < offset:
            self.plog.truncate_to(offset)
            return
        self.plog.truncate_to(offset)  # durable once done (the log syncs a truncation)
        self._configs = [c for c in configs if c[0] < offset]
        self._write_voters()

    def append(self, entries: Sequence[Entry]) -> None:
        for entry in entries:
            self.append_now(entry)

    def append_now(self, entry: Entry, data: bytes | memoryview | None = None) -> None:
        """Write ``entry`` (``data`` overrides its bytes) unless already there."""
        plog = self.plog
        if entry.index < plog.log_end_offset:
            if self.term_at(entry.index) == entry.term:
                return
            self._truncate(entry.index)
        assert entry.index >= plog.log_end_offset, (
            f"{plog.directory.name}: entry at {entry.index}, log end {plog.log_end_offset}")
        if entry.voters is not None:
            # recorded before the batch is written: a record may name an entry
            # the log lost in a crash (checked on restart), never miss one
            self._configs = [c for c in self._configs if c[0] < entry.index]
            self._configs.append((entry.index, entry.voters))
            self._write_voters()
        if entry.control and not entry.data:
            raw: bytes | memoryview = (
                leader_change_batch(self.node_id, now_ms()) if entry.voters is None
                else voters_batch(entry.voters, now_ms()))
        else:
            raw = entry.data if data is None else data
        view = memoryview(raw).toreadonly()
        header = wbatch.parse_header(view)
        written = plog.append(view, header, entry.term, now_ms(), base_offset=entry.index)
        assert written.next_offset == entry.end, "entry count disagrees with its batch"

    def trim(self, end: int) -> None:
        """Drop a stale pre-written tail past ``end`` (the core's log end)."""
        if self.plog.log_end_offset > end:
            self._truncate(end)

    def set_hard_state(self, hard_state: HardState) -> None:
        """Taken now; written durably by the journal (partition groups) or
        by ``write_hard_state`` (the metadata log) in the driver's sync pass,
        before it sends anything."""
        self._hard_state = hard_state
        if self.journal is not None:
            self.journal.put(self.gid, hard_state, self.durable_hard_state)
        else:
            self._hard_state_unwritten = True

    def write_hard_state(self) -> None:
        """Write the term and vote taken last, if not written yet."""
        if self._hard_state_unwritten:
            self._hard_state_unwritten = False
            doc = {"term": self._hard_state.term, "vote": self._hard_state.vote}
            atomic_write(self._path, json.dumps(doc).encode(), self._store)

    def dirty_files(self) -> list[Durable]:
        """``Syncable`` for the flusher's pass: the hard state to write durably
        (after a new partition's directory entries, so it survives with them)."""
        if not self._hard_state_unwritten:
            return []
        return [*self.plog.take_dir_syncs(), _HardStateWrite(self)]

    def sync(self) -> None:
        self.plog.flush()

    def term_at(self, offset: int) -> int:
        """The leader epoch of the batch holding ``offset`` (-1 outside the log)."""
        epochs = self.plog.leader_epochs
        i = bisect_right(epochs, offset, key=lambda e: e[1])
        return epochs[i - 1][0] if i else -1


class _HardStateWrite:
    """A pending hard-state write, synced like a file by the flusher's pass."""

    __slots__ = ("storage",)

    def __init__(self, storage: PartitionLogStorage) -> None:
        self.storage = storage

    def sync(self) -> None:
        self.storage.write_hard_state()
