"""Hosting KIP-848 consumer groups and KIP-932 share groups at their coordinator.

Theory of operation
-------------------
Both kinds are coordinated by the Raft leader of their ``__consumer_offsets``
partition (``GroupService.coordinator_error``) and kept the same way; this
base class is that common part, ``consumer_groups.ConsumerGroupService`` and
``share_groups.ShareGroupService`` add their protocol.

* One live machine (``group.epoch_group.EpochGroup``) per group id in
  ``groups``, remembered with the Raft term of the offsets partition it was
  built in. ``group`` drops a copy from an earlier term and rebuilds it from
  the latest committed snapshot (``_stored``, ``_restore``): a copy kept
  from before another broker coordinated the group would answer for members
  that moved on since.
* Every change is written to the group's offsets partition as one snapshot
  record (``_record_key``, ``_snapshot``) and committed before it is answered
  (``persist``, ``_settle``); a write that fails drops the live copy, so the
  next request restores the last durable state.
* ``run`` expires the members whose time is up in the groups this broker
  coordinates (``_ticking``) and persists what that changed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import trio
from kio.schema.errors import ErrorCode

from kcompat.broker.controller.internal_topics import OFFSETS_TOPIC, partition_for
from kcompat.broker.groups.groups import NotCoordinatorError, write_committed
from kcompat.broker.storage.state import now_ms
from kcompat.group.epoch_group import EpochGroup, HeartbeatResult, TopicCounts
from kcompat.wire.records import encode_batch

if TYPE_CHECKING:
    from kcompat.broker.groups.groups import GroupService
    from kcompat.broker.replication.runtime import ClusterRuntime
    from kcompat.broker.storage.metadata import MetadataImage
    from kcompat.broker.storage.state import BrokerState

IDLE_WAKE_S = 1.0
G = TypeVar("G", bound="EpochGroup[Any]")


class HostedGroups(Generic[G]):
    log: ClassVar[logging.Logger]
    kind: ClassVar[str]  # "consumer group", "share group": for log lines
    expiry: ClassVar[str]  # why ``run`` removed a member: for log lines
    # deleted when empty and without offsets, by the classic sweep (Kafka's
    # ``shouldExpire``: a consumer group is, a share group never)
    expires: ClassVar[bool]

    def __init__(self, state: BrokerState, cluster: ClusterRuntime,
                 groups: GroupService) -> None:
        self.state = state
        self.cluster = cluster
        self.classic = groups
        self.groups: dict[str, G] = {}
        self._terms: dict[str, int] = {}  # group -> offsets-partition term it was built in
        self._wake = trio.Event()
        self._counts: tuple[MetadataImage, int, dict[str, int]] | None = None
        groups.hosted.append(self)

    # -- what a kind decides --------------------------------------------------------------

    def _stored(self) -> Mapping[str, bytes]:
        """The committed snapshots of this kind, by group id."""
        raise NotImplementedError

    def _restore(self, group_id: str, raw: bytes) -> G:
        """The live group from its stored snapshot; ValueError if unreadable."""
        raise NotImplementedError

    def _record_key(self, group_id: str) -> bytes:
        raise NotImplementedError

    def _snapshot(self, group: G) -> bytes:
        raise NotImplementedError

    def _ticking(self) -> Iterator[G]:
        """The groups ``run`` expires members of."""
        raise NotImplementedError

    async def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups of a group of this kind (``GroupService.delete_group``)."""
        raise NotImplementedError

    def stored_ids(self) -> list[str]:
        """The ids of the groups of this kind with a committed snapshot."""
        return list(self._stored())

    def has_members(self, group_id: str) -> bool:
        group = self.group(group_id)
        return group is not None and bool(group.member_ids())

    # -- the coordinator ----------------------------------------------------------------

    def coordinator_error(self, group_id: str) -> ErrorCode | None:
        return self.classic.coordinator_error(group_id)

    def _term(self, group_id: str) -> int:
        n = self.classic.num_partitions
        group = self.cluster.group_of(OFFSETS_TOPIC, partition_for(group_id, n))
        return -1 if group is None else group.raft.term

    def group(self, group_id: str) -> G | None:
        """The live group, rebuilt from its stored snapshot when this broker
        (again) coordinates it: a copy kept from an earlier term would answer
        for members that moved on."""
        term = self._term(group_id)
        if self._terms.get(group_id, term) != term:
            self.groups.pop(group_id, None)
        found = self.groups.get(group_id)
        if found is None and (raw := self._stored().get(group_id)):
            try:
                found = self._restore(group_id, raw)
            except ValueError as e:
                self.log.warning("%s %s: stored snapshot unreadable (%s)", self.kind,
                                 group_id, e)
                return None
            self.groups[group_id] = found
            self.log.info("%s %s: %d members restored at epoch %d", self.kind, group_id,
                          len(found.member_ids()), found.group_epoch)
        if found is not None:
            self._terms[group_id] = term
        return found

    def _adopt(self, group: G) -> None:
        """A new group is live here, in the current term."""
        self.groups[group.group_id] = group
        self._terms[group.group_id] = self._term(group.group_id)

    async def _delete(self, group_id: str) -> ErrorCode:
        """Remove the group: its snapshot's tombstone, committed, then no live
        copy (kept when the write fails)."""
        code = await self._write(group_id, None)
        if code == ErrorCode.none:
            self._forget(group_id)
        return code

    def _forget(self, group_id: str) -> None:
        """The group is deleted (its snapshot record removed)."""
        self.groups.pop(group_id, None)
        self._terms.pop(group_id, None)

    def partition_counts(self) -> dict[str, int]:
        """The cluster's topics and their partition counts, internal ones left
        out: one dict per version of the metadata's topics (``topics_version``),
        shared by every caller until they change — do not modify it. A group
        given the same dict again skips its look at the topics
        (``EpochGroup.update_metadata``), so a heartbeat costs nothing per topic."""
        image = self.state.metadata.image
        cached = self._counts
        if cached is None or cached[0] is not image or cached[1] != image.topics_version:
            kept = [(name, meta) for name, meta in image.topics.items() if not meta.internal]
            counts = TopicCounts({name: meta.partitions for name, meta in kept},
                                 {name: meta.topic_id for name, meta in kept})
            cached = self._counts = (image, image.topics_version, counts)
        return cached[2]

    # -- durability -------------------------------------------------------------------------

    async def _settle(self, group: G, result: HeartbeatResult, changed: bool
                      ) -> HeartbeatResult:
        """After a heartbeat: a group that exists now is live here; a change is
        committed before ``result`` is answered (else the member gets the
        write's error and retries elsewhere)."""
        if group.exists and group.group_id not in self.groups:
            self._adopt(group)
        self._wake.set()
        if group.exists and changed:
            code = await self.persist(group)
            if code != ErrorCode.none:  # not durable: the member retries elsewhere
                self.groups.pop(group.group_id, None)
                return HeartbeatResult(code)
        return result

    async def persist(self, group: G) -> ErrorCode:
        """Write the group's snapshot to its ``__consumer_offsets`` partition
        and wait for the commit (before the change is answered)."""
        return await self._write(group.group_id, self._snapshot(group))

    async def _write(self, group_id: str, value: bytes | None) -> ErrorCode:
        """The group's snapshot record (None: its tombstone), committed."""
        now = now_ms()
        try:
            part = self.classic._offsets_partition(group_id)  # noqa: SLF001
            batch = encode_batch([(self._record_key(group_id), value, (), now)])
            await write_committed(self.cluster, part, memoryview(batch), now)
        except NotCoordinatorError as e:
            return e.code
        return ErrorCode.none

    # -- time -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Expire the members whose time is up (see ``_ticking``)."""
        while True:
            self._wake = trio.Event()
            now = now_ms()
            wait_s = IDLE_WAKE_S
            for group in self._ticking():
                expired = group.tick(now)
                for member_id in expired:
                    self.log.info("%s %s: member %s %s", self.kind, group.group_id,
                                  member_id, self.expiry)
                if expired:
                    self.cluster.spawn(self.persist, group)
                deadline = group.next_deadline_ms()
                if deadline is not None:
                    wait_s = min(wait_s, max(deadline - now, 1) / 1000)
            with trio.move_on_after(wait_s):
                await self._wake.wait()
