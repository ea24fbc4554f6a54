"""PartitionLogStorage: the partition log as the Raft log (kcompat.broker.replication.storage)."""

from __future__ import annotations

from pathlib import Path

from kcompat.broker.replication.storage import PartitionLogStorage
from kcompat.log.config import LogConfig
from kcompat.log.partition_log import PartitionLog
from kcompat.raft import Entry, HardState, Snapshot, SnapshotId
from kcompat.wire.batch import iter_headers
from kcompat.wire.records import decode_batch, encode_batch


def _entry(index: int, term: int, values: list[bytes]) -> Entry:
    data = encode_batch([(None, v, (), 1000) for v in values])
    return Entry(index, term, data, len(values))


def _open(tmp_path: Path) -> PartitionLogStorage:
    return PartitionLogStorage(PartitionLog.open(tmp_path / "t-0", LogConfig(), 0), node_id=1)


def test_append_read_and_epochs(tmp_path: Path) -> None:
    s = _open(tmp_path)
    s.append([Entry(0, 1, b"", 1, control=True), _entry(1, 1, [b"a", b"b"]), _entry(3, 2, [b"c"])])
    assert s.log_end() == 4
    assert s.epochs() == [(1, 0), (2, 3)]
    got = s.entries(0, 4, 1 << 20)
    assert [(e.index, e.term, e.count, e.control) for e in got] == [
        (0, 1, 1, True), (1, 1, 2, False), (3, 2, 1, False)]
    assert [r.value for r in decode_batch(got[1].data)] == [b"a", b"b"]
    assert [e.index for e in s.entries(1, 3, 1 << 20)] == [1]  # whole entries below hi
    assert len(s.entries(0, 4, 1)) == 1  # at least one entry, then the budget is spent


def test_prewritten_entry_is_skipped_and_stale_one_replaced(tmp_path: Path) -> None:
    s = _open(tmp_path)
    first = _entry(0, 1, [b"x"])
    s.append_now(first)
    s.append([first])  # the Ready carrying a pre-written entry: no second copy
    assert s.log_end() == 1
    s.append([_entry(0, 2, [b"y"])])  # same index, newer term: the stale one goes
    assert s.epochs() == [(2, 0)]
    data = s.plog.read(0, 1 << 20, 1)
    assert [r.value for _p, h in iter_headers(data) for r in decode_batch(data)] == [b"y"]
    s.append([_entry(1, 2, [b"z"])])
    s.trim(1)
    assert s.log_end() == 1


def test_hard_state_survives_reopen(tmp_path: Path) -> None:
    s = _open(tmp_path)
    s.set_hard_state(HardState(5, 2))
    pending = s.dirty_files()  # taken, written by the driver's sync pass off the loop
    assert pending and _open(tmp_path).hard_state() != HardState(5, 2)
    for write in pending:
        write.sync()
    assert s.dirty_files() == []
    s.plog.close()
    assert _open(tmp_path).hard_state() == HardState(5, 2)


def test_install_snapshot_restarts_the_log(tmp_path: Path) -> None:
    s = _open(tmp_path)
    s.append([_entry(0, 1, [b"a"])])
    s.install_snapshot(Snapshot(SnapshotId(10, 3)))
    assert s.log_end() == 10 and s.plog.log_start_offset == 10
    assert s.epochs() == []
    s.append([_entry(10, 3, [b"b"])])
    assert s.snapshot_id().end == 10 and s.epochs() == [(3, 10)]


def test_a_follower_copies_a_cleaned_leader_log_with_its_gaps(tmp_path: Path) -> None:
    """Compaction leaves gaps below the high watermark: the leader's Raft log hands
    out entries past a fetch offset inside one, and a follower appends them where
    they are, so both logs hold the same batches at the same offsets."""
    from kcompat.log import cleaner
    from kcompat.raft.log import RaftLog

    config = LogConfig(segment_bytes=200, compact=True, delete=False)
    leader = PartitionLogStorage(PartitionLog.open(tmp_path / "l" / "t-0", config, 0), node_id=1)
    for i in range(12):
        data = encode_batch([(b"k%d" % (i % 2), b"v%d" % i, (), 1000)])
        leader.append([Entry(i, 1 if i < 6 else 2, data, 1)])
    leader.plog.roll(0)
    plan = leader.plog.cleaner_plan(12, 10_000)
    assert plan is not None
    leader.plog.cleaner_done(cleaner.clean(plan), plan)
    kept = [e.index for e in leader.entries(0, 12, 1 << 20)]
    assert kept != list(range(12)) and kept[0] == 0 and 6 in kept  # gaps; epoch starts stay
    raft = RaftLog(leader)
    follower = PartitionLogStorage(PartitionLog.open(tmp_path / "f" / "t-0", config, 0),
                                   node_id=2)
    follower_raft = RaftLog(follower)
    fetch_offset = 1  # the follower had copied offset 0 before the leader cleaned
    follower.append([leader.entries(0, 1, 1 << 20)[0]])
    follower_raft = RaftLog(follower)
    while fetch_offset < raft.end:
        entries = raft.entries_from(fetch_offset, 1 << 20)
        assert entries and entries[0].index >= fetch_offset
        for entry in entries:
            follower_raft.append(entry)
        follower.append(entries)
        fetch_offset = follower_raft.end
    assert [(e.index, e.term, e.data) for e in follower.entries(0, 12, 1 << 20)] == \
        [(e.index, e.term, e.data) for e in leader.entries(0, 12, 1 << 20)]
    assert follower.epochs() == leader.epochs()
    reopened = PartitionLog.open(tmp_path / "f" / "t-0", config, 0)  # recovery keeps the gaps
    assert reopened.log_end_offset == 12 and reopened.leader_epochs == leader.plog.leader_epochs
