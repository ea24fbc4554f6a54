"""One Raft group of this broker and the state machine host.

Theory of operation
-------------------
A ``Group`` is this broker's member of one Raft group: group 0 is the
metadata quorum over ``__cluster_metadata-0``; every other group is a
partition over its ``PartitionLog`` (the partition log is the Raft log). The
driver (``runtime``) moves its Raft core through Ready rounds and publishes
``hw``, the commit index made durable, to waiters (``changed``).

A group may host a replicated state machine (``StateMachine``, docs/architecture.md, Replication;
etcd raftexample's CommittedEntries): ``feed`` hands it every committed batch
of the log in log order — on every replica, the leader's own writes
included — and tells it when this replica starts or stops leading. A leader
is announced only once everything in its log is committed and applied, so a
machine that takes over starts from the whole state, without a replay. When
the log starts past what was applied (a snapshot replaced the prefix), the
machine first rebuilds itself from the snapshot at the log start
(``restore``).

A replay is cut into turns: ``feed`` applies batches for at most
``FEED_BUDGET_S`` (read on ``time.monotonic``, which the broker simulator
drives: there a budget never runs out, and a seed replays exactly whatever
the machine's speed) and says whether it is done; the driver feeds the rest
after the other tasks of the loop had their turn (docs/architecture.md, principle 8: a restart
with a long internal log must not starve heartbeats and votes). A machine
whose ``apply`` raises is a bug in that machine: its group goes offline —
no longer ``serving``, so its coordinator or service answers as a broker
that does not host it, with one error line naming the partition, the
offset and the exception, counted in ``broken`` — and the broker with
every other group goes on (docs/architecture.md, principle 10). So does a
group whose committed batches cannot be read (EIO, or nothing readable
where the log says batches are): feeding it again would find nothing again
and the driver would spin on it. A range that compaction emptied is not
that: it is skipped.
"""

from __future__ import annotations

import errno
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import trio
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kcompat.raft import NO_NODE, Raft, Role
from kcompat.wire.batch import BatchHeader

if TYPE_CHECKING:
    from collections.abc import Iterable

    from kcompat.broker.replication.codec import Announcement
    from kcompat.broker.replication.storage import PartitionLogStorage
    from kcompat.broker.storage.partition import Partition

log = logging.getLogger("kcompat.cluster")

METADATA_GROUP = 0
FEED_BUDGET_S = 0.02  # of committed batches applied in one go (the loop's turn)


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
    broken: str | None = None  # why its machine failed (then it is offline: ``serving``)

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

    def feed(self, budget_s: float = FEED_BUDGET_S) -> bool:
        """Hand the machine the committed batches not fed yet, then its role;
        False when ``budget_s`` ran out first (the driver feeds the rest after
        other tasks had their turn: a long replay never holds the loop)."""
        machine = self.machine
        if machine is None or self.broken is not None:
            return True
        plog = self.storage.plog
        if self.applied < plog.log_start_offset:
            if self.applied >= 0 or plog.log_start_offset > 0:
                machine.restore(self.index, plog.log_start_offset)
            self.applied = plog.log_start_offset
        deadline = time.monotonic() + budget_s
        end = min(self.hw, plog.log_end_offset)
        start = self.applied
        try:
            for batch, header in plog.batches(start, end):
                try:
                    machine.apply(self.index, batch, header)
                except Exception as exc:  # a bug in that machine: this group only goes offline
                    self._break(exc, header.base_offset)
                    return True
                self.applied = header.next_offset
                if time.monotonic() >= deadline:
                    break
        except OSError as exc:  # the log cannot be read there (EIO, a torn segment)
            self._break(exc, self.applied)
            return True
        if self.applied == start < end and not self._past_gap(end):
            # nothing readable where committed batches must be: feeding again
            # would find nothing again, and the driver would spin on it
            self._break(OSError(errno.EIO, f"no batch can be read at offset {start} "
                                f"(committed up to {end})"), start)
            return True
        self._roles()
        return self.applied >= end

    def _past_gap(self, end: int) -> bool:
        """The batches of ``[applied, end)`` were all compacted away: the next
        one starts at or past ``end``, so there is nothing to feed there."""
        where = self.storage.plog.locate(self.applied, 0, self.storage.plog.log_end_offset)
        if where is None or where.first is None or where.first.base_offset < end:
            return False
        self.applied = end
        return True

    def _break(self, exc: Exception, offset: int) -> None:
        self.broken = f"{type(exc).__name__}: {exc}"
        log.error("%s offline: the batch at offset %d could not be read or applied by its "
                  "state machine (%s); the broker and its other partitions go on", self.name,
                  offset, self.broken, exc_info=exc)
        if self.led_term is not None and self.machine is not None:
            self.led_term = None
            self.machine.on_role(self.index, leading=False)

    def _roles(self) -> None:
        """Tell the machine when this replica starts or stops leading."""
        machine = self.machine
        assert machine is not None
        plog = self.storage.plog
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
        return (not self.removed and self.broken is None and self.is_leader
                and self.led_term == self.raft.term)

    @property
    def never_elected(self) -> bool:
        """No election has been won or voted in yet (a brand-new partition)."""
        return self.raft.term <= 0 and self.raft.vote == NO_NODE

    @property
    def name(self) -> str:
        if self.part is None:
            return "__cluster_metadata-0"
        return f"{self.part.topic}-{self.part.index}"


class OfflineMachines(Collector):
    """``kcompat_state_machine_offline{partition}``: 1 for each group whose
    machine failed (``Group.feed``), with the failure in ``error``."""

    def __init__(self, groups: dict[int, Group]) -> None:
        self.groups = groups

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        gauge = GaugeMetricFamily("kcompat_state_machine_offline",
                                  "Partitions offline because their state machine failed to "
                                  "apply a committed batch", labels=["partition", "error"])
        for group in list(self.groups.values()):
            if group.broken is not None and not group.removed:
                gauge.add_metric((group.name, group.broken[:200]), 1)
        yield gauge
