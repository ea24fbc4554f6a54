"""Dynamic membership on real partition logs: real Raft cores over
``PartitionLogStorage`` (each on its own ``PartitionLog`` in a tmp dir), their
messages going through the inter-broker codec. A configuration entry is a
KRaftVoters control batch (type 6) at the same offset in every log, clients
skip it, and the voter set in force survives restarts, truncation of an
uncommitted change, retention past the entries and snapshot installation."""

from __future__ import annotations

from pathlib import Path
from random import Random

from kafka.consumer.fetcher import Fetcher
from kafka.record import MemoryRecords
from kafka.structs import TopicPartition

from kcompat.broker.replication import codec
from kcompat.broker.replication.storage import VOTERS_FILE, PartitionLogStorage
from kcompat.broker.replication.voters_record import (
    CONTROL_KRAFT_VOTERS,
    batch_voters,
    control_type,
    decode_voters,
    encode_voters,
    voters_batch,
)
from kcompat.log.config import LogConfig
from kcompat.log.partition_log import PartitionLog
from kcompat.raft import (
    ChangeRefused,
    Entry,
    Message,
    Raft,
    RaftConfig,
    Role,
    Snapshot,
    SnapshotId,
    persist_ready,
)
from kcompat.wire.batch import iter_headers
from kcompat.wire.records import decode_batch, encode_batch

VOTERS = frozenset({1, 2, 3})


class Cluster:
    """Raft cores over partition logs in ``root``, driven step by step."""

    def __init__(self, root: Path, voters: frozenset[int] = VOTERS) -> None:
        self.root = root
        self.voters = voters
        self.nodes: dict[int, Raft] = {}
        self.storages: dict[int, PartitionLogStorage] = {}
        self.inbox: dict[int, list[Message]] = {}
        self.hw: dict[int, int] = {}
        self.cut: set[int] = set()  # nodes cut off from everybody

    def start(self, node: int) -> None:
        plog = PartitionLog.open(self.root / f"n{node}" / "t-0", LogConfig(), 0)
        storage = PartitionLogStorage(plog, node)
        self.storages[node] = storage
        self.inbox[node] = []
        self.nodes[node] = Raft(RaftConfig(node, self.voters), storage, Random(node),
                                self.hw.get(node, 0))

    def restart(self, node: int) -> None:
        self.storages[node].plog.close(clean=False)
        self.start(node)

    def _process(self, node: int) -> bool:
        raft = self.nodes[node]
        if not raft.has_ready():
            return False
        ready = raft.ready()
        storage = self.storages[node]
        persist_ready(storage, ready)
        storage.write_hard_state()
        self.hw[node] = ready.high_watermark
        for m in ready.messages:
            # every message crosses the inter-broker codec, as between brokers
            frame = codec.decode(codec.encode(codec.RaftFrame(node, (m,)))[4:])
            if not ({m.src, m.dst} & self.cut):
                self.inbox[m.dst].extend(frame.messages)
        raft.advance(ready)
        return True

    def stabilize(self) -> None:
        busy = True
        while busy:
            busy = False
            for node in sorted(self.nodes):
                busy |= self._process(node)
            for node in sorted(self.nodes):
                msgs, self.inbox[node] = self.inbox[node], []
                for m in msgs:
                    self.nodes[node].step(m)
                busy |= bool(msgs)

    def tick(self, ticks: int) -> None:
        for _ in range(ticks):
            for node in sorted(self.nodes):
                self.nodes[node].tick()
            self.stabilize()

    def propose(self, node: int, value: bytes) -> Entry:
        entry = self.nodes[node].propose(encode_batch([(None, value, (), 1000)]))
        assert isinstance(entry, Entry), entry
        self.stabilize()
        return entry

    def leader(self) -> int:
        leaders = [n for n, r in self.nodes.items() if r.role is Role.LEADER and n not in self.cut]
        assert len(leaders) == 1, leaders
        return leaders[0]


def _config(result: Entry | ChangeRefused) -> Entry:
    assert isinstance(result, Entry) and result.voters is not None, result
    return result


def _control_batches(storage: PartitionLogStorage) -> dict[int, int]:
    """Offset -> control type of every control batch in the log."""
    plog = storage.plog
    return {h.base_offset: control_type(batch)
            for batch, h in plog.batches(plog.log_start_offset, plog.log_end_offset)
            if h.is_control}


def _configs_on_disk(storage: PartitionLogStorage) -> dict[int, frozenset[int]]:
    """Offset -> voter set of every KRaftVoters batch in the log, read from disk."""
    plog = storage.plog
    out = {}
    for batch, h in plog.batches(plog.log_start_offset, plog.log_end_offset):
        if h.is_control and control_type(batch) == CONTROL_KRAFT_VOTERS:
            voters = batch_voters(batch)
            assert voters is not None
            out[h.base_offset] = voters
    return out


def _grown(tmp_path: Path) -> Cluster:
    """Voters 1-3 led by 1, observer 4 caught up, a few records committed."""
    c = Cluster(tmp_path)
    for node in (1, 2, 3, 4):
        c.start(node)
    c.nodes[1].campaign()
    c.stabilize()
    assert c.nodes[1].role is Role.LEADER
    for i in range(3):
        c.propose(1, b"v%d" % i)
    for _ in range(50):
        if c.nodes[4].leader == 1 and c.nodes[1].caught_up(4):
            break
        c.tick(1)
    assert c.nodes[1].caught_up(4) and not c.nodes[4].is_voter
    return c


def test_voters_record_value_is_kip_853_voters_record_v0() -> None:
    """The value, byte by byte: Version 0, compact array of voters (id,
    directory UUID, compact array of endpoints, kraft.version range, tagged
    fields), tagged fields. Decoding skips endpoints and tagged fields."""
    value = encode_voters(frozenset({7, 2}))
    one = (b"\x00\x00\x00\x02" + bytes(16) + b"\x01" + b"\x00\x00\x00\x01" + b"\x00\x00")
    assert value == b"\x00\x00" + b"\x03" + one + one.replace(b"\x02", b"\x07", 1) + b"\x00"
    assert decode_voters(value) == {2, 7}
    # a voter with an endpoint and a tagged field, as Kafka may write it
    endpoint = b"\x0bCONTROLLER" + b"\x0alocalhost" + b"\x23\x84" + b"\x00"
    rich = (b"\x00\x00" + b"\x02" + b"\x00\x00\x00\x05" + bytes(16) + b"\x02" + endpoint
            + b"\x00\x00\x00\x01" + b"\x00" + b"\x01\x00\x01\xff" + b"\x00")
    assert decode_voters(rich) == {5}


def test_config_entry_is_a_control_batch_clients_skip(tmp_path: Path) -> None:
    """kafka-python's own decoder sees a control batch; its consumer's record
    unpacking (the Fetcher's) reads the records around it and skips it."""
    c = _grown(tmp_path)
    entry = _config(c.nodes[1].add_voter(4))
    c.stabilize()
    c.propose(1, b"after")
    plog = c.storages[4].plog
    raw = plog.read(0, 1 << 20, plog.log_end_offset)
    records = MemoryRecords(raw)
    kinds = []
    while (batch := records.next_batch()) is not None:
        kinds.append((batch.base_offset, batch.is_control_batch))
    assert (entry.index, True) in kinds
    assert [k for k in kinds if k[1]] == [(0, True), (entry.index, True)]  # + leader change
    tp = TopicPartition("t", 0)
    consumed = Fetcher.PartitionRecords(0, tp, MemoryRecords(raw)).take()
    assert [r.value for r in consumed] == [b"v0", b"v1", b"v2", b"after"]
    assert entry.index not in [r.offset for r in consumed]


def test_add_remove_and_leader_removal_on_partition_logs(tmp_path: Path) -> None:
    """Add an observer as voter, remove a follower, the leader removes
    itself: each change is a type-6 batch at the same offset in every log,
    and after restarting every member from disk the voter set is the same."""
    c = _grown(tmp_path)
    added = _config(c.nodes[1].add_voter(4))
    c.stabilize()
    assert all(c.nodes[n].voters == {1, 2, 3, 4} for n in c.nodes)
    removed = _config(c.nodes[1].remove_voter(3))
    c.stabilize()
    c.propose(1, b"x")
    assert all(c.nodes[n].voters == {1, 2, 4} for n in c.nodes)
    itself = _config(c.nodes[1].remove_voter(1))
    c.stabilize()
    c.tick(3 * c.nodes[1].config.election_timeout_ticks)
    leader = c.leader()
    assert leader != 1 and c.nodes[leader].voters == {2, 4}
    c.propose(leader, b"y")
    expected = {added.index: frozenset({1, 2, 3, 4}), removed.index: frozenset({1, 2, 4}),
                itself.index: frozenset({2, 4})}
    ends = {c.nodes[n].log.end for n in c.nodes}
    assert len(ends) == 1
    for node, storage in c.storages.items():
        assert _configs_on_disk(storage) == expected, node
        types = _control_batches(storage)
        assert {o: t for o, t in types.items() if t == CONTROL_KRAFT_VOTERS}.keys() == \
            expected.keys()
        assert set(types.values()) == {2, CONTROL_KRAFT_VOTERS}  # leader changes stay type 2
    # what the leader sends followers carries the voters (and ordinary ones none)
    sent = c.nodes[leader].log.entries_from(0, 1 << 20)
    assert {e.index: e.voters for e in sent if e.voters is not None} == expected
    assert all(e.voters is None for e in sent if not e.control)
    before = {n: c.nodes[n].voters for n in c.nodes}
    for node in sorted(c.nodes):
        c.restart(node)
        assert c.nodes[node].voters == before[node] == {2, 4}, node
        assert c.storages[node].voter_history()[1] == sorted(expected.items())
    # the restarted cluster still works under the new voter set
    c.tick(3 * c.nodes[2].config.election_timeout_ticks)
    leader = c.leader()
    assert leader in (2, 4)
    c.propose(leader, b"z")
    assert c.nodes[leader].high_watermark == c.nodes[leader].log.end


def test_truncated_uncommitted_change_reverts_on_disk(tmp_path: Path) -> None:
    """An uncommitted configuration entry is in force on the node that holds
    it, across a restart; once the new leader's log truncates it, it is gone
    from the disk too, and a restart does not bring it back."""
    c = _grown(tmp_path)
    c.cut = {1}  # the leader alone: its change cannot commit
    pending = _config(c.nodes[1].remove_voter(3))
    c.stabilize()
    c.restart(1)  # a crash while it is pending: still in force there
    assert c.nodes[1].voters == {1, 2} and _configs_on_disk(c.storages[1]) == {
        pending.index: frozenset({1, 2})}
    c.tick(3 * c.nodes[2].config.election_timeout_ticks)
    new_leader = c.leader()
    assert new_leader in (2, 3)
    c.propose(new_leader, b"elsewhere")
    c.cut = set()
    c.tick(3 * c.nodes[2].config.election_timeout_ticks)
    assert c.nodes[1].voters == VOTERS and c.nodes[1].log.end == c.nodes[new_leader].log.end
    assert _configs_on_disk(c.storages[1]) == {}
    assert pending.index in _control_batches(c.storages[1])  # another batch is there now
    # the log start moves past the offset the change had (no restart between)
    c.propose(new_leader, b"more")
    start = c.nodes[1].high_watermark
    assert start > pending.index
    raft, storage = c.nodes[1], c.storages[1]
    storage.plog.delete_records_before(start)
    sid = SnapshotId(start, raft.log.term_at(start - 1))
    storage.remember_start(sid)
    raft.compact(sid)
    assert storage.snapshot().voters is None  # the configured voters: never changed
    c.restart(1)
    assert c.nodes[1].voters == VOTERS
    assert c.storages[1].voter_history() == (None, [])


def test_retention_past_the_entries_keeps_the_voters(tmp_path: Path) -> None:
    """The log start moves past every configuration entry (the Raft core's
    compaction on one member, a bare DeleteRecords-style raise on the others):
    the snapshot at the new start names the voters, restarts keep them, and a
    new member that gets that snapshot installed knows them too."""
    c = _grown(tmp_path)
    _config(c.nodes[1].add_voter(4))
    c.stabilize()
    _config(c.nodes[1].remove_voter(2))
    c.stabilize()
    for i in range(3):
        c.propose(1, b"w%d" % i)
    start = c.nodes[1].high_watermark
    for node in (1, 2, 3, 4):
        raft, storage = c.nodes[node], c.storages[node]
        sid = SnapshotId(start, raft.log.term_at(start - 1))
        if node == 1:
            storage.compact(Snapshot(sid, b"", raft.voters_at(start)))
        else:  # retention / DeleteRecords: the log moves first, the core is told
            storage.plog.delete_records_before(start)
            storage.remember_start(sid)
        raft.compact(sid)
        assert storage.plog.log_start_offset == start and _configs_on_disk(storage) == {}
        assert storage.snapshot().voters == {1, 3, 4}
    for node in (1, 2, 3, 4):
        c.restart(node)
        assert c.nodes[node].voters == {1, 3, 4}, node
        assert c.storages[node].voter_history() == ({1, 3, 4}, [])
    c.tick(3 * c.nodes[1].config.election_timeout_ticks)
    leader = c.leader()
    # a new observer far behind the log start gets the snapshot, voters and all
    c.start(5)
    for _ in range(100):
        if c.nodes[5].log.end == c.nodes[leader].log.end:
            break
        c.tick(1)
    assert c.nodes[5].log.start == start and c.nodes[5].voters == {1, 3, 4}
    assert c.storages[5].snapshot().voters == {1, 3, 4}
    c.restart(5)
    assert c.nodes[5].voters == {1, 3, 4} and not c.nodes[5].is_voter


def test_install_snapshot_and_crash_before_the_log_reset(tmp_path: Path) -> None:
    """Installing a snapshot records its voters first; a crash before the log
    was reset leaves the old log and its own voters in force on restart."""
    storage = PartitionLogStorage(PartitionLog.open(tmp_path / "t-0", LogConfig(), 0), 1)
    storage.append([Entry(0, 1, b"", 1, control=True),
                    Entry(1, 1, b"", 1, control=True, voters=frozenset({1, 2}))])
    assert storage.voter_history() == (None, [(1, frozenset({1, 2}))])
    storage.plog.reset_to = lambda offset: None  # type: ignore[method-assign]  # crash
    storage.install_snapshot(Snapshot(SnapshotId(10, 3), b"", frozenset({4, 5})))
    storage.plog.close(clean=False)
    again = PartitionLogStorage(PartitionLog.open(tmp_path / "t-0", LogConfig(), 0), 1)
    assert again.voter_history() == (None, [(1, frozenset({1, 2}))])
    again.install_snapshot(Snapshot(SnapshotId(10, 3), b"", frozenset({4, 5})))
    again.plog.close(clean=False)
    final = PartitionLogStorage(PartitionLog.open(tmp_path / "t-0", LogConfig(), 0), 1)
    assert final.voter_history() == ({4, 5}, []) and final.snapshot().voters == {4, 5}


def test_a_record_whose_batch_was_lost_is_dropped_on_restart(tmp_path: Path) -> None:
    """The record is written before the batch: a crash between the two (here:
    the batch cut off the log again) leaves a record the restart drops."""
    storage = PartitionLogStorage(PartitionLog.open(tmp_path / "t-0", LogConfig(), 0), 1)
    storage.append([Entry(0, 1, encode_batch([(None, b"a", (), 5)]), 1),
                    Entry(1, 1, b"", 1, control=True, voters=frozenset({1, 2}))])
    storage.plog.truncate_to(1)  # behind the storage's back: the batch never hit the disk
    storage.plog.close(clean=False)
    again = PartitionLogStorage(PartitionLog.open(tmp_path / "t-0", LogConfig(), 0), 1)
    assert again.voter_history() == (None, [])


def test_ordinary_and_leader_change_batches_read_back_unchanged(tmp_path: Path) -> None:
    """Produce batches come back byte for byte, without voters; a leader
    change stays a type-2 control batch; no voter file for a log that never
    had a configuration entry."""
    storage = PartitionLogStorage(PartitionLog.open(tmp_path / "t-0", LogConfig(), 0), 1)
    batches = [encode_batch([(b"k", b"v%d" % i, (), 1000 + i)], base_offset=1 + i,
                            partition_leader_epoch=1) for i in range(3)]
    storage.append([Entry(0, 1, b"", 1, control=True)]
                   + [Entry(1 + i, 1, b, 1) for i, b in enumerate(batches)])
    got = storage.entries(0, 4, 1 << 20)
    assert [e.data for e in got[1:]] == batches
    assert all(e.voters is None for e in got)
    assert got[0].control and control_type(got[0].data) == 2
    assert [r.value for _, h in iter_headers(got[1].data) for r in decode_batch(got[1].data)] \
        == [b"v0"]
    assert not (tmp_path / "t-0" / VOTERS_FILE).exists()
    assert storage.voter_history() == (None, []) and storage.snapshot().voters is None


def test_voters_batch_round_trips_through_the_log(tmp_path: Path) -> None:
    """A follower appends the leader's stored bytes as they are: the batch,
    read back, is the same KRaftVoters batch."""
    storage = PartitionLogStorage(PartitionLog.open(tmp_path / "t-0", LogConfig(), 0), 2)
    data = voters_batch(frozenset({2, 3}), 1234)
    storage.append([Entry(0, 4, data, 1, control=True, voters=frozenset({2, 3}))])
    (entry,) = storage.entries(0, 1, 1 << 20)
    assert entry.voters == {2, 3} and entry.control and entry.data[16:] == data[16:]


def test_metadata_log_storage_keeps_the_voters_through_checkpoints(tmp_path: Path) -> None:
    """The metadata log (group 0) is this storage with checkpoint files: its
    configuration entries, compacted into a checkpoint (and a crash between
    the checkpoint and the prefix drop, finished on open), leave the voter set
    in force at the log start for the restart."""
    from kcompat.broker.controller.metadata_snapshot import MetadataLogStorage

    def open_meta() -> MetadataLogStorage:
        return MetadataLogStorage(PartitionLog.open(tmp_path / "__cluster_metadata-0",
                                                    LogConfig(), 0), 1)

    meta = open_meta()
    meta.append([Entry(0, 1, b"", 1, control=True),
                 Entry(1, 1, encode_batch([(None, b"rec", (), 5)]), 1),
                 Entry(2, 1, b"", 1, control=True, voters=frozenset({1, 2})),
                 Entry(3, 1, encode_batch([(None, b"rec", (), 5)]), 1),
                 Entry(4, 1, b"", 1, control=True, voters=frozenset({1, 2, 5})),
                 Entry(5, 1, encode_batch([(None, b"rec", (), 5)]), 1)])
    meta.compact(Snapshot(SnapshotId(4, 1), b'{"topics": []}'))
    assert meta.voter_history() == ({1, 2}, [(4, frozenset({1, 2, 5}))])
    meta.plog.close(clean=False)
    meta = open_meta()
    assert meta.snapshot_id() == SnapshotId(4, 1)
    assert meta.voter_history() == ({1, 2}, [(4, frozenset({1, 2, 5}))])
    meta._write(Snapshot(SnapshotId(6, 1), b'{"topics": []}'))  # crash before the drop
    meta.plog.close(clean=False)
    meta = open_meta()
    assert meta.plog.log_start_offset == 6
    assert meta.voter_history() == ({1, 2, 5}, []) and meta.start_voters() == {1, 2, 5}
    # the checkpoint a lagging follower installs carries them too
    assert meta.snapshot().id == SnapshotId(6, 1) and meta.snapshot().voters == {1, 2, 5}


def test_crashes_never_leave_an_entry_the_record_misses() -> None:
    """Power cuts (``MemoryFileStore``: unsynced writes partly lost, torn)
    around appends and truncations of configuration entries: after each, the
    voter history a restart reads equals the KRaftVoters batches the log
    really holds, and the voter set at the log start stays the committed one."""
    from kcompat.testing.memory_store import MemoryFileStore

    directory = Path("/data/t-0")

    def reopen(store: MemoryFileStore) -> PartitionLogStorage:
        return PartitionLogStorage(PartitionLog.open(directory, LogConfig(), 0, store), 1)

    def data(i: int) -> bytes:
        return encode_batch([(None, b"r%d" % i, (), 5)])

    for seed in range(40):
        rng = Random(seed)
        store = MemoryFileStore("/data")
        s = reopen(store)
        s.append([Entry(0, 1, b"", 1, control=True), Entry(1, 1, data(1), 1),
                  Entry(2, 1, b"", 1, control=True, voters=frozenset({1, 2})),
                  Entry(3, 1, data(3), 1)])
        s.sync()
        s.plog.delete_records_before(3)  # committed: retention past the entry
        s.append([Entry(4, 2, b"", 1, control=True, voters=frozenset({1, 2, 3})),
                  Entry(5, 2, data(5), 1)])
        if rng.random() < 0.5:
            s.sync()
        s.truncate(4)  # a new leader's log: the pending change goes
        s.append([Entry(4, 3, data(4), 1)])
        if rng.random() < 0.5:
            s.append([Entry(5, 3, b"", 1, control=True, voters=frozenset({1, 2, 7}))])
        store.crash(rng)
        s = reopen(store)
        on_disk = sorted(_configs_on_disk(s).items())
        base, configs = s.voter_history()
        assert (base, configs) == ({1, 2}, on_disk), seed

