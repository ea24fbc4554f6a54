"""The membership and assignment of one KIP-848 consumer group, sans-IO.

Theory of operation
-------------------
This machine owns what Kafka 4.4's group coordinator keeps for one consumer
group served through ConsumerGroupHeartbeat (API key 68) and
ConsumerGroupDescribe (69): the members (``consumer_member``), the **group
epoch**, the **target assignment** and its epoch, and each member's epoch and
current assignment. The host keeps one machine per group id, passes in the
cluster's topics as ``{topic: partition count}`` (``update_metadata``) and
drives time with ``tick(now_ms)``.

Rules, as Kafka 4.4 answers them (checked against the reference broker):

* ``check_request`` refuses malformed heartbeats with INVALID_REQUEST and
  Kafka's messages, a bad regex with INVALID_REGULAR_EXPRESSION and an
  unknown ``ServerAssignor`` with UNSUPPORTED_ASSIGNOR.
* Epoch 0 joins (creating the group) or rejoins (a known member keeps its
  epoch and gets its full assignment); -1 leaves; -2 is a static member's
  temporary leave: it stays, at epoch -2, until its session ends or its
  instance id rejoins under a new member id and takes its place, epoch and
  assignment. Other epochs heartbeat; the previous epoch is accepted when the
  owned partitions are a subset of the current assignment (a lost answer);
  any other mismatch is FENCED_MEMBER_EPOCH.
* The group epoch goes up when a member leaves or expires, when one joins or
  changes its subscription (names, regex, assignor: a member joining with no
  topics, no regex and no assignor leaves it as it is, as Kafka 4.4 compares
  a new member with one subscribed to nothing) and when the partitions of the
  topics the group subscribes to change (taken in by the next heartbeat that
  passes the member and epoch checks: a refused one changes nothing, as in
  Kafka). A new group starts at epoch 1, so
  at 2 for a first member that subscribes to something, as Kafka 4.4's does.
* The target assignment is recomputed by a heartbeat once the group epoch is
  ahead of it and ``assignment_interval_ms`` (``group.consumer.assignment.interval.ms``,
  1000) has passed since the last computation; meanwhile the group is
  "Assigning". Each heartbeat then reconciles its member (``reconcile``).
* Regex subscriptions are resolved here against the topic names (full match),
  again whenever the topics change. With an authorizer (the host's
  ``topic_filter``) a member's regex yields only the topics its principal may
  DESCRIBE from its host (Kafka's ``filterTopicDescribeAuthorizedTopics``), so
  a consumer is never assigned a topic it could not read or learn of; ACL
  changes reach the resolutions ``regex_refresh_interval_ms``
  (``group.consumer.regex.refresh.interval.ms``) after they were made, as
  Kafka refreshes them. Resolutions are per principal and host, not one per
  group as Kafka's (whose is filtered by whichever member's heartbeat
  refreshed it).
* Sessions end ``session_timeout_ms`` after the last heartbeat; a member that
  does not revoke within its rebalance timeout is removed too (``tick``).

Classic members (Kafka 4.4's mixed groups): a consumer using JoinGroup /
SyncGroup / Heartbeat is a member like the others, its subscription and owned
partitions read from its protocol metadata (``consumer_protocol``). Its
JoinGroup is answered at once with its member epoch as generation; SyncGroup
gives its current assignment; its heartbeat says REBALANCE_IN_PROGRESS when it
must rejoin to move on (a partition to give up — a classic consumer revokes
only across a rejoin —, a newer target, or a partition it waits for now free).
``from_classic`` converts a live classic group (Kafka's online upgrade).

Persistence: ``snapshot_json()`` is the whole group as one value the host
writes to ``__consumer_offsets``; ``ConsumerGroup.restore`` rebuilds it and,
as Kafka's ``onLoaded``, gives every member a fresh session.

Pure and deterministic: no clock, no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.group.assignors import ASSIGNORS, Partition, flat, grouped
from kcompat.group.consumer_classic import ClassicMembers, ClassicMemberState
from kcompat.group.consumer_member import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    STABLE,
    ConsumerMember,
    reconcile,
)
from kcompat.group.consumer_messages import (
    ConsumerGroupConfig,
    DescribedConsumerGroup,
    DescribedMember,
    GroupError,
    Heartbeat,
    HeartbeatResult,
)
from kcompat.group.consumer_protocol import decode_assignment, decode_subscription
from kcompat.group.epoch_group import DescribedGroup, EpochGroup

EMPTY, ASSIGNING, RECONCILING, STABLE_GROUP, DEAD = (
    "Empty", "Assigning", "Reconciling", "Stable", "Dead")
NO_TIME = -(1 << 62)


def _fenced_instance(hb: Heartbeat, owner: ConsumerMember) -> str:
    return (f"Static member {hb.member_id} with instance id {hb.instance_id} was fenced by "
            f"member {owner.member_id}.")


#: (principal, client host, topics) -> those of the topics the principal may DESCRIBE
TopicFilter = Callable[[str, str, tuple[str, ...]], Iterable[str]]


class ConsumerGroup(EpochGroup[ConsumerMember], ClassicMembers):
    def __init__(self, group_id: str, config: ConsumerGroupConfig | None = None,
                 partition_counts: Mapping[str, int] | None = None) -> None:
        super().__init__(group_id, partition_counts)
        self.config = config or ConsumerGroupConfig()
        self._assigned_at_ms = NO_TIME
        self._regex: dict[str, tuple[str, ...]] = {}  # regex -> the topics it matches
        self.topic_filter: TopicFilter | None = None  # the host's authorizer; None: all
        # (regex, principal, host) -> the topics it matches that the principal may describe
        self._allowed: dict[tuple[str, str, str], tuple[str, ...]] = {}
        self._allowed_since_ms = NO_TIME

    # -- what the host reads -------------------------------------------------

    @property
    def state(self) -> str:
        if not self._members:
            return EMPTY
        if self._group_epoch > self._assignment_epoch:
            return ASSIGNING
        if any(m.member_epoch != self._assignment_epoch or m.state != STABLE
               for m in self._members.values()):
            return RECONCILING
        return STABLE_GROUP

    def member(self, member_id: str) -> ConsumerMember | None:
        return self._members.get(member_id)

    def subscribed_topics(self, member: ConsumerMember) -> tuple[str, ...]:
        names = set(member.subscribed_topic_names or ())
        if member.subscribed_topic_regex is not None:
            names.update(self._regex_topics(member.subscribed_topic_regex, member))
        return tuple(sorted(names))

    def _regex_topics(self, regex: str, member: ConsumerMember) -> tuple[str, ...]:
        matched = self._regex.get(regex, ())
        if self.topic_filter is None or not matched:
            return matched
        key = (regex, member.principal, member.client_host)
        found = self._allowed.get(key)
        if found is None:
            allowed = set(self.topic_filter(member.principal, member.client_host, matched))
            found = self._allowed[key] = tuple(t for t in matched if t in allowed)
        return found

    def assignor_name(self) -> str:
        """The assignor most members asked for, else the broker's first."""
        votes: dict[str, int] = {}
        for m in self._members.values():
            if m.server_assignor is not None:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        if not votes:
            return self.config.assignors[0]
        return min(votes, key=lambda name: (-votes[name], name))

    def next_deadline_ms(self) -> int | None:
        deadlines = [m.session_deadline_ms for m in self._members.values()]
        deadlines += [m.revoke_deadline_ms for m in self._members.values()
                      if m.revoke_deadline_ms is not None]
        return min(deadlines, default=None)

    def describe(self) -> DescribedConsumerGroup:
        members = tuple(DescribedMember(
            m.member_id, m.instance_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
            m.subscribed_topic_names or (), m.subscribed_topic_regex or "", grouped(m.owned),
            self._target.get(m.member_id, ()), m.is_classic) for m in self._sorted_members())
        return DescribedGroup(self.group_id, self.state, self._group_epoch,
                              self._assignment_epoch, self.assignor_name(), members,
                              self._topic_ids)

    def _sorted_members(self) -> list[ConsumerMember]:
        return [self._members[m] for m in sorted(self._members)]

    # -- offsets from consumer-protocol members ---------------------------------

    def offsets_error(self, member_id: str | None, member_epoch: int
                      ) -> tuple[ErrorCode, str] | None:
        """OffsetFetch: a member must name its current epoch (a classic member
        its generation)."""
        member = self._members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id, (
                f"Member {member_id} is not a member of group {self.group_id}.")
        if member_epoch != member.member_epoch and member.is_classic:
            return ErrorCode.illegal_generation, (
                f"The member's generation {member_epoch} is not the group's "
                f"{member.member_epoch}.")
        if member_epoch != member.member_epoch:
            older = "older" if member_epoch < member.member_epoch else "newer"
            return ErrorCode.stale_member_epoch, (
                f"The received member epoch {member_epoch} is {older} than the expected "
                f"member epoch {member.member_epoch}.")
        return None

    def commit_errors(self, member_id: str, member_epoch: int, partitions: Iterable[Partition],
                      transactional: bool = False
                      ) -> tuple[ErrorCode | None, dict[Partition, ErrorCode]]:
        """OffsetCommit / TxnOffsetCommit from a member: (the error of the whole
        request, the errors of single partitions). The current epoch commits
        anything; a newer one nothing; an older one (KIP-1251) the partitions
        the member has owned since that epoch or before. A mismatch is
        STALE_MEMBER_EPOCH, ILLEGAL_GENERATION for a classic member or a
        transactional commit."""
        member = self._members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id, {}
        stale = (ErrorCode.illegal_generation if member.is_classic or transactional
                 else ErrorCode.stale_member_epoch)
        if member_epoch == member.member_epoch:
            return None, {}
        if member.is_classic or member_epoch > member.member_epoch:
            return stale, {}
        held = member.assignment_epochs
        return None, {tp: stale for tp in partitions
                      if tp not in held or held[tp] > member_epoch}

    # -- transitions ---------------------------------------------------------

    def heartbeat(self, hb: Heartbeat, now_ms: int,
                  partition_counts: Mapping[str, int] | None = None) -> HeartbeatResult:
        """One well-formed ConsumerGroupHeartbeat (``check_request`` passed);
        ``partition_counts``: the cluster's topics now, taken in
        (``update_metadata``) once the member and its epoch passed the checks,
        so that a refused heartbeat changes no group epoch (as in Kafka)."""
        self._refresh_authorized(now_ms)
        try:
            if hb.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(hb)
            if hb.member_epoch != 0 and not self.exists:
                raise GroupError(ErrorCode.group_id_not_found,
                                 f"Consumer group {self.group_id} not found.")
            if hb.member_id not in self._members and len(self._members) >= self.config.max_size:
                raise GroupError(ErrorCode.group_max_size_reached,
                                 "The consumer group has reached its maximum capacity of "
                                 f"{self.config.max_size} members.")
            member = (self._dynamic_member(hb) if hb.instance_id is None
                      else self._static_member(hb))
        except GroupError as e:
            return HeartbeatResult(e.code, error_message=e.message)
        if partition_counts is not None:
            self.update_metadata(partition_counts)
        try:
            return self._heartbeat(member, hb, now_ms)
        finally:
            self._metadata_bumped = False

    def _topics_changed(self) -> None:
        """A regex subscription matches the topics there are now."""
        resolved = {r: self._resolve(r) for r in self._regex}
        moved = {r for r, topics in resolved.items() if self._regex.get(r) != topics}
        self._regex = resolved
        if moved:
            self._allowed = {k: v for k, v in self._allowed.items() if k[0] not in moved}

    def _subscriptions(self) -> object:
        """Each member's subscribed topics too: one member's may change (a
        topic it may now describe) while the group's union stays the same."""
        each = {m.member_id: self.subscribed_topics(m) for m in self._members.values()}
        union = {t for topics in each.values() for t in topics}
        return {t: self._topics[t] for t in union if t in self._topics}, each

    def _refresh_authorized(self, now_ms: int) -> None:
        """The ACL-filtered resolutions are made again
        ``regex_refresh_interval_ms`` after the last time (an ACL change
        reaches the assignment then); a change bumps the group epoch."""
        if now_ms < self._allowed_since_ms + self.config.regex_refresh_interval_ms:
            return
        self._allowed_since_ms = now_ms
        if not self._allowed:
            return
        before = self._subscriptions()
        self._allowed = {}
        if self._subscriptions() != before:
            self._bump()

    def _expired(self, member: ConsumerMember, now_ms: int) -> bool:
        """Its session ended or it did not revoke within its rebalance timeout
        (``tick``)."""
        return member.session_deadline_ms <= now_ms or (
            member.revoke_deadline_ms is not None and member.revoke_deadline_ms <= now_ms)

    # -- members ---------------------------------------------------------------

    def _dynamic_member(self, hb: Heartbeat) -> ConsumerMember:
        member = self._members.get(hb.member_id)
        if member is None:
            if hb.member_epoch != 0:
                raise GroupError(ErrorCode.unknown_member_id,
                                 f"Member {hb.member_id} is not a member of group {self.group_id}.")
            return ConsumerMember(hb.member_id)
        if hb.member_epoch != 0:
            self._check_epoch(member, hb)
        return member

    def _static_member(self, hb: Heartbeat) -> ConsumerMember:
        existing = self._by_instance(hb.instance_id)
        if hb.member_epoch == 0:
            if existing is None:
                return self._members.get(hb.member_id) or ConsumerMember(hb.member_id)
            if existing.member_id == hb.member_id:
                return existing
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise GroupError(ErrorCode.unreleased_instance_id, (
                    f"Static member {hb.member_id} with instance id {hb.instance_id} cannot join "
                    f"the group because the instance id is owned by {existing.member_id} member."))
            return self._replace(existing, hb.member_id)
        if existing is None:
            raise GroupError(ErrorCode.unknown_member_id, f"Instance id {hb.instance_id} is unknown.")
        if existing.member_id != hb.member_id:
            raise GroupError(ErrorCode.fenced_instance_id, _fenced_instance(hb, existing))
        self._check_epoch(existing, hb)
        return existing

    def _replace(self, old: ConsumerMember, member_id: str) -> ConsumerMember:
        """A static member back under a new member id: it takes the old one's
        place, epoch and assignment, without a new group epoch."""
        del self._members[old.member_id]
        target = self._target.pop(old.member_id, None)
        if target is not None:
            self._target[member_id] = target
        old.member_id = member_id
        old.member_epoch = old.previous_member_epoch
        self._members[member_id] = old
        return old

    def _by_instance(self, instance_id: str | None) -> ConsumerMember | None:
        return next((m for m in self._members.values() if m.instance_id == instance_id), None)

    def _check_epoch(self, member: ConsumerMember, hb: Heartbeat) -> None:
        epoch = hb.member_epoch
        if epoch == member.member_epoch:
            return
        if epoch < member.member_epoch and epoch == member.previous_member_epoch \
                and hb.owned is not None and flat(hb.owned) <= member.assigned:
            return  # the answer that moved it on was lost
        word = "greater" if epoch > member.member_epoch else "smaller"
        raise GroupError(ErrorCode.fenced_member_epoch, (
            f"The consumer group member has a {word} member epoch ({epoch}) than the one known "
            f"by the group coordinator ({member.member_epoch}). The member must abandon all its "
            "partitions and rejoin."))

    def _heartbeat(self, member: ConsumerMember, hb: Heartbeat, now_ms: int) -> HeartbeatResult:
        old_assigned = set(member.assigned)
        # a new member changes the group only by what it subscribes to (Kafka
        # compares it with a member subscribed to nothing): one that joins
        # with no topics, regex or assignor leaves the group epoch as it is
        changed = False
        subscription_changed = False  # Kafka's hasSubscriptionChanged (names, regex)
        if self._group_epoch == 0:  # a new group
            self._group_epoch = 1
        if hb.instance_id is not None:
            member.instance_id = hb.instance_id
        if hb.rack_id is not None:
            member.rack_id = hb.rack_id
        if hb.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = hb.rebalance_timeout_ms
        for attr in ("subscribed_topic_names", "subscribed_topic_regex", "server_assignor"):
            value = getattr(hb, attr)
            if value is not None and value != getattr(member, attr):
                was = getattr(member, attr)
                setattr(member, attr, value)
                moved = not (attr == "subscribed_topic_names" and not value and not was)
                changed |= moved
                subscription_changed |= moved and attr != "server_assignor"
        if (hb.principal, hb.client_host) != (member.principal, member.client_host) \
                and member.subscribed_topic_regex is not None and self.topic_filter is not None:
            changed = subscription_changed = True  # its regex may resolve to other topics now
        member.client_id, member.client_host = hb.client_id, hb.client_host
        member.principal = hb.principal
        member.session_deadline_ms = now_ms + self._session_ms(member)
        self._members[member.member_id] = member
        if member.subscribed_topic_regex is not None and member.subscribed_topic_regex \
                not in self._regex:
            self._regex[member.subscribed_topic_regex] = self._resolve(member.subscribed_topic_regex)
        if changed:
            self._bump_once()
        self._maybe_assign(now_ms)
        reconcile(member, self._target.get(member.member_id, ()), self._assignment_epoch,
                  self._owner_of, hb.owned, now_ms, partial(self.subscribed_topics, member),
                  subscription_changed)
        full = hb.member_epoch == 0 or (
            hb.rebalance_timeout_ms != -1 and hb.owned is not None
            and (hb.subscribed_topic_names is not None or hb.subscribed_topic_regex is not None))
        send = self._sends_assignment(member, full or member.assigned != old_assigned)
        return HeartbeatResult(ErrorCode.none, member.member_id, member.member_epoch,
                               self.config.heartbeat_interval_ms,
                               member.assignment() if send else None)

    def _leave(self, hb: Heartbeat) -> HeartbeatResult:
        if not self.exists:
            return HeartbeatResult(ErrorCode.group_id_not_found,
                                   error_message=f"Group {self.group_id} not found.")
        try:
            if hb.instance_id is None:
                member = self._members.get(hb.member_id)
                if member is None:
                    raise GroupError(ErrorCode.unknown_member_id, (
                        f"Member {hb.member_id} is not a member of group {self.group_id}."))
            else:
                member = self._by_instance(hb.instance_id)
                if member is None:
                    raise GroupError(ErrorCode.unknown_member_id,
                                     f"Instance id {hb.instance_id} is unknown.")
                if member.member_id != hb.member_id:
                    raise GroupError(ErrorCode.fenced_instance_id,
                                     _fenced_instance(hb, member))
        except GroupError as e:
            return HeartbeatResult(e.code, error_message=e.message)
        if hb.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            member.set_epoch(LEAVE_GROUP_STATIC_MEMBER_EPOCH)
        else:
            self._remove(member.member_id)
        return HeartbeatResult(ErrorCode.none, member.member_id, hb.member_epoch)

    def _remove(self, member_id: str) -> None:
        del self._members[member_id]
        self._target.pop(member_id, None)
        self._bump()
        if not self._members:  # nothing to assign: the target is current at once
            self._target = {}
            self._assignment_epoch = self._group_epoch

    # -- assignment --------------------------------------------------------------

    def _bump(self) -> None:
        self._group_epoch += 1

    def _maybe_assign(self, now_ms: int) -> None:
        if self._group_epoch <= self._assignment_epoch:
            return
        if now_ms < self._assigned_at_ms + self.config.assignment_interval_ms:
            return
        subscriptions = {m.member_id: self.subscribed_topics(m) for m in self._members.values()}
        assign = ASSIGNORS[self.assignor_name()]
        self._target = assign(subscriptions, self._topics, self._target)
        self._assignment_epoch = self._group_epoch
        self._assigned_at_ms = now_ms

    def _owner_of(self, tp: Partition) -> str | None:
        for m in self._members.values():
            if tp in m.assigned or tp in m.revoking:
                return m.member_id
        return None

    def _resolve(self, regex: str) -> tuple[str, ...]:
        try:
            pattern = re.compile(regex)
        except re.error:
            return ()
        return tuple(sorted(t for t in self._topics if pattern.fullmatch(t)))

    def subscribed_topic_names(self) -> set[str]:
        """Every topic a member subscribes to, by name or by a regex it
        matches, whether or not it exists (Kafka's ``subscribedTopicNames``:
        OffsetDelete refuses their partitions)."""
        return {t for m in self._members.values() for t in self.subscribed_topics(m)}

    def _subscribed_counts(self) -> dict[str, int]:
        return {t: self._topics[t] for t in self.subscribed_topic_names() if t in self._topics}

    # -- persistence ---------------------------------------------------------

    def snapshot_json(self) -> bytes:
        return json.dumps({
            "group": self.group_id, "epoch": self._group_epoch,
            "assignment_epoch": self._assignment_epoch,
            "members": [m.to_json() for m in self._sorted_members()],
            "target": [[m, [[t, list(ps)] for t, ps in a]]
                       for m, a in sorted(self._target.items()) if a],
            "topics": sorted(map(list, self._subscribed_counts().items())),
            "ids": self.subscribed_ids(),
        }, separators=(",", ":")).encode()

    @classmethod
    def from_classic(cls, group_id: str, config: ConsumerGroupConfig,
                     partition_counts: Mapping[str, int], generation: int,
                     members: Sequence[ClassicMemberState], now_ms: int) -> ConsumerGroup | None:
        """A live classic group converted (Kafka's online upgrade): every member
        keeps its id, its assignment and the generation as its epoch, which is
        also the group and assignment epoch; None if a member's subscription or
        assignment bytes cannot be read."""
        group = cls(group_id, config, partition_counts)
        group._group_epoch = group._assignment_epoch = generation
        for c in members:
            subscription = decode_subscription(c.metadata)
            assigned = decode_assignment(c.assignment)
            if subscription is None or assigned is None:
                return None
            member = ConsumerMember(
                c.member_id, c.instance_id, subscription.rack_id, c.client_id, c.client_host,
                c.rebalance_timeout_ms, subscription.topics, member_epoch=generation,
                previous_member_epoch=generation, assigned=flat(assigned),
                session_deadline_ms=now_ms + c.session_timeout_ms,
                classic_session_timeout_ms=c.session_timeout_ms,
                classic_protocols=c.protocol_names,
                assignment_epochs=dict.fromkeys(flat(assigned), generation))
            group._members[member.member_id] = member
            group._target[member.member_id] = assigned
        group._assigned_at_ms = now_ms
        return group

    @classmethod
    def restore(cls, raw: bytes, now_ms: int, config: ConsumerGroupConfig | None = None,
                partition_counts: Mapping[str, int] | None = None) -> ConsumerGroup:
        """Rebuild from ``snapshot_json``; sessions restart at ``now_ms``; ValueError
        for anything else. ``partition_counts``: the topics now (a change since
        the snapshot bumps the group epoch)."""
        try:
            d: dict[str, Any] = json.loads(raw)
            group = cls(str(d["group"]), config, {str(t): int(c) for t, c in d["topics"]})
            group._group_epoch = int(d["epoch"])
            group._assignment_epoch = int(d["assignment_epoch"])
            for row in d["members"]:
                member = ConsumerMember.from_json(row)
                member.session_deadline_ms = now_ms + group.config.session_timeout_ms
                if member.revoking:
                    member.revoke_deadline_ms = now_ms + max(member.rebalance_timeout_ms, 0)
                group._members[member.member_id] = member
            group._target = {str(m): grouped((str(t), int(p)) for t, ps in a for p in ps)
                             for m, a in d["target"]}
            ids = [(str(t), str(i)) for t, i in d.get("ids", ())]  # none: an older broker's
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"not a consumer-group snapshot: {e}") from e
        for m in group._members.values():
            if m.subscribed_topic_regex is not None:
                group._regex[m.subscribed_topic_regex] = group._resolve(m.subscribed_topic_regex)
        group._restore_metadata(ids, partition_counts)
        return group
