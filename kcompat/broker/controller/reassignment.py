"""Partition reassignment (KIP-455) as Raft membership changes.

Theory of operation
-------------------
A partition is a Raft group among its replicas, so moving replicas is
changing the group's voters — one voter at a time (``Raft.add_voter`` /
``remove_voter``), so that any two voter sets in force overlap in a majority.

1. **Start.** AlterPartitionReassignments reaches the controller (``admin``),
   which checks the target as Kafka does (``reassign_record``) and commits a
   ``reassign`` record: the target and the original replicas (those of the
   first reassignment still in progress; a cancellation is a reassignment back
   to them) and the replicas leaving — those of an earlier target too, which
   may be voters by now and keep their copy until the end. Every broker applies it (``metadata_apply.settle_replicas``):
   Metadata lists the target then the replicas being removed, as Kafka does,
   and a broker of the target that holds no replica opens one as a Raft
   *observer* of the current voters: it fetches the whole log from the
   leader like a follower, but does not vote and is not counted.
2. **Move.** The partition's leader, wherever it is, drives the change on its
   ticks (``Mover``): while a target replica is not a voter it adds it once
   it has caught up (within ``catch_up_max_lag`` of the log end, KIP-853's
   rule), one at a time, each change committed before the next; then it
   removes the voters outside the target, itself last (a leader that removed
   itself resigns to the most caught-up voter once the change commits, and
   the new leader carries on). A leader change in between loses nothing: the
   voter set in force is the log's.
3. **Finish.** With the voters equal to the target and that configuration
   committed, the leader asks the controller (``admin.submit``, forwarded
   like any change) to commit ``reassign_done`` with the target as the
   replicas. Brokers outside it close their replica and delete it.

Throttling (``leader.replication.throttled.rate``) applies to what the leader
sends to observers (``replication.throttle``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kcompat.broker.storage.metadata import Reassignment
from kcompat.broker.storage.state import TopicError, check_replicas
from kcompat.raft import ChangeRefused

if TYPE_CHECKING:
    from kcompat.broker.controller.quorum import Controller
    from kcompat.broker.replication.group import Group

log = logging.getLogger("kcompat.cluster")

#: how often (ticks) a leader looks at the reassignments of its partitions
MOVE_TICKS = 5


def reassign_record(ctl: Controller, name: str, index: int, target: list[int] | None,
                    allow_rf_change: bool = True) -> dict[str, Any] | None:
    """The record that starts (or cancels: ``target`` None) a partition's
    reassignment, None when there is nothing to change, or TopicError with
    Kafka's code and message."""
    rt = ctl.rt
    meta = ctl.state.topics.get(name)
    if meta is None:
        raise TopicError(ErrorCode.unknown_topic_or_partition,
                         f"Unable to find a topic named {name}.")
    found = rt.assignments.get((name, index))
    if not 0 <= index < meta.partitions or found is None:
        raise TopicError(ErrorCode.unknown_topic_or_partition,
                         f"Unable to find partition {name}:{index}.")
    if meta.view_of is not None:
        raise TopicError(ErrorCode.invalid_request,
                         f"Topic '{name}' is a view of '{meta.view_of}': it has the replicas "
                         f"of its source; reassign '{meta.view_of}'")
    moving = rt.image.reassignments.get((name, index))
    current = moving.original if moving is not None else found[1]
    if target is None:
        if moving is None:
            raise TopicError(ErrorCode.no_reassignment_in_progress,
                             "No partition reassignment is in progress.")
        target = list(moving.original)
    else:
        check_replicas(target, rt.image.broker_ids())
        if not allow_rf_change and len(target) != len(current):
            raise TopicError(ErrorCode.invalid_replication_factor,
                             f"The replication factor is changed from {len(current)} to "
                             f"{len(target)}")
    if moving is None and tuple(target) == found[1]:
        return None
    if moving is None and set(target) == set(found[1]):  # an order change only
        return {"type": "reassign_done", "name": name, "index": index, "replicas": target}
    # every replica that may be a voter now stays until the move is done: the
    # current ones, and those an earlier target added (a cancellation included)
    present = moving.replicas if moving is not None else found[1]
    return {"type": "reassign", "name": name, "index": index, "target": list(target),
            "original": list(current), "leaving": [n for n in present if n not in target]}


def done_record(ctl: Controller, name: str, index: int, replicas: list[int]
                ) -> dict[str, Any] | None:
    """``reassign_done`` for a leader that finished moving a partition to
    ``replicas``; None if that reassignment is no longer the one in progress
    (finished already, or replaced by another)."""
    moving = ctl.rt.image.reassignments.get((name, index))
    if moving is None or list(moving.target) != replicas:
        return None
    return {"type": "reassign_done", "name": name, "index": index, "replicas": replicas}


class Mover:
    """On every broker: moves the voters of the partitions it leads that are
    being reassigned, one change at a time (see the module docstring)."""

    def __init__(self, ctl: Controller,
                 submit: Callable[[Controller, dict[str, Any]], Awaitable[object]]) -> None:
        self.ctl = ctl
        self.rt = ctl.rt
        self._submit = submit  # admin.submit: commit through the controller
        self._finishing: set[tuple[str, int]] = set()
        self.rt.tick_hooks.append(self._tick)

    def _tick(self, ticks: int) -> None:
        if ticks % MOVE_TICKS:
            return
        for key, moving in list(self.rt.image.reassignments.items()):
            group = self.rt.group_of(*key)
            if group is not None and group.is_leader and not group.removed:
                self._step(key, moving, group)

    def _step(self, key: tuple[str, int], moving: Reassignment, group: Group) -> None:
        raft, rt = group.raft, self.rt
        status = raft.status()
        if status.config_pending:
            return  # one change at a time
        voters = status.voters
        adding = [n for n in moving.target if n not in voters]
        if adding:
            ready = [n for n in adding if raft.caught_up(n)]
            if ready:
                self._change(key, group, rt.change_voters(group, add=ready[0]))
            return
        extra = sorted((n for n in voters if n not in moving.target),
                       key=lambda n: (n == rt.node_id, n))  # itself last
        if extra:
            self._change(key, group, rt.change_voters(group, remove=extra[0]))
        elif key not in self._finishing and rt.spawn(self._finish, key, list(moving.target)):
            self._finishing.add(key)

    @staticmethod
    def _change(key: tuple[str, int], group: Group, result: object) -> None:
        if isinstance(result, ChangeRefused):
            log.debug("%s-%d: voter change refused for now: %s", *key, result.reason.name)
        else:
            log.info("%s-%d: voters now %s", *key, sorted(group.raft.voters))

    async def _finish(self, key: tuple[str, int], replicas: list[int]) -> None:
        name, index = key
        try:
            await self._submit(self.ctl, {"op": "reassign_done", "name": name, "index": index,
                                          "replicas": replicas})
        except TopicError as e:
            log.info("%s-%d: finishing the reassignment failed for now: %s", name, index,
                     e.message)
        finally:
            self._finishing.discard(key)
