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
start offset (DESIGN: a plain partition's prefix deleted by retention);
installing one empties the log and restarts it there. Its term is the term
of the entry below the log start as the Raft core knew it when the runtime
moved the start (``remember_start``); after a restart, the first epoch of the
log — exact unless the log start falls right at an epoch change.
"""

from __future__ import annotations

import json
import time
from bisect import bisect_right
from collections.abc import Sequence
from pathlib import Path

from kcompat.broker.replication.hard_states import HardStateJournal
from kcompat.log.files import atomic_write
from kcompat.log.partition_log import PartitionLog
from kcompat.log.store import Durable
from kcompat.raft.types import Entry, HardState, Snapshot, SnapshotId
from kcompat.wire import batch as wbatch
from kcompat.wire.records import encode_batch

QUORUM_STATE_FILE = "quorum-state"
CONTROL_LEADER_CHANGE = 2


def leader_change_batch(leader_id: int, now_ms: int) -> bytes:
    """A control batch with one LeaderChange record (key v0 type 2, value v0
    LeaderId and empty voter lists)."""
    key = (0).to_bytes(2, "big") + CONTROL_LEADER_CHANGE.to_bytes(2, "big")
    value = (0).to_bytes(2, "big") + leader_id.to_bytes(4, "big", signed=True) + bytes(8)
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
                out.append(Entry(h.base_offset, h.partition_leader_epoch,
                                 bytes(chunk[at : at + h.size]), h.last_offset_delta + 1,
                                 h.is_control))
                max_bytes -= h.size
                pos = h.next_offset
            if max_bytes <= 0:
                break
        return out

    def snapshot(self) -> Snapshot:
        return Snapshot(self.snapshot_id())

    # -- WritableLogStorage --------------------------------------------------------

    def install_snapshot(self, snapshot: Snapshot) -> None:
        self.plog.reset_to(snapshot.id.end)
        self._start_id = snapshot.id

    def compact(self, snapshot: Snapshot) -> None:
        self.plog.delete_records_before(snapshot.id.end)
        self._start_id = snapshot.id

    def truncate(self, offset: int) -> None:
        self.plog.truncate_to(offset)

    def append(self, entries: Sequence[Entry]) -> None:
        for entry in entries:
            self.append_now(entry)

    def append_now(self, entry: Entry, data: bytes | memoryview | None = None) -> None:
        """Write ``entry`` (``data`` overrides its bytes) unless already there."""
        plog = self.plog
        if entry.index < plog.log_end_offset:
            if self.term_at(entry.index) == entry.term:
                return
            plog.truncate_to(entry.index)
        assert entry.index >= plog.log_end_offset, (
            f"{plog.directory.name}: entry at {entry.index}, log end {plog.log_end_offset}")
        if entry.control and not entry.data:
            raw: bytes | memoryview = leader_change_batch(self.node_id, now_ms())
        else:
            raw = entry.data if data is None else data
        view = memoryview(raw).toreadonly()
        header = wbatch.parse_header(view)
        written = plog.append(view, header, entry.term, now_ms(), base_offset=entry.index)
        assert written.next_offset == entry.end, "entry count disagrees with its batch"

    def trim(self, end: int) -> None:
        """Drop a stale pre-written tail past ``end`` (the core's log end)."""
        if self.plog.log_end_offset > end:
            self.plog.truncate_to(end)

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
