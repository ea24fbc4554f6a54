"""What a KIP-848 consumer group and a KIP-932 share group share, sans-IO.

Theory of operation
-------------------
Both protocols keep, for one group id, a set of members with member epochs,
a **group epoch** that goes up when the membership or the subscribed topics'
partitions change, and a **target assignment** with its own epoch.
``EpochGroup`` holds that state and what the host reads of it (the epochs,
whether the group exists, its member ids), feeds it the cluster's topics
(``update_metadata``: a change of what the members subscribe to bumps the
group epoch, a topic re-created under its name too: ``TopicCounts``) and expires members (``tick``). The subclasses
(``consumer_group.ConsumerGroup``, ``share_group.ShareGroup``) own every rule
that differs: who may join or heartbeat, what a bump does, when a member's
time is up. ``HeartbeatResult`` is the answer both heartbeats give,
``DescribedGroup`` what both describe APIs report.

Pure and deterministic: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from kcompat.group.assignors import TopicPartitions


class AssignedMember(Protocol):
    """What ``EpochGroup`` reads of a member: its assignment as (topic, ...)
    pairs, and what it remembers of the topic ids that assignment was sent with."""

    @property
    def assigned(self) -> Iterable[tuple[str, Any]]: ...
    sent_ids: tuple[str, ...] | None
    ids_seen: object


M = TypeVar("M", bound=AssignedMember)
D = TypeVar("D")


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    """The answer to a ConsumerGroupHeartbeat or a ShareGroupHeartbeat."""

    error: ErrorCode
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: TopicPartitions | None = None  # None: not sent
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class DescribedGroup(Generic[D]):
    """A group as ConsumerGroupDescribe or ShareGroupDescribe reports it
    (``D``: how a member is described)."""

    group_id: str
    group_state: str
    group_epoch: int
    assignment_epoch: int
    assignor_name: str
    members: tuple[D, ...]
    # the topic ids the group's assignments were made with, by name ({}:
    # unknown): a topic re-created since under its name is not theirs
    topic_ids: Mapping[str, object] = field(default_factory=dict)


class TopicCounts(dict[str, int]):
    """The cluster's topics' partition counts by name, with their topic ids:
    a topic deleted and re-created under its name has another id, which
    changes the group's subscribed metadata as Kafka's metadata hash does
    (KIP-1101: its members get the new id) even at the same partition count."""

    def __init__(self, counts: Mapping[str, int], ids: Mapping[str, object]) -> None:
        super().__init__(counts)
        self.ids = dict(ids)


class EpochGroup(Generic[M]):
    """Members of type ``M`` keyed by member id, the group and assignment
    epochs and the target assignment; see the module doc."""

    def __init__(self, group_id: str, partition_counts: Mapping[str, int] | None) -> None:
        self.group_id = group_id
        self._topics: dict[str, int] = dict(partition_counts or {})
        self._topic_ids: dict[str, object] = getattr(partition_counts, "ids", None) or {}
        self._topics_from: Mapping[str, int] | None = None  # see ``update_metadata``
        self._members: dict[str, M] = {}
        self._target: dict[str, TopicPartitions] = {}
        self._group_epoch = 0
        self._assignment_epoch = 0
        self._metadata_bumped = False  # ``update_metadata`` bumped it for this heartbeat

    # -- what the host reads -------------------------------------------------

    @property
    def group_epoch(self) -> int:
        return self._group_epoch

    @property
    def assignment_epoch(self) -> int:
        return self._assignment_epoch

    @property
    def exists(self) -> bool:
        """False until a first member joins (Kafka: GROUP_ID_NOT_FOUND)."""
        return self._group_epoch > 0 or bool(self._members)

    def member_ids(self) -> list[str]:
        return sorted(self._members)

    def next_deadline_ms(self) -> int | None:
        """When ``tick`` next has work (None: no member)."""
        raise NotImplementedError

    # -- transitions ---------------------------------------------------------

    def update_metadata(self, partition_counts: Mapping[str, int]) -> bool:
        """The cluster's topics changed; True if that bumped the group epoch.
        The very mapping given last time is taken as unchanged (the host hands
        out one per version of its metadata), so the usual call, from each
        heartbeat, costs nothing per topic."""
        self._metadata_bumped = False
        if partition_counts is self._topics_from:
            return False
        self._topics_from = partition_counts
        known = bool(self._topic_ids)  # a group restored from a snapshot learns them now
        before = self._subscriptions(), self._subscribed_ids(known)
        self._topics = dict(partition_counts)
        if isinstance(partition_counts, TopicCounts):
            self._topic_ids = partition_counts.ids
        self._topics_changed()
        if (self._subscriptions(), self._subscribed_ids(known)) == before:
            return False
        self._bump()
        self._metadata_bumped = True
        return True

    def _bump_once(self) -> bool:
        """A heartbeat changed what its member subscribes to: bump the group
        epoch, unless the metadata taken in for this heartbeat just did (Kafka
        bumps it once per heartbeat, for both); False when it had been."""
        bumped, self._metadata_bumped = self._metadata_bumped, False
        if not bumped:
            self._bump()
        return not bumped

    def _subscribed_ids(self, known: bool) -> dict[str, object]:
        """The ids of the subscribed topics (a re-created topic has a new
        one); nothing when the ids were not ``known`` before."""
        ids = self._topic_ids
        return {t: str(ids.get(t)) for t in self._subscribed_counts()} if known else {}

    def subscribed_ids(self) -> list[tuple[str, str]]:
        """The subscribed topics' ids, as snapshots keep them
        (``_restore_metadata``)."""
        ids = self._topic_ids
        return sorted((t, str(ids[t])) for t in self._subscribed_counts() if t in ids)

    def tick(self, now_ms: int) -> list[str]:
        """Remove the members whose time is up by ``now_ms`` (``_expired``);
        their ids."""
        expired = sorted(member_id for member_id, m in self._members.items()
                         if self._expired(m, now_ms))
        for member_id in expired:
            self._remove(member_id)
        return expired

    def _sends_assignment(self, member: M, send: bool) -> bool:
        """Whether ``member``'s assignment goes into this heartbeat's answer:
        ``send`` (the subclass's reasons, among them a changed assignment), or
        the ids of its assigned topics changed since it was last sent (Kafka
        keys assignments by topic id: a topic re-created under its name is a
        new assignment). The ids are looked at only when the cluster's topic
        ids are another mapping than at the member's last heartbeat, so an
        ordinary heartbeat costs nothing per partition."""
        if not send and member.ids_seen is self._topic_ids:
            return False
        member.ids_seen = self._topic_ids
        ids = self._assigned_ids(member)
        if send or ids != member.sent_ids:
            member.sent_ids = ids
            return True
        return False

    def _assigned_ids(self, member: M) -> tuple[str, ...]:
        """The ids of the topics of ``member``'s assignment."""
        ids = self._topic_ids
        return tuple(sorted({str(ids.get(t)) for t, _ in member.assigned}))

    def _restore_metadata(self, ids: Iterable[tuple[str, str]],
                          partition_counts: Mapping[str, int] | None) -> None:
        """After a restore: the subscribed topics' ids the snapshot kept,
        every member's assignment counted as sent with them, then the
        cluster's topics now (``update_metadata``): a topic re-created while
        no coordinator watched (a coordinator move, a restart) bumps the
        group epoch and its members get their assignment again. A snapshot
        of an older broker keeps no ids: they are learnt quietly."""
        self._topic_ids = dict(ids)
        known = bool(self._topic_ids)
        if known:
            self._restored_sent()
        if partition_counts is not None:
            self.update_metadata(partition_counts)
        if not known:
            self._restored_sent()
        self._metadata_bumped = False

    def _restored_sent(self) -> None:
        for m in self._members.values():
            m.ids_seen = self._topic_ids
            m.sent_ids = self._assigned_ids(m)

    # -- what the subclasses decide ----------------------------------------------

    def _topics_changed(self) -> None:
        """After ``_topics`` was replaced, before the subscriptions are compared."""

    def _subscriptions(self) -> object:
        """What ``update_metadata`` compares: a change bumps the group epoch."""
        return self._subscribed_counts()

    def _expired(self, member: M, now_ms: int) -> bool:
        raise NotImplementedError

    def _remove(self, member_id: str) -> None:
        raise NotImplementedError

    def _bump(self) -> None:
        raise NotImplementedError

    def _subscribed_counts(self) -> dict[str, int]:
        """``{topic: partition count}`` of the topics the members subscribe to."""
        raise NotImplementedError
