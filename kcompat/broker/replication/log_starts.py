"""Log start offsets of partition groups (DeleteRecords, retention) in a cluster.

Theory of operation
-------------------
A partition's log start moves on its leader (DeleteRecords, which only the
leader accepts, or retention, which every replica runs). Followers follow
the leader's announced log start once their own high watermark is past
it, so a new leader does not bring deleted records back; and the Raft
core of every replica is told whenever its storage dropped a prefix, so
it never reads below the log start (a follower that far behind gets the
empty snapshot at the leader's log start instead).
"""

from __future__ import annotations

from collections.abc import Iterable

from kcompat.broker.replication import codec
from kcompat.broker.replication.group import Group
from kcompat.broker.replication.storage import now_ms
from kcompat.raft import SnapshotId


def follow_announced(group: Group | None, ann: codec.Announcement) -> None:
    """A follower adopts its leader's announced log start once its own high
    watermark is past it."""
    if group is None or group.removed or group.part is None or group.is_leader:
        return
    plog = group.storage.plog
    if group.raft.term == ann.term and plog.log_start_offset < ann.log_start <= group.hw:
        plog.delete_records_before(ann.log_start, now_ms())
        sync_group(group)


def sync_group(group: Group) -> None:
    """Tell the group's Raft core that its storage dropped a prefix."""
    raft = group.raft
    start = group.storage.plog.log_start_offset
    if raft.log.start < start <= min(raft.high_watermark, raft.log.stable_end):
        sid = SnapshotId(start, raft.log.term_at(start - 1))
        group.storage.remember_start(sid)
        raft.compact(sid)


def sync_all(groups: Iterable[Group]) -> None:
    """``sync_group`` for every partition group (after retention or DeleteRecords)."""
    for group in list(groups):
        if group.part is not None and not group.removed:
            sync_group(group)
