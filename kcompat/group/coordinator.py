"""Group membership transitions, sans-IO.

Theory of operation
-------------------
Every request method takes the request's fields and ``now_ms`` and returns a
list of ``Reply(token, result)``: answers to deliver *now*, possibly to other
requests that were parked earlier. JoinGroup and SyncGroup may be parked: the
caller gives a ``token`` (any int it can map back to the waiting request) and
the reply for that token comes back later, from another call or from ``tick``.
``tick(now_ms)`` drives time: session expiry, the initial rebalance delay,
rebalance and sync timeouts. ``next_deadline_ms`` says when to tick next.

Kafka semantics kept here (classic protocol, Kafka 4.x GroupCoordinator):
KIP-394 member-id handshake (MEMBER_ID_REQUIRED for JoinGroup v4+), KIP-345
static membership (instance id -> member id; a new join with a known instance id
fences the old member with FENCED_INSTANCE_ID), KIP-134 initial rebalance delay,
generation checks (ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID /
REBALANCE_IN_PROGRESS). Cooperative rebalancing is client-driven and needs
nothing special: a member that revokes partitions simply joins again.

A member's assignment is the last one its group's leader handed out: kept
through a rebalance until the next generation's leader syncs, and reset when
a rebalance starts again before it did (as Kafka does; DescribeGroups shows
it). ``pop_group_changes`` lists the groups whose record must be written before
the replies go out, as Kafka writes them: at the leader's SyncGroup (the
generation with its assignments), when a static member is replaced, and when
a rebalance leaves the group Empty — never a generation still waiting for its
assignments. Offsets live in ``offsets.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.group.group import Group, GroupState, Member
from kcompat.group.offsets import StoredGroup

UNKNOWN_MEMBER = ""


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    initial_rebalance_delay_ms: int = 3000
    max_group_size: int = 2147483647


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()  # leader only
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class Reply:
    token: int
    result: Any


@dataclass(slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool  # JoinGroup v4+


@dataclass
class GroupCoordinator:
    config: CoordinatorConfig = field(default_factory=CoordinatorConfig)
    groups: dict[str, Group] = field(default_factory=dict)
    changed: set[str] = field(default_factory=set)
    _member_seq: int = 0

    # -- JoinGroup -----------------------------------------------------------
    def join_group(self, token: int, req: JoinRequest, now_ms: int, uid: str) -> list[Reply]:
        """``uid`` is a caller-supplied unique suffix for new member ids."""
        if not req.group_id:
            return [Reply(token, JoinResult(ErrorCode.invalid_group_id, member_id=req.member_id))]
        if not (self.config.min_session_timeout_ms <= req.session_timeout_ms
                <= self.config.max_session_timeout_ms):
            return [Reply(token, JoinResult(ErrorCode.invalid_session_timeout,
                                            member_id=req.member_id))]
        group = self.groups.get(req.group_id)
        if group is None:
            if req.member_id != UNKNOWN_MEMBER:
                return [Reply(token, JoinResult(ErrorCode.unknown_member_id,
                                                member_id=req.member_id))]
            group = self.groups[req.group_id] = Group(req.group_id, state_since_ms=now_ms)
        if group.is_(GroupState.DEAD):
            return [Reply(token, JoinResult(ErrorCode.coordinator_not_available,
                                            member_id=req.member_id))]
        if not group.supports(req.protocol_type, req.protocols):
            return [Reply(token, JoinResult(ErrorCode.inconsistent_group_protocol,
                                            member_id=req.member_id))]
        if req.member_id == UNKNOWN_MEMBER:
            return self._join_unknown(token, group, req, now_ms, uid)
        return self._join_known(token, group, req, now_ms)

    def _new_member_id(self, client_id: str, uid: str) -> str:
        return f"{client_id}-{uid}"

    def _join_unknown(self, token: int, group: Group, req: JoinRequest, now_ms: int,
                      uid: str) -> list[Reply]:
        member_id = self._new_member_id(req.client_id, uid)
        if req.group_instance_id is not None:
            old_id = group.static_members.get(req.group_instance_id)
            if old_id is not None and old_id in group.members:
                return self._replace_static(token, group, req, old_id, member_id, now_ms)
            return self._add_and_rebalance(token, group, req, member_id, now_ms)
        if req.require_known_member_id:
            group.pending_members[member_id] = now_ms + req.session_timeout_ms
            return [Reply(token, JoinResult(ErrorCode.member_id_required, member_id=member_id))]
        return self._add_and_rebalance(token, group, req, member_id, now_ms)

    def _replace_static(self, token: int, group: Group, req: JoinRequest, old_id: str,
                        member_id: str, now_ms: int) -> list[Reply]:
        """KIP-345: a known static member restarted. In a Stable group whose
        protocol choice it does not change it simply takes over its old
        assignment under a new member id — no rebalance; otherwise rebalance."""
        replies = self._fence_static(group, old_id, member_id)
        member = group.members[member_id]
        member.protocols = list(req.protocols)
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.last_heartbeat_ms = now_ms
        if group.is_(GroupState.STABLE) and group.select_protocol() == group.protocol_name:
            self.changed.add(group.group_id)
            result = self._join_result(group, member)
            is_leader = member_id == group.leader_id
            return replies + [Reply(token, replace(result, skip_assignment=is_leader))]
        member.join_token = token
        return replies + self._prepare_rebalance(group, now_ms) + self._try_complete_join(
            group, now_ms)

    def _fence_static(self, group: Group, old_id: str, new_id: str) -> list[Reply]:
        """Replace a static member's id; its parked requests get FENCED_INSTANCE_ID."""
        member = group.members.pop(old_id)
        replies = []
        if member.join_token is not None:
            replies.append(Reply(member.join_token,
                                 JoinResult(ErrorCode.fenced_instance_id, member_id=old_id)))
        if member.sync_token is not None:
            replies.append(Reply(member.sync_token, SyncResult(ErrorCode.fenced_instance_id)))
        member.member_id = new_id
        member.join_token = member.sync_token = None
        group.members[new_id] = member
        assert member.group_instance_id is not None
        group.static_members[member.group_instance_id] = new_id
        if group.leader_id == old_id:
            group.leader_id = new_id
        return replies

    def _add_and_rebalance(self, token: int, group: Group, req: JoinRequest, member_id: str,
                           now_ms: int) -> list[Reply]:
        if len(group.members) >= self.config.max_group_size:
            return [Reply(token, JoinResult(ErrorCode.group_max_size_reached,
                                            member_id=member_id))]
        member = Member(
            member_id, req.group_instance_id, req.client_id, req.client_host,
            req.session_timeout_ms, req.rebalance_timeout_ms, req.protocol_type,
            list(req.protocols), last_heartbeat_ms=now_ms, join_token=token,
        )
        if not group.members:
            group.protocol_type = req.protocol_type
        group.members[member_id] = member
        group.pending_members.pop(member_id, None)
        if req.group_instance_id is not None:
            group.static_members[req.group_instance_id] = member_id
        if group.leader_id is None:
            group.leader_id = member_id
        replies = self._prepare_rebalance(group, now_ms)
        if group.initial_delay_deadline_ms:
            # KIP-134: each new member of a new group extends the wait, up to the
            # rebalance timeout
            group.initial_delay_deadline_ms = min(
                now_ms + self.config.initial_rebalance_delay_ms, group.rebalance_deadline_ms)
        return replies + self._try_complete_join(group, now_ms)

    def _join_known(self, token: int, group: Group, req: JoinRequest, now_ms: int) -> list[Reply]:
        mid = req.member_id
        if group.is_static_fenced(mid, req.group_instance_id):
            return [Reply(token, JoinResult(ErrorCode.fenced_instance_id, member_id=mid))]
        if mid in group.pending_members:
            return self._add_and_rebalance(token, group, req, mid, now_ms)
        member = group.members.get(mid)
        if member is None:
            return [Reply(token, JoinResult(ErrorCode.unknown_member_id, member_id=mid))]
        replies: list[Reply] = []
        if member.join_token is not None:  # a retried join replaces the parked one
            replies.append(Reply(member.join_token,
                                 JoinResult(ErrorCode.rebalance_in_progress, member_id=mid)))
        member.last_heartbeat_ms = now_ms
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        changed = not member.same_protocols(req.protocols)
        member.protocols = list(req.protocols)
        if group.is_(GroupState.PREPARING_REBALANCE):
            member.join_token = token
            return replies + self._try_complete_join(group, now_ms)
        if group.is_(GroupState.COMPLETING_REBALANCE, GroupState.STABLE) and not changed and (
                group.is_(GroupState.COMPLETING_REBALANCE) or mid != group.leader_id):
            # the member missed its JoinGroup answer, or re-joined without change
            return replies + [Reply(token, self._join_result(group, member))]
        member.join_token = token
        return replies + self._prepare_rebalance(group, now_ms) + self._try_complete_join(
            group, now_ms)

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        is_leader = member.member_id == group.leader_id
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if is_leader and group.protocol_name is not None:
            members = tuple((m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
                            for m in group.members.values())
        return JoinResult(ErrorCode.none, group.generation_id, group.protocol_type,
                          group.protocol_name, group.leader_id or "", member.member_id, members)

    def _prepare_rebalance(self, group: Group, now_ms: int) -> list[Reply]:
        """Move to PreparingRebalance; parked syncs learn a rebalance started."""
        if group.is_(GroupState.PREPARING_REBALANCE):
            return []
        replies = []
        # a generation whose assignments never came leaves none (Kafka resets them)
        aborted = group.is_(GroupState.COMPLETING_REBALANCE)
        for m in group.members.values():
            if aborted:
                m.assignment = b""
            if m.sync_token is not None:
                replies.append(Reply(m.sync_token, SyncResult(ErrorCode.rebalance_in_progress)))
                m.sync_token = None
        was_empty = group.is_(GroupState.EMPTY)
        group.transition(GroupState.PREPARING_REBALANCE, now_ms)
        group.rebalance_deadline_ms = now_ms + group.rebalance_timeout_ms()
        group.initial_delay_deadline_ms = 0
        if was_empty and self.config.initial_rebalance_delay_ms > 0:
            group.initial_delay_deadline_ms = min(
                now_ms + self.config.initial_rebalance_delay_ms, group.rebalance_deadline_ms)
        return replies

    def _try_complete_join(self, group: Group, now_ms: int) -> list[Reply]:
        if not group.is_(GroupState.PREPARING_REBALANCE):
            return []
        if group.initial_delay_deadline_ms and now_ms < group.initial_delay_deadline_ms:
            return []
        if group.members and not group.all_joined() and now_ms < group.rebalance_deadline_ms:
            return []
        replies: list[Reply] = []
        for mid in [m.member_id for m in group.members.values() if not m.awaiting_join]:
            replies += self._remove_member(group, mid)  # did not rejoin in time
        group.generation_id += 1
        group.initial_delay_deadline_ms = 0
        if not group.members:
            group.protocol_name = None  # the protocol type stays, as in Kafka
            group.leader_id = None
            group.transition(GroupState.EMPTY, now_ms)
            self.changed.add(group.group_id)
            return replies
        # Not written yet, as in Kafka: the generation is written with its
        # assignments, at the leader's SyncGroup. A record of it without them
        # would come back, on the next coordinator, as a Stable group with
        # nothing assigned that no rebalance ever leaves.
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.transition(GroupState.COMPLETING_REBALANCE, now_ms)
        group.sync_deadline_ms = now_ms + group.rebalance_timeout_ms()
        for member in group.members.values():
            assert member.join_token is not None
            replies.append(Reply(member.join_token, self._join_result(group, member)))
            member.join_token = None
            member.synced = False  # its assignment stays the last one until the sync
            member.last_heartbeat_ms = now_ms
        return replies

    def _remove_member(self, group: Group, member_id: str) -> list[Reply]:
        member = group.members.pop(member_id, None)
        if member is None:
            return []
        replies = []
        if member.join_token is not None:
            replies.append(Reply(member.join_token,
                                 JoinResult(ErrorCode.unknown_member_id, member_id=member_id)))
        if member.sync_token is not None:
            replies.append(Reply(member.sync_token, SyncResult(ErrorCode.unknown_member_id)))
        if member.group_instance_id is not None:
            group.static_members.pop(member.group_instance_id, None)
        if group.leader_id == member_id:
            group.leader_id = next(iter(group.members), None)
        return replies

    # -- SyncGroup -----------------------------------------------------------
    def sync_group(self, token: int, group_id: str, generation_id: int, member_id: str,
                   instance_id: str | None, protocol_type: str | None,
                   protocol_name: str | None, assignments: dict[str, bytes],
                   now_ms: int) -> list[Reply]:
        group = self.groups.get(group_id)
        error = self._check_member(group, member_id, instance_id, generation_id)
        if error is None and group is not None and (
                (protocol_type is not None and protocol_type != group.protocol_type)
                or (protocol_name is not None and protocol_name != group.protocol_name)):
            error = ErrorCode.inconsistent_group_protocol
        if error is not None or group is None:
            return [Reply(token, SyncResult(error or ErrorCode.unknown_member_id))]
        member = group.members[member_id]
        member.last_heartbeat_ms = now_ms
        if group.is_(GroupState.PREPARING_REBALANCE):
            return [Reply(token, SyncResult(ErrorCode.rebalance_in_progress))]
        if group.is_(GroupState.STABLE):
            return [Reply(token, self._sync_result(group, member))]
        # CompletingRebalance
        if member.sync_token is not None:
            old = member.sync_token
            member.sync_token = token
            replies = [Reply(old, SyncResult(ErrorCode.rebalance_in_progress))]
        else:
            member.sync_token = token
            replies = []
        member.synced = True
        if member_id != group.leader_id:
            return replies
        for m in group.members.values():
            m.assignment = assignments.get(m.member_id, b"")
        group.transition(GroupState.STABLE, now_ms)
        self.changed.add(group.group_id)
        for m in group.members.values():
            if m.sync_token is not None:
                replies.append(Reply(m.sync_token, self._sync_result(group, m)))
                m.sync_token = None
        return replies

    def _sync_result(self, group: Group, member: Member) -> SyncResult:
        return SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name,
                          member.assignment)

    def _check_member(self, group: Group | None, member_id: str, instance_id: str | None,
                      generation_id: int) -> ErrorCode | None:
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.unknown_member_id
        if group.is_static_fenced(member_id, instance_id):
            return ErrorCode.fenced_instance_id
        if member_id not in group.members:
            return ErrorCode.unknown_member_id
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        return None

    # -- Heartbeat / LeaveGroup ----------------------------------------------
    def heartbeat(self, group_id: str, generation_id: int, member_id: str,
                  instance_id: str | None, now_ms: int) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is not None and group.is_(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        error = self._check_member(group, member_id, instance_id, generation_id)
        if error is not None or group is None:
            return error or ErrorCode.unknown_member_id
        group.members[member_id].last_heartbeat_ms = now_ms
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave_group(self, group_id: str, members: list[tuple[str, str | None]],
                    now_ms: int) -> tuple[ErrorCode, list[ErrorCode], list[Reply]]:
        """Members are (member_id, instance_id); returns top error, per-member errors."""
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):  # Kafka: each member unknown
            return ErrorCode.none, [ErrorCode.unknown_member_id] * len(members), []
        errors: list[ErrorCode] = []
        replies: list[Reply] = []
        left = False
        for member_id, instance_id in members:
            target = member_id
            if instance_id is not None:
                known = group.static_members.get(instance_id)
                if known is None:
                    errors.append(ErrorCode.unknown_member_id)
                    continue
                if member_id != UNKNOWN_MEMBER and known != member_id:
                    errors.append(ErrorCode.fenced_instance_id)
                    continue
                target = known
            if target in group.pending_members:
                del group.pending_members[target]
                errors.append(ErrorCode.none)
                continue
            if target not in group.members:
                errors.append(ErrorCode.unknown_member_id)
                continue
            replies += self._remove_member(group, target)
            errors.append(ErrorCode.none)
            left = True
        if left:
            replies += self._membership_changed(group, now_ms)
        return ErrorCode.none, errors, replies

    def _membership_changed(self, group: Group, now_ms: int) -> list[Reply]:
        if group.is_(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            return self._prepare_rebalance(group, now_ms) + self._try_complete_join(group, now_ms)
        if group.is_(GroupState.PREPARING_REBALANCE):
            return self._try_complete_join(group, now_ms)
        return []

    # -- time ----------------------------------------------------------------
    def tick(self, now_ms: int) -> list[Reply]:
        replies: list[Reply] = []
        for group in list(self.groups.values()):
            for mid, deadline in list(group.pending_members.items()):
                if now_ms >= deadline:
                    del group.pending_members[mid]
            expired = [m.member_id for m in group.members.values()
                       if not m.awaiting_join
                       and now_ms >= m.last_heartbeat_ms + m.session_timeout_ms]
            if group.is_(GroupState.COMPLETING_REBALANCE) and now_ms >= group.sync_deadline_ms:
                expired += [m.member_id for m in group.members.values()
                            if not m.synced and m.member_id not in expired]
            if expired:
                for mid in expired:
                    replies += self._remove_member(group, mid)
                replies += self._membership_changed(group, now_ms)
            replies += self._try_complete_join(group, now_ms)
        return replies

    def next_deadline_ms(self) -> int | None:
        deadlines: list[int] = []
        for group in self.groups.values():
            deadlines += group.pending_members.values()
            deadlines += [m.last_heartbeat_ms + m.session_timeout_ms
                          for m in group.members.values() if not m.awaiting_join]
            if group.is_(GroupState.PREPARING_REBALANCE):
                deadlines.append(max(group.initial_delay_deadline_ms,
                                     min(group.rebalance_deadline_ms,
                                         group.initial_delay_deadline_ms or
                                         group.rebalance_deadline_ms)))
                deadlines.append(group.rebalance_deadline_ms)
            if group.is_(GroupState.COMPLETING_REBALANCE):
                deadlines.append(group.sync_deadline_ms)
        return min(deadlines) if deadlines else None

    # -- admin ---------------------------------------------------------------
    def delete_group(self, group_id: str, now_ms: int, keep_dead: bool = False) -> ErrorCode:
        """Delete an empty group. ``keep_dead``: it stays, Dead, until
        ``forget_dead`` — joins and commits meanwhile answer
        COORDINATOR_NOT_AVAILABLE (retriable), so that no new incarnation
        starts before the deletion's tombstones are in the log."""
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.group_id_not_found
        if group.members:
            return ErrorCode.non_empty_group
        group.transition(GroupState.DEAD, now_ms)
        if not keep_dead:
            del self.groups[group_id]
        self.changed.add(group_id)
        return ErrorCode.none

    def forget_dead(self, group_id: str) -> None:
        """A group ``delete_group`` kept Dead is gone (its tombstones written)."""
        group = self.groups.get(group_id)
        if group is not None and group.is_(GroupState.DEAD):
            del self.groups[group_id]

    def restore(self, group_id: str, stored: StoredGroup, now_ms: int) -> None:
        """Rebuild a group from its replayed metadata record (after a restart the
        members keep their ids and generation; their sessions start now)."""
        group = Group(group_id, generation_id=stored.generation_id,
                      protocol_type=stored.protocol_type or None,
                      protocol_name=stored.protocol_name, leader_id=stored.leader_id,
                      state_since_ms=stored.state_since_ms)
        for member in stored.members:
            member.last_heartbeat_ms = now_ms
            member.synced = True
            group.members[member.member_id] = member
            if member.group_instance_id is not None:
                group.static_members[member.group_instance_id] = member.member_id
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        self.groups[group_id] = group

    def take_over(self, stored: dict[str, StoredGroup], with_offsets: Iterable[str],
                  now_ms: int) -> None:
        """This broker starts coordinating these groups (it now leads their
        offsets partition, whose records it has applied all along): each is
        rebuilt from its stored metadata, or made Empty if it has offsets only."""
        for group_id, group in stored.items():
            self.restore(group_id, group, now_ms)
        for group_id in with_offsets:
            self.ensure_group(group_id, now_ms)

    def unload(self, group_ids: Iterable[str]) -> list[Reply]:
        """This broker stops coordinating these groups (their offsets partition
        moved): they are forgotten, and JoinGroup / SyncGroup requests parked
        on them are answered NOT_COORDINATOR so the clients re-discover."""
        replies: list[Reply] = []
        for group_id in group_ids:
            group = self.groups.pop(group_id, None)
            if group is None:
                continue
            for member in group.members.values():
                if member.join_token is not None:
                    replies.append(Reply(member.join_token,
                                         JoinResult(ErrorCode.not_coordinator,
                                                    member_id=member.member_id)))
                if member.sync_token is not None:
                    replies.append(Reply(member.sync_token,
                                         SyncResult(ErrorCode.not_coordinator)))
            self.changed.discard(group_id)
        return replies

    def ensure_group(self, group_id: str, now_ms: int) -> Group:
        """The group for a standalone offset commit (created Empty if new)."""
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id, state_since_ms=now_ms)
        return group

    def commit_error(self, group_id: str, generation_id: int, member_id: str,
                     instance_id: str | None, transactional: bool = False
                     ) -> ErrorCode | None:
        """Kafka's checks before an OffsetCommit is accepted (None = accept), in
        Kafka 4's order: the member and its generation first, so a member of
        an old generation gets ILLEGAL_GENERATION even while the group
        rebalances; REBALANCE_IN_PROGRESS only for a current member that
        commits before its SyncGroup, and never for a TxnOffsetCommit
        (``transactional``: a producer's commit is fenced by its generation
        alone)."""
        group = self.groups.get(group_id)
        if group is None:
            return None if generation_id < 0 else ErrorCode.illegal_generation
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and group.is_(GroupState.EMPTY):
            return None  # the admin client or a consumer without group management
        if generation_id >= 0 or member_id or instance_id is not None:
            if instance_id is not None:
                known = group.static_members.get(instance_id)
                if known is None:
                    return ErrorCode.unknown_member_id
                if known != member_id:
                    return ErrorCode.fenced_instance_id
            if member_id not in group.members:
                return ErrorCode.unknown_member_id
            if generation_id != group.generation_id:
                return ErrorCode.illegal_generation
        elif not group.is_(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        if group.is_(GroupState.COMPLETING_REBALANCE) and not transactional:
            return ErrorCode.rebalance_in_progress
        return None

    def write_failed(self, group_id: str, now_ms: int) -> list[Reply]:
        """The record of ``group_id`` was not written (its answers are refused
        by the caller): a group with members rebalances, so that no member
        goes on with a generation or an assignment the log does not hold
        (Kafka's ``resetAndPropagateAssignmentWithError``)."""
        group = self.groups.get(group_id)
        if group is None or not group.is_(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            return []
        return self._prepare_rebalance(group, now_ms) + self._try_complete_join(group, now_ms)

    def pop_group_changes(self) -> set[str]:
        changed, self.changed = self.changed, set()
        return changed
