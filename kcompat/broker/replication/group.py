"""One Raft group of this broker and the state machine host.

Theory of operation
-------------------
A ``Group`` is this broker's member of one Raft group: group 0 is the
metadata quorum over ``__cluster_metadata-0``; every other group is a
partition over its ``PartitionLog`` (the partition log is the Raft log). The
driver (``runtime``) moves its Raft core through Ready rounds and publishes
``hw``, the commit index made durable, to waiters (``changed``).

A group may host a replicated state machine (``StateMachine``, DESIGN §5;
etcd raftexample's CommittedEntries): ``feed`` hands it every committed batch
of the log in log order — on every replica, the leader's own writes
included — and tells it when this replica starts or stops leading. A leader
is announced only once everything in its log is committed and applied, so a
machine that takes over starts from the whole state, without a replay. When
the log starts past what was applied (a snapshot replaced the prefix), the
machine first rebuilds itself from the snapshot at the log start
(``restore``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import trio

from kcompat.raft import NO_NODE, Raft, Role
from kcompat.wire.batch import BatchHeader

if TYPE_CHECKING:
    from kcompat.broker.partition import Partition
    from kcompat.broker.replication.codec import Announcement
    from kcompat.broker.replication.storage import PartitionLogStorage

METADATA_GROUP = 0


class NotLeaderError(Exception):
    """This broker does not lead the group (NOT_LEADER_OR_FOLLOWER / NOT_CONTROLLER)."""


class StateMachine(Protocol):
    """A replicated state machine over a group's log. It proposes with
    ``ClusterRuntime.propose_batch`` and awaits commits with
    ``wait_committed``; its own writes reach it through ``apply`` like
    everyone else's."""

    def apply(self, index: int, batch: memoryview, header: BatchHeader) -> None:
        """One committed batch of partition ``index``, in log order."""

    def on_role(self, index: int, leading: bool) -> None:
        """This replica starts (caught up) or stops leading partition ``index``."""

    def restore(self, index: int, start: int) -> None:
        """The log now starts at ``start``, past what was applied: rebuild
        from the snapshot there (a machine without snapshots keeps its state)."""


@dataclass(eq=False)
class Group:
    gid: int
    raft: Raft
    storage: PartitionLogStorage
    replicas: tuple[int, ...]
    part: Partition | None = None
    hw: int = 0  # the high watermark of the last Ready made durable (what readers see)
    changed: trio.Event = field(default_factory=trio.Event)
    seen: tuple[Role, int, int, int] | None = None
    removed: bool = False
    sync_wanted: bool = False  # a waiter needs the next Ready round fsynced
    machine: StateMachine | None = None
    applied: int = -1  # the next offset to feed the machine (-1: from the log start)
    led_term: int | None = None  # the term the machine was told it leads in
    announced: Announcement | None = None  # the last leadership announcement sent (runtime)

    @property
    def lone(self) -> bool:
        """This broker is the only replica (a quorum of one for this group)."""
        return self.replicas == (self.raft.id,)

    @property
    def is_leader(self) -> bool:
        return self.raft.role is Role.LEADER

    @property
    def index(self) -> int:
        return self.part.index if self.part is not None else 0

    def notify(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def feed(self) -> None:
        """Hand the machine every committed batch not fed yet, then its role."""
        machine = self.machine
        if machine is None:
            return
        plog = self.storage.plog
        if self.applied < plog.log_start_offset:
            if self.applied >= 0 or plog.log_start_offset > 0:
                machine.restore(self.index, plog.log_start_offset)
            self.applied = plog.log_start_offset
        for batch, header in plog.batches(self.applied, min(self.hw, plog.log_end_offset)):
            machine.apply(self.index, batch, header)
            self.applied = header.next_offset
        raft = self.raft
        if self.led_term is not None and (not self.is_leader or raft.term != self.led_term):
            self.led_term = None
            machine.on_role(self.index, leading=False)
        if self.led_term is None and self.is_leader and self.applied >= plog.log_end_offset:
            self.led_term = raft.term
            machine.on_role(self.index, leading=True)

    @property
    def serving(self) -> bool:
        """Leading, with every earlier entry applied by its machine."""
        return not self.removed and self.is_leader and self.led_term == self.raft.term

    @property
    def never_elected(self) -> bool:
        """No election has been won or voted in yet (a brand-new partition)."""
        return self.raft.term <= 0 and self.raft.vote == NO_NODE

    @property
    def name(self) -> str:
        if self.part is None:
            return "__cluster_metadata-0"
        return f"{self.part.topic}-{self.part.index}"
