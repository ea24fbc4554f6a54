"""Share groups at their group coordinator: membership and assignment (KIP-932).

Theory of operation
-------------------
A share group is coordinated like a consumer group: by the leader of its
``__consumer_offsets`` partition (``GroupService.coordinator_error``). This
service keeps one ``ShareGroup`` (``group.share_group``, pure) per group id,
answers ShareGroupHeartbeat and ShareGroupDescribe from it, feeds it the
topics' partition counts at every heartbeat (a new partition or topic bumps
the group epoch and reassigns) and expires members whose session ran out
(``run``). A group id is a classic group or a share group, never both:
the other kind's requests are INCONSISTENT_GROUP_PROTOCOL, as in Kafka.

Membership is durable as a consumer group's (``hosted_groups``, the base
shared with ``consumer_groups``): every change is one snapshot record in the
group's ``__consumer_offsets`` partition, with every topic the group ever
subscribed to (whose share state DeleteGroups deletes), committed before it
is answered; the broker that takes the partition over restores the group
from it, members keeping their epochs. Share-partition state (record locks,
delivery counts) lives with the partitions' leaders (``shares``). The group
configs (``share.*``, ``kc.share.*``, KIP-1191's ``errors.deadletterqueue.*``)
come from the metadata image and are handed to the partition side through
``settings``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kcompat.broker.config.group_config import effective_group_config
from kcompat.broker.groups.hosted_groups import HostedGroups
from kcompat.broker.groups.shares import ShareError, ShareSettings
from kcompat.broker.storage.state import now_ms
from kcompat.group.epoch_group import HeartbeatResult
from kcompat.group.offsets import share_group_key
from kcompat.group.share_group import (
    ShareGroup,
    ShareGroupConfig,
    snapshot_from_json,
    snapshot_to_json,
)
from kcompat.group.share_partition import ShareConfig

if TYPE_CHECKING:
    from kcompat.broker.groups.groups import GroupService
    from kcompat.broker.groups.shares import ShareService
    from kcompat.broker.replication.runtime import ClusterRuntime
    from kcompat.broker.storage.state import BrokerState

log = logging.getLogger("kcompat.share_groups")



class ShareGroupService(HostedGroups[ShareGroup]):
    log = log
    kind = "share group"
    expiry = "expired"
    expires = False

    def __init__(self, state: BrokerState, cluster: ClusterRuntime, groups: GroupService,
                 shares: ShareService) -> None:
        super().__init__(state, cluster, groups)
        self.shares = shares
        self._topics: dict[str, set[str]] = {}  # group -> every topic it subscribed to
        shares.settings_of = self.settings

    # -- configs ------------------------------------------------------------------------

    def settings(self, group_id: str) -> ShareSettings:
        cfg = self._configs(group_id)
        return ShareSettings(
            config=ShareConfig(
                record_lock_duration_ms=int(cfg["share.record.lock.duration.ms"]),
                delivery_count_limit=int(cfg["share.delivery.count.limit"]),
                max_record_locks=int(cfg["share.partition.max.record.locks"]),
                ordering_message_group=cfg["kc.share.ordering"] == "message-group",
                redelivery_backoff_ms=int(cfg["kc.share.redelivery.backoff.ms"]),
                redelivery_backoff_multiplier=float(
                    cfg["kc.share.redelivery.backoff.multiplier"]),
                redelivery_backoff_max_ms=int(cfg["kc.share.redelivery.backoff.max.ms"])),
            auto_offset_reset=str(cfg["share.auto.offset.reset"]),
            read_committed=cfg["share.isolation.level"] == "read_committed",
            dlq_topic=str(cfg["errors.deadletterqueue.topic.name"] or ""),
            dlq_copy_record=bool(cfg["errors.deadletterqueue.copy.record.enable"]),
            renew_enabled=bool(cfg["share.renew.acknowledge.enable"]))

    def _configs(self, group_id: str) -> dict[str, Any]:
        return effective_group_config(self.state, group_id)

    # -- the coordinator (``hosted_groups``) ----------------------------------------------

    def _stored(self) -> Mapping[str, bytes]:
        return self.classic.store.share_groups

    def _restore(self, group_id: str, raw: bytes) -> ShareGroup:
        snapshot, seen = snapshot_from_json(raw)
        found = ShareGroup.restore(snapshot, now_ms(), self._group_config(group_id),
                                   self.partition_counts())
        self._topics[group_id] = seen
        return found

    def _record_key(self, group_id: str) -> bytes:
        return share_group_key(group_id)

    def _snapshot(self, group: ShareGroup) -> bytes:
        return snapshot_to_json(group.snapshot(), self._topics.get(group.group_id, ()))

    def _ticking(self) -> Iterator[ShareGroup]:
        """The live groups (a share group's members rejoin a new coordinator)."""
        return iter(list(self.groups.values()))

    def _forget(self, group_id: str) -> None:
        super()._forget(group_id)
        self._topics.pop(group_id, None)

    def _group_config(self, group_id: str) -> ShareGroupConfig:
        cfg = self._configs(group_id)
        return ShareGroupConfig(
            session_timeout_ms=int(cfg["share.session.timeout.ms"]),
            heartbeat_interval_ms=int(cfg["share.heartbeat.interval.ms"]),
            max_size=int(self.state.config["group.share.max.size"]))

    def is_classic(self, group_id: str) -> bool:
        """A classic group (members or committed offsets) or a KIP-848 consumer
        group has this id: it is not a share group's."""
        return (group_id in self.classic.coordinator.groups
                or group_id in self.classic.store.offsets
                or group_id in self.classic.store.consumer_groups)

    async def heartbeat(self, group_id: str, member_id: str, member_epoch: int,
                        subscribed: list[str] | None, rack_id: str | None, client_id: str,
                        client_host: str) -> HeartbeatResult:
        if self.is_classic(group_id):
            return HeartbeatResult(ErrorCode.group_id_not_found,
                                   error_message=f"Group {group_id} is not a share group.")
        group = self.group(group_id)
        before = None
        if group is None:
            group = ShareGroup(group_id, self._group_config(group_id), self.partition_counts())
        else:
            before = group.snapshot()
        result = group.heartbeat(member_id, member_epoch, now_ms(), subscribed, rack_id,
                                 client_id, client_host, self.partition_counts())
        seen = self._topics.setdefault(group_id, set())
        grown = bool(subscribed) and result.error == ErrorCode.none and not seen.issuperset(
            subscribed or ())
        seen.update(subscribed or () if result.error == ErrorCode.none else ())
        return await self._settle(group, result, grown or group.snapshot() != before)

    async def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups of a share group: only when empty; its share-partition
        state goes too."""
        group = self.group(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        if group.member_ids():
            return ErrorCode.non_empty_group
        keys = [(group_id, topic, index) for topic in sorted(self._topics.get(group_id, ()))
                if (meta := self.state.topics.get(topic)) is not None
                for index in range(meta.partitions)]
        code = await self.shares.delete_state(keys)
        if code == ErrorCode.none:
            code = await self._delete(group_id)
        return code

    # -- share-group offsets (DescribeShareGroupOffsets, Alter..., Delete...) ------------

    def offsets_error(self, group_id: str, altering: bool, create: bool = False
                      ) -> tuple[ErrorCode, str | None]:
        """The group-level error of the offsets APIs, as Kafka 4.4: the
        coordinator gate; a classic group's id is GROUP_ID_NOT_FOUND; a
        missing group describes as having no offsets, is created empty by
        AlterShareGroupOffsets (``create``) and is GROUP_ID_NOT_FOUND for
        DeleteShareGroupOffsets; a change to a group with members is
        NON_EMPTY_GROUP."""
        if (gate := self.coordinator_error(group_id)) is not None:
            return gate, None
        if self.is_classic(group_id):
            return ErrorCode.group_id_not_found, f"Group {group_id} is not a share group."
        group = self.group(group_id)
        if group is None and create:
            group = ShareGroup(group_id, self._group_config(group_id), self.partition_counts())
            self._adopt(group)
        if group is None:
            if altering:
                return ErrorCode.group_id_not_found, f"Group {group_id} not found."
            return ErrorCode.none, None
        if altering and group.member_ids():
            return ErrorCode.non_empty_group, "The group has active members."
        return ErrorCode.none, None

    def topics_seen(self, group_id: str) -> list[str]:
        return sorted(t for t in self._topics.get(group_id, ()) if t in self.state.topics)

    async def describe_offset(self, group_id: str, topic: str, index: int
                              ) -> tuple[int, int, int, ErrorCode, str | None]:
        """(start offset, lag, leader epoch, error, message) of one
        share-partition: start and lag -1 when it has no state yet (or no
        record was ever acknowledged, as Kafka reports it); lag -1 where this
        broker holds no replica of the partition or the start is past its end."""
        meta = self.state.topics.get(topic)
        if meta is None:  # Kafka 4.4: no offsets, no error (a deleted topic too)
            return -1, -1, 0, ErrorCode.none, None
        if not 0 <= index < meta.partitions:
            return -1, -1, -1, ErrorCode.unknown_topic_or_partition, None
        epoch = self.cluster.partition_view(topic, index)[1]
        try:
            found = await self.shares.read_state((group_id, topic, index))
        except ShareError as e:
            return -1, -1, epoch, ErrorCode.coordinator_load_in_progress, e.message
        if found is None:
            return -1, -1, epoch, ErrorCode.none, None
        return (found.start_offset, self.shares.lag(found, topic, index), epoch,
                ErrorCode.none, None)

    async def alter_offset(self, group_id: str, topic: str, index: int, start: int
                           ) -> tuple[ErrorCode, str | None]:
        meta = self.state.topics.get(topic)
        if meta is None or not 0 <= index < meta.partitions:
            return ErrorCode.unknown_topic_or_partition, None
        try:
            if start < 0:  # Kafka: no start offset (the partition starts afresh)
                return await self.shares.delete_state([(group_id, topic, index)]), None
            await self.shares.reset_state((group_id, topic, index), start)
        except ShareError as e:
            return ErrorCode.coordinator_load_in_progress, e.message
        return ErrorCode.none, None

    async def note_topics(self, group_id: str, topics: Iterable[str]) -> ErrorCode:
        """Topics whose share state the group now has (so DeleteGroups finds them)."""
        seen, new = self._topics.setdefault(group_id, set()), set(topics)
        if seen.issuperset(new):
            return ErrorCode.none
        seen.update(new)
        group = self.group(group_id)
        return ErrorCode.none if group is None else await self.persist(group)

    async def delete_offsets(self, group_id: str, topic: str) -> tuple[ErrorCode, str | None]:
        meta = self.state.topics.get(topic)
        if meta is None:
            return ErrorCode.unknown_topic_or_partition, None
        code = await self.shares.delete_state([(group_id, topic, i)
                                               for i in range(meta.partitions)])
        if code == ErrorCode.none and topic in self._topics.get(group_id, ()):
            self._topics[group_id].discard(topic)
            group = self.group(group_id)
            if group is not None:
                code = await self.persist(group)
        return code, None
