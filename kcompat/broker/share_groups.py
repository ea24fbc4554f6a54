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

Membership is kept in the coordinator's memory: when the coordinator moves
(a new leader of the offsets partition) members are unknown there and
rejoin (UNKNOWN_MEMBER_ID → epoch 0), which costs a reassignment, never a
record: share-partition state lives with the partitions' leaders
(``shares``). The group configs (``share.*``, ``kc.share.*``, KIP-1191's
``errors.deadletterqueue.*``) come from the metadata image and are handed to
the partition side through ``settings``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio
from kio.schema.errors import ErrorCode

from kcompat.broker.controller.internal_topics import OFFSETS_TOPIC, partition_for
from kcompat.broker.group_config import effective_group_config
from kcompat.broker.shares import ShareSettings
from kcompat.broker.state import now_ms
from kcompat.group.share_group import HeartbeatResult, ShareGroup, ShareGroupConfig
from kcompat.group.share_partition import ShareConfig

if TYPE_CHECKING:
    from kcompat.broker.groups import GroupService
    from kcompat.broker.replication.runtime import ClusterRuntime
    from kcompat.broker.shares import ShareService
    from kcompat.broker.state import BrokerState

log = logging.getLogger("kcompat.share_groups")

IDLE_WAKE_S = 1.0


class ShareGroupService:
    def __init__(self, state: BrokerState, cluster: ClusterRuntime, groups: GroupService,
                 shares: ShareService) -> None:
        self.state = state
        self.cluster = cluster
        self.classic = groups
        self.shares = shares
        self.groups: dict[str, ShareGroup] = {}
        self._terms: dict[str, int] = {}  # group -> offsets-partition term it was built in
        self._topics: dict[str, set[str]] = {}  # group -> every topic it subscribed to
        self._wake = trio.Event()
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
            dlq_copy_record=bool(cfg["errors.deadletterqueue.copy.record.enable"]))

    def _configs(self, group_id: str) -> dict[str, Any]:
        return effective_group_config(self.state, group_id)

    # -- the coordinator ----------------------------------------------------------------

    def coordinator_error(self, group_id: str) -> ErrorCode | None:
        return self.classic.coordinator_error(group_id)

    def _term(self, group_id: str) -> int:
        n = self.classic.num_partitions
        group = self.cluster.group_of(OFFSETS_TOPIC, partition_for(group_id, n))
        return -1 if group is None else group.raft.term

    def group(self, group_id: str) -> ShareGroup | None:
        """The live group, forgotten if this broker stopped coordinating it
        since (a stale copy would answer for members that moved on)."""
        term = self._term(group_id)
        if self._terms.get(group_id, term) != term:
            self.groups.pop(group_id, None)
        found = self.groups.get(group_id)
        if found is not None:
            self._terms[group_id] = term
        return found

    def is_classic(self, group_id: str) -> bool:
        return group_id in self.classic.coordinator.groups

    def partition_counts(self) -> dict[str, int]:
        return {name: meta.partitions for name, meta in self.state.topics.items()
                if not meta.internal}

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int,
                  subscribed: list[str] | None, rack_id: str | None, client_id: str,
                  client_host: str) -> HeartbeatResult:
        if self.is_classic(group_id):
            return HeartbeatResult(ErrorCode.inconsistent_group_protocol,
                                   error_message=f"Group {group_id} is not a share group.")
        group = self.group(group_id)
        if group is None:
            if member_epoch > 0:  # the coordinator moved: the member rejoins
                return HeartbeatResult(ErrorCode.unknown_member_id, error_message=(
                    f"Member {member_id} is not a member of group {group_id}."))
            cfg = self._configs(group_id)
            group = ShareGroup(group_id, ShareGroupConfig(
                session_timeout_ms=int(cfg["share.session.timeout.ms"]),
                heartbeat_interval_ms=int(cfg["share.heartbeat.interval.ms"]),
                max_size=int(self.state.config["group.share.max.size"])),
                self.partition_counts())
        else:
            group.update_metadata(self.partition_counts())
        result = group.heartbeat(member_id, member_epoch, now_ms(), subscribed, rack_id,
                                 client_id, client_host)
        if subscribed and result.error == ErrorCode.none:
            self._topics.setdefault(group_id, set()).update(subscribed)
        if group.exists and group_id not in self.groups:
            self.groups[group_id] = group
            self._terms[group_id] = self._term(group_id)
        self._wake.set()
        return result

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
            self.groups.pop(group_id, None)
            self._terms.pop(group_id, None)
            self._topics.pop(group_id, None)
        return code

    async def run(self) -> None:
        """Expire members whose session ran out."""
        while True:
            self._wake = trio.Event()
            now = now_ms()
            wait_s = IDLE_WAKE_S
            for group in list(self.groups.values()):
                for member_id in group.tick(now):
                    log.info("share group %s: member %s expired", group.group_id, member_id)
                deadline = group.next_deadline_ms()
                if deadline is not None:
                    wait_s = min(wait_s, max(deadline - now, 1) / 1000)
            with trio.move_on_after(wait_s):
                await self._wake.wait()
