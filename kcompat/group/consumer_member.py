"""One member of a KIP-848 consumer group and its reconciliation, sans-IO.

Theory of operation
-------------------
A member holds its **current assignment** (partitions it may consume now) and,
while it gives partitions up, the partitions **pending revocation**; together
they are the partitions it *owns*. A partition is owned by at most one member:
that is the invariant of incremental reconciliation (KIP-848, Kafka 4.4's
``CurrentAssignmentBuilder``): a partition moves from A to B only after A
acknowledges its revocation (by leaving it out of the owned partitions of a
later heartbeat), and only then is it handed to B.

``reconcile`` moves a member towards its target assignment:

* STABLE at an old epoch, or UNRELEASED_PARTITIONS: compute the next step.
* UNREVOKED_PARTITIONS: wait while the heartbeat's owned partitions (unknown
  when the member did not send them) still hold one being revoked; once
  released, step again from its epoch (more to revoke: it stays there).
* A subscription changed by this heartbeat while the member is at the target
  epoch, or still holds what it must revoke (the target waits for
  ``group.consumer.assignment.interval.ms``): the partitions of topics it no
  longer subscribes to leave its assignment at once, to be revoked
  (``_keep_subscribed``, Kafka's ``updateCurrentAssignment``). A topic it no
  longer subscribes to is never part of its target.

Every step makes the member's epoch its previous one, even a step that keeps
it (``set_epoch``, Kafka's ``updateMemberEpoch``): a heartbeat is accepted at
the previous epoch only (its answer may have been lost).

Each owned partition remembers the member epoch it was assigned at (KIP-1251,
Kafka 4.3+): a commit at an older epoch is accepted for the partitions the
member has held since then. The next step keeps ``current ∩ target``; if anything of ``current`` is not in
the target the member stays at its epoch in UNREVOKED_PARTITIONS and is asked
to revoke it (the response carries only the kept partitions). Otherwise it
moves to the target epoch with every target partition no other member owns,
in UNRELEASED_PARTITIONS while some are still owned elsewhere, else STABLE.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kcompat.group.assignors import Partition, TopicPartitions, flat, grouped

STABLE = "stable"
UNREVOKED_PARTITIONS = "unrevoked_partitions"
UNRELEASED_PARTITIONS = "unreleased_partitions"

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: str = STABLE
    assigned: set[Partition] = field(default_factory=set)
    revoking: set[Partition] = field(default_factory=set)
    session_deadline_ms: int = 0
    revoke_deadline_ms: int | None = None
    # a classic member (JoinGroup/SyncGroup/Heartbeat): its session timeout and
    # the names of the protocols it supports, in its order; None for KIP-848 members
    classic_session_timeout_ms: int | None = None
    classic_protocols: tuple[str, ...] = ()
    # KIP-1251: the member epoch at which each owned partition was assigned to it
    assignment_epochs: dict[Partition, int] = field(default_factory=dict)
    # its last heartbeat's principal (a regex resolves to the topics it may describe)
    principal: str = ""
    # the ids of its assigned topics when its assignment was last sent (not kept in
    # snapshots), and the group's topic-id mapping at its last heartbeat: a topic
    # re-created under its name is a new assignment, as in Kafka
    # (``EpochGroup._sends_assignment``)
    sent_ids: tuple[str, ...] | None = None
    ids_seen: object = None

    @property
    def is_classic(self) -> bool:
        return self.classic_session_timeout_ms is not None

    @property
    def owned(self) -> set[Partition]:
        return self.assigned | self.revoking

    def assignment(self) -> TopicPartitions:
        return grouped(self.assigned)

    def set_epoch(self, epoch: int) -> None:
        """As Kafka's ``updateMemberEpoch``: the epoch it had becomes its
        previous one, even when it stays (a step of reconciliation at the
        same epoch): a heartbeat at an older epoch is then fenced."""
        self.previous_member_epoch = self.member_epoch
        self.member_epoch = epoch

    def to_json(self) -> list[Any]:
        return [self.member_id, self.instance_id, self.rack_id, self.client_id,
                self.client_host, self.rebalance_timeout_ms,
                None if self.subscribed_topic_names is None else list(self.subscribed_topic_names),
                self.subscribed_topic_regex, self.server_assignor, self.member_epoch,
                self.previous_member_epoch, self.state, sorted(map(list, self.assigned)),
                sorted(map(list, self.revoking)), self.classic_session_timeout_ms,
                list(self.classic_protocols),
                sorted([t, p, e] for (t, p), e in self.assignment_epochs.items()),
                self.principal]

    @classmethod
    def from_json(cls, row: list[Any]) -> ConsumerMember:
        def parts(items: list[Any]) -> set[Partition]:
            return {(str(t), int(p)) for t, p in items}
        names = row[6]
        member = cls(str(row[0]), _opt(row[1]), _opt(row[2]), str(row[3]), str(row[4]),
                     int(row[5]), None if names is None else tuple(str(n) for n in names),
                     _opt(row[7]), _opt(row[8]), int(row[9]), int(row[10]), str(row[11]),
                     parts(row[12]), parts(row[13]))
        if len(row) > 15 and row[14] is not None:
            member.classic_session_timeout_ms = int(row[14])
            member.classic_protocols = tuple(str(n) for n in row[15])
        if len(row) > 16:
            member.assignment_epochs = {(str(t), int(p)): int(e) for t, p, e in row[16]}
        if len(row) > 17:
            member.principal = str(row[17])
        return member


def _opt(value: object) -> str | None:
    return None if value is None else str(value)


def owns_revoked(member: ConsumerMember, owned: TopicPartitions | None) -> bool:
    """True while the member may still hold a partition being revoked (an
    omitted owned list counts as still holding them)."""
    return _owns(member.revoking, owned)


def _owns(parts: set[Partition], owned: TopicPartitions | None) -> bool:
    return owned is None or bool(parts & flat(owned))


def reconcile(member: ConsumerMember, target: TopicPartitions, target_epoch: int,
              owner_of: Callable[[Partition], str | None], owned: TopicPartitions | None,
              now_ms: int, subscribed: Callable[[], Iterable[str]],
              subscription_changed: bool = False) -> None:
    """Move ``member`` one step towards ``target`` (its target assignment at
    ``target_epoch``) as Kafka 4.4's ``CurrentAssignmentBuilder``; ``owner_of``
    names the member owning a partition; ``subscribed`` gives the topics it
    subscribes to now (a topic it left is never its target: asked only when
    a step is taken), which this heartbeat changed when ``subscription_changed``."""
    if member.state == UNREVOKED_PARTITIONS:
        if owns_revoked(member, owned):
            if subscription_changed:
                _keep_subscribed(member, set(subscribed()), owned, now_ms)
            return
        member.revoking = set()
        member.revoke_deadline_ms = None
        _next_step(member, target, member.member_epoch, target_epoch, owner_of, now_ms, owned,
                   set(subscribed()))
    elif member.state == UNRELEASED_PARTITIONS or member.member_epoch != target_epoch:
        _next_step(member, target, member.member_epoch, target_epoch, owner_of, now_ms, owned,
                   set(subscribed()))
    elif subscription_changed:
        _keep_subscribed(member, set(subscribed()), owned, now_ms)


def _keep_subscribed(member: ConsumerMember, subscribed: set[str],
                     owned: TopicPartitions | None, now_ms: int) -> None:
    """Kafka's ``updateCurrentAssignment``: the subscription changed while the
    target has not (or the member still holds what it must revoke): the
    partitions of topics it no longer subscribes to leave its assignment at
    once, to be revoked if it may still hold them; its epoch stays."""
    if not subscribed and not member.revoking:  # subscribed to nothing: all of it
        removed = set(member.assigned)
    else:
        removed = {tp for tp in member.assigned if tp[0] not in subscribed}
        if not removed:
            return
    revoking = member.revoking | removed
    member.set_epoch(member.member_epoch)
    member.assigned = member.assigned - removed
    for tp in removed:
        member.assignment_epochs.pop(tp, None)
    if revoking and _owns(revoking, owned):
        member.state = UNREVOKED_PARTITIONS
        member.revoking = revoking
    if member.state == UNREVOKED_PARTITIONS:
        member.revoke_deadline_ms = now_ms + max(member.rebalance_timeout_ms, 0)


def _next_step(member: ConsumerMember, target: TopicPartitions, epoch: int, target_epoch: int,
               owner_of: Callable[[Partition], str | None], now_ms: int,
               owned: TopicPartitions | None, subscribed: set[str]) -> None:
    """As Kafka's ``CurrentAssignmentBuilder``: partitions to revoke that the
    heartbeat says the member no longer owns (an owned list without them) are
    not asked back: it moves to the target epoch at once. A target partition
    of a topic it no longer subscribes to is not wanted."""
    wanted = {tp for tp in flat(target) if tp[0] in subscribed}
    kept = member.assigned & wanted
    revoke = member.assigned - wanted
    pending = wanted - kept
    unreleased = {tp for tp in pending if owner_of(tp) not in (None, member.member_id)}
    if revoke and (owned is None or revoke & flat(owned)):
        member.state = UNREVOKED_PARTITIONS
        member.set_epoch(epoch)
        member.assigned = kept
        member.revoking = revoke
        timeout_ms = max(member.rebalance_timeout_ms, 0)
        member.revoke_deadline_ms = now_ms + timeout_ms
        return
    member.set_epoch(target_epoch)
    member.assigned = kept | (pending - unreleased)
    member.revoking = set()
    member.state = UNRELEASED_PARTITIONS if unreleased else STABLE
    member.assignment_epochs = {tp: member.assignment_epochs.get(tp, target_epoch)
                                for tp in member.assigned}
