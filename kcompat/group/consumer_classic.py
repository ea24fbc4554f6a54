"""Classic members of a KIP-848 consumer group (Kafka 4.4's mixed groups), sans-IO.

Theory of operation
-------------------
A consumer still on the classic protocol (JoinGroup / SyncGroup / Heartbeat /
LeaveGroup, ``group.protocol=classic``) may be a member of a consumer group:
during a rolling upgrade, or when a consumer-protocol member joined its live
classic group and converted it (``ConsumerGroup.from_classic``). It is a member
like the others — same target assignment, same reconciliation — whose
subscription and owned partitions are read from its protocol metadata
(``consumer_protocol``), with its own session timeout:

* JoinGroup is answered at once: its member epoch as generation, the first of
  its protocols, never as leader (the coordinator assigns). A new dynamic
  member is first asked to rejoin with an id (MEMBER_ID_REQUIRED, v4+).
* SyncGroup gives its current assignment (REBALANCE_IN_PROGRESS if the target
  moved on since its join).
* Heartbeat says REBALANCE_IN_PROGRESS when it must rejoin to move on: a
  partition to give up (a classic consumer revokes only across a rejoin), a
  newer target, or a partition it waits for now free.
* Its offsets are checked by generation (ILLEGAL_GENERATION), as Kafka does.

``ClassicMembers`` is a mixin of ``ConsumerGroup``: it works on the group's
members and target through the group's own transitions. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kcompat.group.assignors import Partition, TopicPartitions, flat
from kcompat.group.consumer_member import (
    UNRELEASED_PARTITIONS,
    UNREVOKED_PARTITIONS,
    ConsumerMember,
)
from kcompat.group.consumer_messages import (
    ConsumerGroupConfig,
    GroupError,
    Heartbeat,
    HeartbeatResult,
)
from kcompat.group.consumer_protocol import decode_subscription

CONSUMER_PROTOCOL_TYPE = "consumer"


@dataclass(frozen=True, slots=True)
class ClassicJoin:
    """A JoinGroup of a classic member, as the machine needs it."""

    member_id: str  # "" for a new member
    new_member_id: str  # the id the host made for it
    instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    require_known_member_id: bool = True
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class ClassicJoinResult:
    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class ClassicMemberState:
    """A member of a classic group being converted: its selected protocol's
    subscription bytes and its assignment bytes."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_names: tuple[str, ...]
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class ClassicSyncResult:
    error: ErrorCode
    assignment: TopicPartitions = ()
    protocol_name: str | None = None


class ClassicMembers:
    """The classic-protocol side of ``ConsumerGroup`` (see the module doc)."""

    if TYPE_CHECKING:  # provided by ConsumerGroup
        config: ConsumerGroupConfig
        _members: dict[str, ConsumerMember]
        _target: dict[str, TopicPartitions]
        _assignment_epoch: int
        _owner_of: Callable[[Partition], str | None]

        def _heartbeat(self, member: ConsumerMember, hb: Heartbeat,
                       now_ms: int) -> HeartbeatResult: ...
        def _by_instance(self, instance_id: str | None) -> ConsumerMember | None: ...
        def _replace(self, old: ConsumerMember, member_id: str) -> ConsumerMember: ...
        def _remove(self, member_id: str) -> None: ...
        def _maybe_assign(self, now_ms: int) -> None: ...

    def classic_join(self, join: ClassicJoin, now_ms: int) -> ClassicJoinResult:
        """A classic member (re)joins: its subscription and owned partitions come
        from its consumer-protocol metadata; it is reconciled as a KIP-848 member
        and answered at once with its member epoch as generation. The host
        names a member without id (``join.new_member_id``) and asks it to
        rejoin with it first when ``join.require_known_member_id``."""
        unknown = not join.member_id
        member_id = join.new_member_id if unknown else join.member_id
        if member_id not in self._members and len(self._members) >= self.config.max_size:
            return ClassicJoinResult(ErrorCode.group_max_size_reached, member_id)
        if join.protocol_type != CONSUMER_PROTOCOL_TYPE or not join.protocols \
                or not self._supports(join.protocols):
            return ClassicJoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        if unknown and join.require_known_member_id and join.instance_id is None:
            return ClassicJoinResult(ErrorCode.member_id_required, member_id)
        subscription = decode_subscription(join.protocols[0][1])
        if subscription is None:
            return ClassicJoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        try:
            member = self._classic_member_for_join(member_id, join.instance_id, unknown)
        except GroupError as e:
            return ClassicJoinResult(e.code, member_id)
        member.classic_session_timeout_ms = join.session_timeout_ms
        member.classic_protocols = tuple(name for name, _ in join.protocols)
        self._heartbeat(member, Heartbeat(
            member.member_id, member.member_epoch, join.instance_id, subscription.rack_id,
            join.rebalance_timeout_ms, subscription.topics, None, None, subscription.owned,
            join.client_id, join.client_host), now_ms)
        return ClassicJoinResult(ErrorCode.none, member.member_id, member.member_epoch,
                                 member.classic_protocols[0])

    def classic_sync(self, member_id: str, instance_id: str | None, generation: int,
                     protocol_type: str | None, protocol_name: str | None,
                     now_ms: int) -> ClassicSyncResult:
        """Its current assignment for a classic member at its generation."""
        try:
            member = self._classic_member(member_id, instance_id, generation)
        except GroupError as e:
            return ClassicSyncResult(e.code)
        if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
                protocol_name is not None and protocol_name != member.classic_protocols[0]):
            return ClassicSyncResult(ErrorCode.inconsistent_group_protocol)
        if member.state != UNREVOKED_PARTITIONS \
                and member.member_epoch != self._assignment_epoch:
            return ClassicSyncResult(ErrorCode.rebalance_in_progress)
        member.session_deadline_ms = now_ms + self._session_ms(member)
        return ClassicSyncResult(ErrorCode.none, member.assignment(), member.classic_protocols[0])

    def classic_heartbeat(self, member_id: str, instance_id: str | None, generation: int,
                          now_ms: int) -> ErrorCode:
        """A classic member's heartbeat: REBALANCE_IN_PROGRESS when it must
        rejoin to move on (a partition to give up, a new target, or a
        partition it waited for now free)."""
        try:
            member = self._classic_member(member_id, instance_id, generation)
        except GroupError as e:
            return e.code
        member.session_deadline_ms = now_ms + self._session_ms(member)
        self._maybe_assign(now_ms)
        if member.state == UNREVOKED_PARTITIONS or member.member_epoch != self._assignment_epoch:
            return ErrorCode.rebalance_in_progress
        if member.state == UNRELEASED_PARTITIONS and any(
                self._owner_of(tp) is None
                for tp in flat(self._target.get(member.member_id, ()))):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def classic_leave(self, member_id: str, instance_id: str | None) -> ErrorCode:
        try:
            member = self._classic_member(member_id, instance_id, None)
        except GroupError as e:
            return e.code
        self._remove(member.member_id)
        return ErrorCode.none

    def _classic_member_for_join(self, member_id: str, instance_id: str | None,
                                 unknown: bool) -> ConsumerMember:
        if instance_id is None:
            return self._members.get(member_id) or ConsumerMember(member_id)
        existing = self._by_instance(instance_id)
        if existing is None:
            return self._members.get(member_id) or ConsumerMember(member_id)
        if existing.member_id == member_id:
            return existing
        if unknown:  # a static member back after a restart takes its place
            existing.previous_member_epoch = existing.member_epoch
            return self._replace(existing, member_id)
        raise GroupError(ErrorCode.fenced_instance_id, "")

    def _classic_member(self, member_id: str, instance_id: str | None,
                        generation: int | None) -> ConsumerMember:
        if instance_id is not None:
            member = self._by_instance(instance_id)
            if member is not None and member.member_id != member_id:
                raise GroupError(ErrorCode.fenced_instance_id, "")
        else:
            member = self._members.get(member_id)
        if member is None or not member.is_classic:
            raise GroupError(ErrorCode.unknown_member_id, "")
        if generation is not None and generation != member.member_epoch:
            raise GroupError(ErrorCode.illegal_generation, "")
        return member

    def _supports(self, protocols: Sequence[tuple[str, bytes]]) -> bool:
        """Some protocol of the joining member is supported by every classic
        member already in the group."""
        names = {name for name, _ in protocols}
        for m in self._members.values():
            if m.is_classic:
                names &= set(m.classic_protocols)
        return bool(names)

    def _session_ms(self, member: ConsumerMember) -> int:
        if member.classic_session_timeout_ms is not None:
            return member.classic_session_timeout_ms
        return self.config.session_timeout_ms
