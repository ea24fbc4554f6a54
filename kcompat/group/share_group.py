"""The membership and assignment of one share group (KIP-932), sans-IO.

Theory of operation
-------------------
This machine owns what Kafka 4.4's group coordinator keeps for one share group
and serves through ShareGroupHeartbeat (API key 76) and ShareGroupDescribe (77):
the members, the **group epoch**, the **target assignment** and its epoch, and
each member's current assignment and **member epoch**. The host keeps one
machine per share group id, passes in the topic metadata as
``{topic: partition count}`` and drives time with ``tick(now_ms)``.

Rules (Kafka 4.4's ``GroupMetadataManager.shareGroupHeartbeat`` and
``GroupCoordinatorService.throwIfShareGroupHeartbeatRequestIsInvalid``):

* The client chooses its member id (ShareGroupHeartbeat v1): a blank group
  id, a blank member id, a blank rack id, an epoch below -1, or epoch 0 without subscribed topic
  names is ``INVALID_REQUEST``.
* Epoch 0 joins (a known member may rejoin with 0 and keeps its epoch);
  epoch -1 leaves; any other epoch is a heartbeat. A group that never had a
  member does not exist: a heartbeat or leave is ``GROUP_ID_NOT_FOUND``. A new
  member past ``group.share.max.size`` (200) is ``GROUP_MAX_SIZE_REACHED``
  (checked before the member lookup, as Kafka); an unknown member with a
  non-zero epoch is ``UNKNOWN_MEMBER_ID``; any epoch but the member's own
  (or 0) is ``FENCED_MEMBER_EPOCH`` — share groups, unlike consumer groups,
  do not take the previous epoch after a lost response (the member rejoins).
* The group epoch goes up by one when a member joins, changes its subscribed
  topics, leaves or expires, and when the partition count of a subscribed
  topic changes, such a topic appears or disappears, or is re-created under
  its name with a new id (``update_metadata``; Kafka notices it through its
  metadata hash, and keys assignments by topic id: the members get theirs
  again, naming the new id). A rack, client id or host change does not bump
  it.
* Each bump recomputes the target assignment at once (its epoch = the group
  epoch; Kafka computes it at the next heartbeat, which a client cannot tell
  apart). Share groups have no revocation phase: a heartbeat hands the member
  its target assignment and moves its epoch to the assignment epoch at once
  (Kafka's ``ShareGroupAssignmentBuilder``), its previous epoch kept for the
  epoch check.
* The response carries the assignment when the member joined (epoch 0), sent
  its subscription (a full request), or its assignment changed; otherwise
  None. The heartbeat interval is ``group.share.heartbeat.interval.ms`` (5000).
* A member's session ends ``group.share.session.timeout.ms`` (45000) after its
  last good heartbeat; ``tick(now_ms)`` removes it (one epoch bump per member,
  as Kafka's fence) and returns its id so the host releases its record locks.

The assignor is Kafka's share-group ``SimpleAssignor`` ("simple"): when every
member subscribes to the same topics (homogeneous) it balances all their
partitions over all members, otherwise each topic over the members subscribed
to it. For P partitions and M members each partition gets ``ceil(M / P)``
members (so with more members than partitions a partition goes to several),
and member i of M (sorted by id) gets ``ceil(S·P·(i+1)/M) − ceil(S·P·i/M)``
of them (S the sharing): balance first, then stickiness — a member keeps what
its previous target gave it while both limits allow, and the rest is handed
out round-robin. Kafka iterates Java hash sets; kcompat sorts, so the result is
deterministic (not necessarily Kafka's exact pick). Every partition of a
subscribed, existing topic is assigned whenever a member subscribes to it.

Persistence: ``snapshot()`` is what Kafka writes to ``__consumer_offsets`` for
the group (ShareGroupMetadata, -MemberMetadata, -TargetAssignmentMetadata,
-TargetAssignmentMember, -CurrentMemberAssignment) in one value;
``ShareGroup.restore(snapshot, now_ms, partition_counts=...)`` rebuilds the
machine and, like Kafka's ``onLoaded``, gives every member a fresh session
from ``now_ms``.

Not here (yet): Kafka's gate that assigns a partition only once the share
coordinator has initialised its state (InitializeShareGroupState) — the host
can express it by passing only initialised partitions in the metadata — rack
awareness (the simple assignor has none), and group configs changed at runtime
(replace ``config``).

Pure and deterministic: no clock, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.group.epoch_group import DescribedGroup, EpochGroup, HeartbeatResult

LEAVE_GROUP_MEMBER_EPOCH = -1
ASSIGNOR_NAME = "simple"
EMPTY = "Empty"
STABLE = "Stable"

TopicPartitions = tuple[tuple[str, tuple[int, ...]], ...]  # sorted, no empty topic
_Partition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class ShareGroupConfig:
    session_timeout_ms: int = 45_000  # group.share.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.share.heartbeat.interval.ms
    max_size: int = 200  # group.share.max.size


@dataclass(frozen=True, slots=True)
class MemberRecord:
    """One member as ShareGroupDescribe reports it and the snapshot stores it."""

    member_id: str
    member_epoch: int
    previous_member_epoch: int
    subscribed_topic_names: tuple[str, ...]
    assignment: TopicPartitions
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""


DescribedShareGroup = DescribedGroup[MemberRecord]


@dataclass(frozen=True, slots=True)
class ShareGroupSnapshot:
    group_id: str
    group_epoch: int
    assignment_epoch: int
    members: tuple[MemberRecord, ...]
    target_assignment: tuple[tuple[str, TopicPartitions], ...]
    partition_counts: tuple[tuple[str, int], ...]  # the subscribed topics' metadata
    topic_ids: tuple[tuple[str, str], ...] = ()  # and their ids (none: an older broker's)


@dataclass(slots=True)
class _Member:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    subscribed: tuple[str, ...] = ()
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    assigned: TopicPartitions = ()
    deadline_ms: int = 0
    # the ids of its assigned topics when its assignment was last sent, and the
    # group's topic-id mapping at its last heartbeat (``EpochGroup._sends_assignment``)
    sent_ids: tuple[str, ...] | None = None
    ids_seen: object = None

    def record(self) -> MemberRecord:
        return MemberRecord(self.member_id, self.member_epoch, self.previous_member_epoch,
                            self.subscribed, self.assigned, self.rack_id, self.client_id,
                            self.client_host)


class ShareGroup(EpochGroup[_Member]):
    def __init__(self, group_id: str, config: ShareGroupConfig | None = None,
                 partition_counts: Mapping[str, int] | None = None) -> None:
        super().__init__(group_id, partition_counts)
        self.config = config or ShareGroupConfig()

    # -- what the host reads -------------------------------------------------

    @property
    def state(self) -> str:
        return STABLE if self._members else EMPTY

    def member(self, member_id: str) -> MemberRecord | None:
        member = self._members.get(member_id)
        return None if member is None else member.record()

    def target_assignment(self, member_id: str) -> TopicPartitions:
        return self._target.get(member_id, ())

    def next_deadline_ms(self) -> int | None:
        """When ``tick`` next has work: the earliest session expiry."""
        return min((m.deadline_ms for m in self._members.values()), default=None)

    def describe(self) -> DescribedShareGroup:
        members = tuple(self._members[m].record() for m in sorted(self._members))
        return DescribedGroup(self.group_id, self.state, self._group_epoch,
                              self._assignment_epoch, ASSIGNOR_NAME, members,
                              self._topic_ids)

    # -- transitions ---------------------------------------------------------

    def heartbeat(self, member_id: str, member_epoch: int, now_ms: int,
                  subscribed_topic_names: Sequence[str] | None = None,
                  rack_id: str | None = None, client_id: str = "",
                  client_host: str = "",
                  partition_counts: Mapping[str, int] | None = None) -> HeartbeatResult:
        """One ShareGroupHeartbeat: join (epoch 0), heartbeat or leave (-1).
        ``partition_counts``: the cluster's topics now, taken in
        (``update_metadata``) once the member and its epoch passed the checks:
        a refused heartbeat changes no group epoch, as in Kafka."""
        invalid = _check_request(member_id, member_epoch, subscribed_topic_names, rack_id)
        if invalid is not None:
            return _error(ErrorCode.invalid_request, invalid)
        if member_epoch != 0 and not self.exists:
            return _error(ErrorCode.group_id_not_found,
                          f"Share group {self.group_id} not found.")
        if member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            return self._leave(member_id)
        member = self._members.get(member_id)
        if member is None and len(self._members) >= self.config.max_size:
            return _error(ErrorCode.group_max_size_reached,
                          "The share group has reached its maximum capacity of "
                          f"{self.config.max_size} members.")
        if member is None and member_epoch != 0:
            return _error(ErrorCode.unknown_member_id,
                          f"Member {member_id} is not a member of group {self.group_id}.")
        if member is not None and _fenced(member, member_epoch):
            return _error(ErrorCode.fenced_member_epoch,
                          f"The share group member has epoch {member_epoch}, the group "
                          f"coordinator {member.member_epoch}.")
        if partition_counts is not None:
            self.update_metadata(partition_counts)
        try:
            return self._heartbeat(member or _Member(member_id), member_epoch, now_ms,
                                   subscribed_topic_names, rack_id, client_id, client_host)
        finally:
            self._metadata_bumped = False

    # -- persistence ---------------------------------------------------------

    def snapshot(self) -> ShareGroupSnapshot:
        return ShareGroupSnapshot(
            self.group_id, self._group_epoch, self._assignment_epoch,
            tuple(self._members[m].record() for m in sorted(self._members)),
            tuple(sorted((m, a) for m, a in self._target.items() if a)),
            tuple(sorted(self._subscribed_counts().items())), tuple(self.subscribed_ids()))

    @classmethod
    def restore(cls, snapshot: ShareGroupSnapshot, now_ms: int,
                config: ShareGroupConfig | None = None,
                partition_counts: Mapping[str, int] | None = None) -> ShareGroup:
        """Rebuild from a snapshot; every member's session restarts at ``now_ms``.
        ``partition_counts`` is the cluster's metadata now (the snapshot holds
        only the subscribed topics'): a change since the snapshot bumps the
        epoch, as Kafka's metadata hash check does at the next heartbeat."""
        group = cls(snapshot.group_id, config, dict(snapshot.partition_counts))
        group._group_epoch = snapshot.group_epoch
        group._assignment_epoch = snapshot.assignment_epoch
        deadline_ms = now_ms + group.config.session_timeout_ms
        for r in snapshot.members:
            group._members[r.member_id] = _Member(
                r.member_id, r.member_epoch, r.previous_member_epoch,
                r.subscribed_topic_names, r.rack_id, r.client_id, r.client_host,
                r.assignment, deadline_ms)
        group._target = {m: a for m, a in snapshot.target_assignment
                         if m in group._members}
        group._restore_metadata(snapshot.topic_ids, partition_counts)
        return group

    # -- internals -----------------------------------------------------------

    def _expired(self, member: _Member, now_ms: int) -> bool:
        """Its session ended (``tick``)."""
        return member.deadline_ms <= now_ms

    def _heartbeat(self, member: _Member, member_epoch: int, now_ms: int,
                   subscribed_topic_names: Sequence[str] | None, rack_id: str | None,
                   client_id: str, client_host: str) -> HeartbeatResult:
        old_assigned = member.assigned
        changed = member.member_id not in self._members
        if subscribed_topic_names is not None:
            subscribed = tuple(sorted(set(subscribed_topic_names)))
            changed = changed or subscribed != member.subscribed
            member.subscribed = subscribed
        if rack_id is not None:
            member.rack_id = rack_id
        member.client_id, member.client_host = client_id, client_host
        member.deadline_ms = now_ms + self.config.session_timeout_ms
        self._members[member.member_id] = member
        if changed and not self._bump_once():
            self._assign()  # the epoch moved with the metadata: the new subscription too
        self._reconcile(member, changed)
        send = self._sends_assignment(member, (
            member_epoch == 0 or subscribed_topic_names is not None
            or member.assigned != old_assigned))
        return HeartbeatResult(ErrorCode.none, member.member_id, member.member_epoch,
                               self.config.heartbeat_interval_ms,
                               member.assigned if send else None)

    def _reconcile(self, member: _Member, subscription_changed: bool) -> None:
        """No revocation phase: the member takes its target at once."""
        if member.member_epoch != self._assignment_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = self._assignment_epoch
        elif not subscription_changed:
            return
        subscribed = set(member.subscribed)
        member.assigned = tuple(
            (t, ps) for t, ps in self._target.get(member.member_id, ()) if t in subscribed)

    def _leave(self, member_id: str) -> HeartbeatResult:
        if member_id not in self._members:
            return _error(ErrorCode.unknown_member_id,
                          f"Member {member_id} is not a member of group {self.group_id}.")
        self._remove(member_id)
        return HeartbeatResult(ErrorCode.none, member_id, LEAVE_GROUP_MEMBER_EPOCH)

    def _remove(self, member_id: str) -> None:
        del self._members[member_id]
        self._target.pop(member_id, None)
        self._bump()

    def _bump(self) -> None:
        self._group_epoch += 1
        self._assign()

    def _assign(self) -> None:
        """The target assignment of the group epoch."""
        subscriptions = {m.member_id: m.subscribed for m in self._members.values()}
        self._target = simple_assign(subscriptions, self._topics, self._target)
        self._assignment_epoch = self._group_epoch

    def _subscribed_counts(self) -> dict[str, int]:
        topics = {t for m in self._members.values() for t in m.subscribed}
        return {t: self._topics[t] for t in topics if t in self._topics}


# -- the simple assignor --------------------------------------------------------


def snapshot_to_json(snapshot: ShareGroupSnapshot, seen: Iterable[str] = ()) -> bytes:
    """The snapshot as the coordinator stores it in ``__consumer_offsets``,
    with ``seen``: every topic the group ever subscribed to (whose share
    state DeleteGroups deletes)."""
    def assigned(tps: TopicPartitions) -> list[Any]:
        return [[topic, list(parts)] for topic, parts in tps]
    return json.dumps({
        "group": snapshot.group_id, "epoch": snapshot.group_epoch,
        "assignment_epoch": snapshot.assignment_epoch,
        "members": [[m.member_id, m.member_epoch, m.previous_member_epoch,
                     list(m.subscribed_topic_names), assigned(m.assignment), m.rack_id,
                     m.client_id, m.client_host] for m in snapshot.members],
        "target": [[member, assigned(tps)] for member, tps in snapshot.target_assignment],
        "topics": [list(tc) for tc in snapshot.partition_counts],
        "ids": [list(ti) for ti in snapshot.topic_ids],
        "seen": sorted(seen),
    }, separators=(",", ":")).encode()


def snapshot_from_json(raw: bytes) -> tuple[ShareGroupSnapshot, set[str]]:
    """(snapshot, topics seen); ValueError for anything that is not one."""
    def assigned(items: Any) -> TopicPartitions:
        return tuple((str(t), tuple(int(p) for p in parts)) for t, parts in items)
    try:
        d = json.loads(raw)
        members = tuple(MemberRecord(str(m[0]), int(m[1]), int(m[2]), tuple(m[3]),
                                     assigned(m[4]), m[5], str(m[6]), str(m[7]))
                        for m in d["members"])
        snapshot = ShareGroupSnapshot(
            str(d["group"]), int(d["epoch"]), int(d["assignment_epoch"]), members,
            tuple((str(m), assigned(a)) for m, a in d["target"]),
            tuple((str(t), int(c)) for t, c in d["topics"]),
            tuple((str(t), str(i)) for t, i in d.get("ids", ())))
        return snapshot, {str(t) for t in d.get("seen", ())}
    except (KeyError, IndexError, TypeError, AttributeError) as e:
        raise ValueError(f"not a share-group snapshot: {e}") from e


def simple_assign(subscriptions: Mapping[str, Sequence[str]],
                  partition_counts: Mapping[str, int],
                  current: Mapping[str, TopicPartitions]) -> dict[str, TopicPartitions]:
    """Kafka's share-group SimpleAssignor over ``{member: subscribed topics}``,
    sticky to ``current`` (the previous target assignment)."""
    members = sorted(subscriptions)
    old = {m: {(t, p) for t, ps in current.get(m, ()) for p in ps} for m in members}
    out: dict[str, set[_Partition]] = {m: set() for m in members}
    topic_sets = {frozenset(subscriptions[m]) for m in members}
    if len(topic_sets) == 1:  # homogeneous: all partitions over all members
        topics = sorted(next(iter(topic_sets)))
        _balance(_partitions(topics, partition_counts), members, old, out)
    else:  # heterogeneous: topic by topic over its subscribers
        for topic in sorted({t for m in members for t in subscriptions[m]}):
            subscribers = [m for m in members if topic in subscriptions[m]]
            _balance(_partitions([topic], partition_counts), subscribers, old, out)
    return {m: _grouped(out[m]) for m in members}


def _balance(partitions: list[_Partition], members: list[str],
             old: Mapping[str, set[_Partition]], out: dict[str, set[_Partition]]) -> None:
    if not partitions or not members:
        return
    sharing = -(-len(members) // len(partitions))
    slots = sharing * len(partitions)
    desired = {m: _ceil_div(slots * (i + 1), len(members)) - _ceil_div(slots * i, len(members))
               for i, m in enumerate(members)}
    holders: dict[_Partition, int] = dict.fromkeys(partitions, 0)
    count = dict.fromkeys(members, 0)
    for m in members:  # stickiness, within both limits
        for tp in sorted(old[m] & holders.keys()):
            if count[m] < desired[m] and holders[tp] < sharing:
                out[m].add(tp)
                holders[tp] += 1
                count[m] += 1
    unfilled = [m for m in members if count[m] < desired[m]]
    i = 0
    for tp in partitions:  # round-robin over the members still short
        tried = 0
        while holders[tp] < sharing and unfilled and tried < len(unfilled):
            i %= len(unfilled)
            m = unfilled[i]
            if tp in out[m]:
                i, tried = i + 1, tried + 1
                continue
            out[m].add(tp)
            holders[tp] += 1
            count[m] += 1
            tried = 0
            if count[m] >= desired[m]:
                unfilled.pop(i)
            else:
                i += 1


def _partitions(topics: Iterable[str], partition_counts: Mapping[str, int]) -> list[_Partition]:
    return [(t, p) for t in topics for p in range(partition_counts.get(t, 0))]


def _grouped(partitions: Iterable[_Partition]) -> TopicPartitions:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return tuple((t, tuple(ps)) for t, ps in by_topic.items())


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _fenced(member: _Member, member_epoch: int) -> bool:
    """Kafka 4.4 share groups take only the member's current epoch (a lost
    response is recovered by rejoining with 0); 0 rejoins."""
    return member_epoch not in (0, member.member_epoch)


def _check_request(member_id: str, member_epoch: int,
                   subscribed_topic_names: Sequence[str] | None,
                   rack_id: str | None) -> str | None:
    if not member_id.strip():
        return "MemberId can't be empty."
    if rack_id is not None and not rack_id.strip():
        return "RackId can't be empty."
    if member_epoch == 0 and not subscribed_topic_names:
        return "SubscribedTopicNames must be set in first request."
    if member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
        return "MemberEpoch is invalid."
    return None


def _error(error: ErrorCode, message: str) -> HeartbeatResult:
    return HeartbeatResult(error, error_message=message)
