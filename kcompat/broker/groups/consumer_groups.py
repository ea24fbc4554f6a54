"""KIP-848 consumer groups at their group coordinator.

Theory of operation
-------------------
A consumer group (``group.protocol=consumer``) is coordinated like a classic
one: by the Raft leader of its ``__consumer_offsets`` partition
(``GroupService.coordinator_error``). This service keeps one ``ConsumerGroup``
(``group.consumer_group``, pure) per group id, answers ConsumerGroupHeartbeat
and ConsumerGroupDescribe from it, feeds it the topics at every heartbeat (a
new topic can match a regex subscription, a new partition changes the
assignment) and expires members whose session or revocation ran out (``run``).

Durability, shared with share groups (``hosted_groups``): every change of a
group (a member's epoch or assignment, the group epoch, the target) is
written to the group's ``__consumer_offsets`` partition as one snapshot
record (``offsets.consumer_group_key``) and committed before it is answered.
Every replica applies those records to its ``OffsetStore``, so the broker that
takes over the partition after a crash rebuilds the group from the latest
snapshot (``group``): members keep their ids, epochs and assignments, and
their sessions restart. Offsets stay in the same store as classic groups'.

Classic and consumer groups share the group id namespace (Kafka 4.4): a
heartbeat that joins an id held by an *empty* classic group (or offsets only)
turns it into a consumer group, its offsets kept; one held by a live classic
group of consumers converts it online (``_upgrade``: its members stay, as
classic members); any other classic group or a share group is
GROUP_ID_NOT_FOUND. The classic APIs reach a consumer group here
(``classic_join`` / ``_sync`` / ``_heartbeat`` / ``_leave``): a classic consumer
joins it as a classic member (mixed groups); a JoinGroup to an *empty*
consumer group deletes it first (``drop_if_empty``) and a classic group starts.
Not done: Kafka's downgrade of a consumer group whose last consumer-protocol
member left back into a classic group (it stays a consumer group here).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from kio.schema.errors import ErrorCode

from kcompat.broker.config.group_config import effective_group_config
from kcompat.broker.groups.groups import NotCoordinatorError
from kcompat.broker.groups.hosted_groups import HostedGroups
from kcompat.broker.storage.state import now_ms
from kcompat.group.consumer_classic import (
    CONSUMER_PROTOCOL_TYPE,
    ClassicJoin,
    ClassicJoinResult,
    ClassicMemberState,
    ClassicSyncResult,
)
from kcompat.group.consumer_group import ConsumerGroup
from kcompat.group.consumer_messages import ConsumerGroupConfig, Heartbeat, HeartbeatResult
from kcompat.group.group import Group, GroupState
from kcompat.group.offsets import consumer_group_key, group_key
from kcompat.security.acl import Authorizer, Operation, ResourceType

if TYPE_CHECKING:
    pass

log = logging.getLogger("kcompat.consumer_groups")

_R = TypeVar("_R")


class ConsumerGroupService(HostedGroups[ConsumerGroup]):
    log = log
    kind = "consumer group"
    expiry = "removed (session or rebalance timeout)"
    expires = True
    #: the broker's (``authorizer.class.name``); None: a regex resolves to every match
    authorizer: Authorizer | None = None

    def _hosted(self, group: ConsumerGroup) -> ConsumerGroup:
        """A group this service answers for: its regex subscriptions resolve to
        the topics each member's principal may describe."""
        group.topic_filter = None if self.authorizer is None else self._describable
        return group

    def _describable(self, principal: str, client_host: str,
                     topics: tuple[str, ...]) -> list[str]:
        authorizer, host = self.authorizer, client_host.removeprefix("/")
        assert authorizer is not None  # the filter is set only with one (``_hosted``)
        return [t for t in topics
                if authorizer.authorize(principal, host, Operation.DESCRIBE, ResourceType.TOPIC, t)]

    # -- configs ------------------------------------------------------------------------

    @property
    def assignors(self) -> tuple[str, ...]:
        return tuple(self.state.config["group.consumer.assignors"])

    def _group_config(self, group_id: str) -> ConsumerGroupConfig:
        cfg: dict[str, Any] = effective_group_config(self.state, group_id)
        return ConsumerGroupConfig(
            session_timeout_ms=int(cfg["consumer.session.timeout.ms"]),
            heartbeat_interval_ms=int(cfg["consumer.heartbeat.interval.ms"]),
            max_size=int(self.state.config["group.consumer.max.size"]),
            assignors=self.assignors,
            assignment_interval_ms=int(cfg["consumer.assignment.interval.ms"]),
            regex_refresh_interval_ms=int(
                self.state.config["group.consumer.regex.refresh.interval.ms"]))

    # -- the coordinator (``hosted_groups``) ----------------------------------------------

    def _stored(self) -> Mapping[str, bytes]:
        return self.classic.store.consumer_groups

    def _restore(self, group_id: str, raw: bytes) -> ConsumerGroup:
        found = self._hosted(ConsumerGroup.restore(raw, now_ms(), self._group_config(group_id),
                                                   self.partition_counts()))
        self._wake.set()  # its members' sessions run from now
        return found

    def _record_key(self, group_id: str) -> bytes:
        return consumer_group_key(group_id)

    def _snapshot(self, group: ConsumerGroup) -> bytes:
        return group.snapshot_json()

    def _ticking(self) -> Iterator[ConsumerGroup]:
        """Every group this broker coordinates (those taken over are restored
        here too, so a group whose members all died with the old coordinator
        still empties)."""
        for group_id in list(self.classic.store.consumer_groups):
            if self.coordinator_error(group_id) is not None:
                continue  # another broker coordinates it now
            group = self.group(group_id)
            if group is not None:
                yield group

    def classic_group_state(self, group_id: str) -> GroupState | None:
        group = self.classic.coordinator.groups.get(group_id)
        return None if group is None else group.state

    # -- ConsumerGroupHeartbeat -----------------------------------------------------------

    async def heartbeat(self, group_id: str, hb: Heartbeat) -> HeartbeatResult:
        group = self.group(group_id)
        if group is None:
            refused, converted = await self._claim_id(group_id, hb)
            if refused is not None:
                return refused
            group = self._hosted(converted or ConsumerGroup(
                group_id, self._group_config(group_id), self.partition_counts()))
            before = None
        else:
            before = group.snapshot_json()
        result = group.heartbeat(hb, now_ms(), self.partition_counts())
        return await self._settle(group, result, group.snapshot_json() != before)

    async def _claim_id(self, group_id: str, hb: Heartbeat
                        ) -> tuple[HeartbeatResult | None, ConsumerGroup | None]:
        """(refusal, None) when no consumer group may take ``group_id``; else
        (None, the live classic group converted, or None to start afresh)."""
        if self.classic.store.share_groups.get(group_id) is not None:
            return HeartbeatResult(ErrorCode.group_id_not_found, error_message=(
                f"Group {group_id} is not a consumer group.")), None
        classic = self.classic.coordinator.groups.get(group_id)
        if classic is None or hb.member_epoch != 0:
            return None, None
        if classic.state == GroupState.DEAD:  # being deleted: its tombstones not written yet
            return HeartbeatResult(ErrorCode.coordinator_not_available), None
        if classic.state != GroupState.EMPTY:
            return await self._upgrade(group_id, classic)
        # an empty classic group (or offsets only) gives its id up, offsets kept
        self.classic.coordinator.delete_group(group_id, now_ms())
        code = await self._drop_classic_record(group_id)
        return (None if code == ErrorCode.none else HeartbeatResult(code)), None

    async def _upgrade(self, group_id: str, classic: Group
                       ) -> tuple[HeartbeatResult | None, ConsumerGroup | None]:
        """Kafka's online upgrade: a live classic group of consumers becomes a
        consumer group whose members stay classic members (they learn it at
        their next heartbeat: REBALANCE_IN_PROGRESS, then JoinGroup)."""
        why = None
        if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
            why = "the group does not use the consumer embedded protocol"
        elif len(classic.members) > int(self.state.config["group.consumer.max.size"]):
            why = "the group size exceeds the consumer group maximum size"
        converted = None if why else ConsumerGroup.from_classic(
            group_id, self._group_config(group_id), self.partition_counts(),
            classic.generation_id, [ClassicMemberState(
                m.member_id, m.group_instance_id, m.client_id, m.client_host,
                m.session_timeout_ms, m.rebalance_timeout_ms,
                tuple(name for name, _ in m.protocols),
                m.metadata_for(classic.protocol_name or ""), m.assignment)
                for m in classic.members.values()], now_ms())
        if converted is None:
            why = why or "the group does not use the consumer embedded protocol"
            return HeartbeatResult(ErrorCode.group_id_not_found, error_message=(
                f"Cannot upgrade classic group {group_id} to consumer group because {why}.")), None
        log.info("classic group %s (generation %d, %d members) converted to a consumer group",
                 group_id, classic.generation_id, len(classic.members))
        await self.classic.deliver(self.classic.coordinator.unload([group_id]))
        code = await self._drop_classic_record(group_id)
        return (None if code == ErrorCode.none else HeartbeatResult(code)), converted

    async def _drop_classic_record(self, group_id: str) -> ErrorCode:
        if group_id not in self.classic.store.groups:
            return ErrorCode.none
        try:
            await self.classic._append(group_id, [(group_key(group_id), None)])  # noqa: SLF001
        except NotCoordinatorError as e:
            return e.code
        return ErrorCode.none

    # -- classic members of a consumer group (JoinGroup / SyncGroup / Heartbeat / LeaveGroup)

    async def classic_join(self, group_id: str, join: ClassicJoin) -> ClassicJoinResult | None:
        """A JoinGroup to a consumer group with members (None: not one, the
        classic coordinator serves it)."""
        group = self.group(group_id)
        if group is None or not group.member_ids():
            return None
        group.update_metadata(self.partition_counts())
        return await self._changing(group, lambda: group.classic_join(join, now_ms()))

    async def classic_sync(self, group_id: str, member_id: str, instance_id: str | None,
                           generation: int, protocol_type: str | None,
                           protocol_name: str | None) -> ClassicSyncResult | None:
        group = self.group(group_id)
        if group is None:
            return None
        return group.classic_sync(member_id, instance_id, generation, protocol_type,
                                  protocol_name, now_ms())

    async def classic_heartbeat(self, group_id: str, member_id: str, instance_id: str | None,
                                generation: int) -> ErrorCode | None:
        group = self.group(group_id)
        if group is None:
            return None
        group.update_metadata(self.partition_counts())
        return await self._changing(group, lambda: group.classic_heartbeat(
            member_id, instance_id, generation, now_ms()))

    async def classic_leave(self, group_id: str, members: list[tuple[str, str | None]]
                            ) -> list[ErrorCode] | None:
        group = self.group(group_id)
        if group is None:
            return None
        return await self._changing(group, lambda: [group.classic_leave(m, i)
                                                    for m, i in members])

    async def _changing(self, group: ConsumerGroup, call: Callable[[], _R]) -> _R:
        """``call()`` on ``group``, persisted before it is answered if it
        changed the group (a write that fails drops the copy in memory: the
        next request restores the last durable state)."""
        before = group.snapshot_json()
        result = call()
        self._wake.set()
        if group.snapshot_json() != before and await self.persist(group) != ErrorCode.none:
            self.groups.pop(group.group_id, None)
        return result

    # -- the classic APIs on a consumer group ---------------------------------------------

    def commit_errors(self, group: ConsumerGroup, member_id: str, member_epoch: int,
                      version: int, partitions: Iterable[tuple[str, int]],
                      transactional: bool = False
                      ) -> tuple[ErrorCode | None, dict[tuple[str, int], ErrorCode]]:
        """OffsetCommit / TxnOffsetCommit to a consumer group, checked as Kafka
        4.4's ``ConsumerGroup.validateOffsetCommit``: without an epoch only while
        it has no members; else a known member (UNKNOWN_MEMBER_ID) committing
        with v9+ (UNSUPPORTED_VERSION; a classic member or a transaction: any
        version), at its epoch or, for partitions it has owned since, an older
        one (KIP-1251; ``ConsumerGroup.commit_errors``). (request error,
        partition errors)."""
        if member_epoch < 0 and not group.member_ids():
            return None, {}
        member = group.member(member_id)
        if member is None:
            return ErrorCode.unknown_member_id, {}
        if version < 9 and not member.is_classic and not transactional:
            return ErrorCode.unsupported_version, {}
        return group.commit_errors(member_id, member_epoch, partitions, transactional)

    def fetch_error(self, group: ConsumerGroup, member_id: str | None,
                    member_epoch: int) -> ErrorCode | None:
        """OffsetFetch v9+: a request naming no member (admin clients) is
        served; a member must be known and at its current epoch."""
        if not member_id and member_epoch < 0:
            return None
        found = group.offsets_error(member_id, member_epoch)
        return None if found is None else found[0]

    async def drop_if_empty(self, group_id: str) -> ErrorCode | None:
        """Before a JoinGroup: an empty consumer group gives its id up (Kafka
        converts it to a classic group); one with members refuses the join."""
        group = self.group(group_id)
        if group is None:
            return None
        if group.member_ids():
            return ErrorCode.inconsistent_group_protocol
        code = await self._delete(group_id)
        return None if code == ErrorCode.none else code

    async def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups of a consumer group: only when empty (its offsets are
        deleted by the caller with the classic records)."""
        group = self.group(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        if group.member_ids():
            return ErrorCode.non_empty_group
        return await self._delete(group_id)
