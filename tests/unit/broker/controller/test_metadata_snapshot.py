"""Metadata checkpoints as the metadata group's Raft snapshots
(kcompat.broker.controller.metadata_snapshot.MetadataLogStorage)."""

from __future__ import annotations

from pathlib import Path

from kcompat.broker.controller.metadata_snapshot import (
    MetadataLogStorage,
    checkpoint_name,
    list_checkpoints,
)
from kcompat.log.config import LogConfig
from kcompat.log.partition_log import PartitionLog
from kcompat.raft import Entry, Snapshot, SnapshotId
from kcompat.wire.records import encode_batch


def _open(tmp_path: Path) -> MetadataLogStorage:
    plog = PartitionLog.open(tmp_path / "__cluster_metadata-0", LogConfig(), 0)
    return MetadataLogStorage(plog, node_id=1)


def _fill(s: MetadataLogStorage, count: int, term: int = 1) -> None:
    s.append([Entry(i, term, encode_batch([(None, b'{"type":"x"}', (), 1000)]), 1)
              for i in range(s.log_end(), s.log_end() + count)])


def test_no_checkpoint_is_the_empty_snapshot_at_zero(tmp_path: Path) -> None:
    s = _open(tmp_path)
    _fill(s, 3)
    assert s.snapshot_id() == SnapshotId(0, 0)
    assert s.snapshot() == Snapshot(SnapshotId(0, 0))


def test_compact_keeps_the_checkpoint_and_survives_reopen(tmp_path: Path) -> None:
    s = _open(tmp_path)
    _fill(s, 5)
    s.compact(Snapshot(SnapshotId(3, 1), b'{"topics":[]}'))
    assert s.plog.log_start_offset == 3 and s.log_end() == 5
    assert s.snapshot() == Snapshot(SnapshotId(3, 1), b'{"topics":[]}')
    s.plog.close()
    again = _open(tmp_path)
    assert again.snapshot_id() == SnapshotId(3, 1)
    assert again.snapshot().data == b'{"topics":[]}'
    assert [e.index for e in again.entries(3, 5, 1 << 20)] == [3, 4]


def test_old_checkpoints_are_pruned(tmp_path: Path) -> None:
    s = _open(tmp_path)
    _fill(s, 10)
    for end in (2, 4, 6, 8):
        s.compact(Snapshot(SnapshotId(end, 1), b'{"topics":[]}'))
    assert [sid.end for sid, _p in list_checkpoints(s.plog.directory, s.plog.store)] == [6, 8]


def test_crash_between_checkpoint_and_prefix_drop_is_finished_on_open(tmp_path: Path) -> None:
    s = _open(tmp_path)
    _fill(s, 6)
    directory = Path(s.plog.directory)
    (directory / checkpoint_name(SnapshotId(4, 1))).write_bytes(b'{"topics":[]}')
    s.plog.close()
    again = _open(tmp_path)
    assert again.plog.log_start_offset == 4
    assert again.snapshot_id() == SnapshotId(4, 1)


def test_installed_snapshot_replaces_a_shorter_log(tmp_path: Path) -> None:
    s = _open(tmp_path)
    _fill(s, 2)
    s.install_snapshot(Snapshot(SnapshotId(9, 3), b'{"topics":[1]}'))
    assert (s.plog.log_start_offset, s.log_end()) == (9, 9)
    assert s.snapshot() == Snapshot(SnapshotId(9, 3), b'{"topics":[1]}')
    _fill(s, 1, term=3)
    s.plog.close()
    again = _open(tmp_path)
    assert (again.snapshot_id(), again.log_end()) == (SnapshotId(9, 3), 10)
