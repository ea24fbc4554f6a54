"""A share-group consumer (KIP-932) for ``kcompat consume --share-group``.

Theory of operation
-------------------
kafka-python has no share groups, so the CLI speaks the four APIs itself over
``_kio`` connections, as Kafka's ``ShareConsumerImpl`` does:

* **Membership** (ShareGroupHeartbeat v1 at the group coordinator): join with
  epoch 0, a client-chosen member id (a UUID, KIP-1082) and the subscribed
  topic; heartbeat with the member epoch the coordinator returned, at its
  heartbeat interval; leave with epoch -1. The answer carries the assignment
  (topic ids and partitions) whenever it changed. FENCED_MEMBER_EPOCH or
  UNKNOWN_MEMBER_ID: join again with epoch 0; a moved coordinator is found again.
* **Fetching** (ShareFetch v2 at each partition leader, ShareAcquireMode
  record_limit: the broker acquires no more than the run still wants, so
  ``--count`` leaves the rest untouched): one share session per leader. Epoch 0 opens it with the leader's assigned partitions; every later
  request carries the next epoch (1, 2, ... wrapping to 1), names the assigned
  partitions (a partition already in the session is simply kept) and forgets
  the ones no longer assigned. The answer holds whole log batches plus the
  acquired offset ranges with their delivery counts; only acquired records are
  handed out, and an acquired offset without a record (a control record, a
  batch hole) is acknowledged as GAP.
* **Acknowledging**: ACCEPT and REJECT (and GAP) ride on the leader's next
  ShareFetch, as Kafka's consumer piggybacks them. RELEASE is held back until
  ``close`` — released at once, the record would be acquirable again and come
  straight back to this very consumer — so a run hands released records back
  when it ends. ``close`` sends each leader's remaining acknowledgements in a
  ShareAcknowledge with epoch -1, which also closes the session (records still
  acquired and not acknowledged go back, their delivery counted, as Kafka
  does), then leaves the group.

An acknowledgement the broker refuses is reported on stderr; the record then
comes back when its acquisition lock expires, as in Kafka.
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.share_acknowledge.v1 import request as share_ack
from kio.schema.share_fetch.v2 import request as share_fetch
from kio.schema.share_group_heartbeat.v1 import request as heartbeat_req
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from kcompat.cli._common import CliError, stderr
from kcompat.cli._kio import Cluster, Connection, TopicInfo, error_name
from kcompat.wire.batch import parse_header, split_batches
from kcompat.wire.records import decode_batch

ACK_TYPES = {"accept": 1, "release": 2, "reject": 3}
GAP = 0
LEAVE_EPOCH = -1
FETCH_MAX_BYTES = 8 << 20
EPOCH_MAX = 2**31 - 1
COORDINATOR_MOVED = (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                     ErrorCode.coordinator_load_in_progress)
REJOIN = (ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id)
SESSION_LOST = (ErrorCode.invalid_share_session_epoch, ErrorCode.share_session_not_found)
LEADER_MOVED = (ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition,
                ErrorCode.fenced_leader_epoch)

Acks = dict[int, list[tuple[int, int]]]  # partition -> [(offset, acknowledge type)]


@dataclass(frozen=True, slots=True)
class Delivery:
    """One acquired record, as ``consume`` prints it."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    delivery_count: int


def ack_batches(acks: Iterable[tuple[int, int]]) -> tuple[Any, ...]:
    """``[(offset, type)]`` -> AcknowledgementBatch entities, one per run of
    consecutive offsets with the same type."""
    runs: list[list[int]] = []  # [first, last, type]
    for offset, kind in sorted(acks):
        if runs and runs[-1][1] + 1 == offset and runs[-1][2] == kind:
            runs[-1][1] = offset
        else:
            runs.append([offset, offset, kind])
    return tuple(share_fetch.AcknowledgementBatch(first_offset=i64(a), last_offset=i64(b),
                                                  acknowledge_types=(i8(k),))
                 for a, b, k in runs)


def deliveries(topic: str, partition: Any) -> tuple[list[Delivery], list[int]]:
    """A ShareFetch partition answer as (acquired records, acquired offsets without one)."""
    by_offset = {}
    for batch in split_batches(partition.records or b""):
        if parse_header(batch).is_control:
            continue
        for r in decode_batch(batch):
            by_offset[r.offset] = r
    out: list[Delivery] = []
    gaps: list[int] = []
    for acquired in partition.acquired_records:
        for offset in range(acquired.first_offset, acquired.last_offset + 1):
            found = by_offset.get(offset)
            if found is None:
                gaps.append(offset)
                continue
            out.append(Delivery(topic, partition.partition_index, offset, found.timestamp,
                                found.key, found.value, tuple(found.headers),
                                int(acquired.delivery_count)))
    return out, gaps


class ShareConsumer:
    def __init__(self, cluster: Cluster, group_id: str, topic: str, ack: str) -> None:
        self.cluster = cluster
        self.group_id = group_id
        self.topic = topic
        self.ack_type = ACK_TYPES[ack]
        self.member_id = str(uuid.uuid4())
        self.member_epoch = 0
        self.interval_s = 0.0
        self.heartbeat_due = 0.0
        self.assigned: set[int] = set()
        self.info = self._topic_info()
        self.coordinator: Connection = cluster.coordinator(group_id)
        self.epochs: dict[int, int] = {}  # leader -> next share session epoch
        self.in_session: dict[int, set[int]] = defaultdict(set)
        self.pending: dict[int, Acks] = defaultdict(lambda: defaultdict(list))
        self.held: dict[int, Acks] = defaultdict(lambda: defaultdict(list))

    def _topic_info(self) -> TopicInfo:
        info = self.cluster.topics([self.topic]).get(self.topic)
        if info is None:
            raise CliError(f"unknown topic {self.topic!r}")
        return info

    # -- membership -----------------------------------------------------------------
    def heartbeat(self, force: bool = False) -> None:
        """Heartbeat if due (or ``force``); applies a new assignment."""
        if not force and time.monotonic() < self.heartbeat_due:
            return
        request = heartbeat_req.ShareGroupHeartbeatRequest(
            group_id=GroupId(self.group_id), member_id=self.member_id, member_epoch=i32(self.member_epoch),
            rack_id=None, subscribed_topic_names=(TopicName(self.topic),) if self.member_epoch == 0 else None)
        answer = self.coordinator.call(request)
        code = answer.error_code
        self.heartbeat_due = time.monotonic() + (self.interval_s or 0.1)
        if code in COORDINATOR_MOVED:
            self.coordinator = self.cluster.coordinator(self.group_id)
            return
        if code in REJOIN:
            self.member_epoch, self.assigned = 0, set()
            self.heartbeat_due = 0.0
            return
        if code != ErrorCode.none:
            raise CliError(f"share group {self.group_id!r}: {error_name(code)}: "
                           f"{answer.error_message or ''}".rstrip(": "))
        self.member_epoch = int(answer.member_epoch)
        self.interval_s = answer.heartbeat_interval.total_seconds()
        self.heartbeat_due = time.monotonic() + self.interval_s
        if answer.assignment is not None:
            self.assigned = {p for tp in answer.assignment.topic_partitions
                             if tp.topic_id == self.info.topic_id for p in tp.partitions}

    def leave(self) -> None:
        if self.member_epoch == 0:
            return
        self.coordinator.call(heartbeat_req.ShareGroupHeartbeatRequest(
            group_id=GroupId(self.group_id), member_id=self.member_id, member_epoch=i32(LEAVE_EPOCH),
            rack_id=None, subscribed_topic_names=None))

    # -- fetching -------------------------------------------------------------------
    def fetch(self, max_records: int, wait_ms: int) -> list[Delivery]:
        """One ShareFetch to each leader of an assigned partition (acknowledgements
        ride along); the records acquired for this member."""
        by_leader: dict[int, set[int]] = defaultdict(set)
        for p in self.assigned:
            by_leader[self.info.leaders.get(p, -1)].add(p)
        if -1 in by_leader:
            self.info = self._topic_info()
            return []
        out: list[Delivery] = []
        for leader, parts in sorted(by_leader.items()):
            out += self._fetch_leader(leader, parts, max_records - len(out), wait_ms)
            if len(out) >= max_records:
                break
        return out

    def _fetch_leader(self, leader: int, parts: set[int], max_records: int,
                      wait_ms: int) -> list[Delivery]:
        epoch = self.epochs.get(leader, 0)
        acks = self.pending.pop(leader, {}) if epoch else {}
        forgotten = self.in_session[leader] - parts - set(acks)
        request = share_fetch.ShareFetchRequest(
            group_id=GroupId(self.group_id), member_id=self.member_id, share_session_epoch=i32(epoch),
            max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=wait_ms)), min_bytes=i32(1),
            max_bytes=i32(FETCH_MAX_BYTES), max_records=i32(max(max_records, 1)),
            batch_size=i32(max(max_records, 1)), share_acquire_mode=i8(1),
            topics=(share_fetch.FetchTopic(topic_id=self.info.topic_id, partitions=tuple(
                share_fetch.FetchPartition(partition_index=i32(p),
                                           acknowledgement_batches=ack_batches(acks.get(p, ())))
                for p in sorted(parts | set(acks)))),),
            forgotten_topics_data=(share_fetch.ForgottenTopic(
                topic_id=self.info.topic_id, partitions=tuple(i32(p) for p in sorted(forgotten))),)
            if forgotten else ())
        answer = self.cluster.node(leader).call(request, wait_ms / 1000 + self.cluster.timeout_s)
        if answer.error_code in SESSION_LOST:
            self.epochs.pop(leader, None)
            self.in_session.pop(leader, None)
            return []
        if answer.error_code != ErrorCode.none:
            raise CliError(f"ShareFetch from broker {leader}: {error_name(answer.error_code)}: "
                           f"{answer.error_message or ''}".rstrip(": "))
        self.epochs[leader] = epoch + 1 if epoch < EPOCH_MAX else 1
        self.in_session[leader] = set(parts)
        return self._received(leader, answer)

    def _received(self, leader: int, answer: Any) -> list[Delivery]:
        out: list[Delivery] = []
        for topic in answer.responses:
            for partition in topic.partitions:
                index = int(partition.partition_index)
                if partition.acknowledge_error_code:
                    stderr(f"kcompat: warning: acknowledgements of {self.topic}-{index} "
                           f"refused: {error_name(ErrorCode(partition.acknowledge_error_code))}")
                if partition.error_code in LEADER_MOVED:
                    self.info = self._topic_info()
                    continue
                if partition.error_code != ErrorCode.none:
                    raise CliError(f"ShareFetch {self.topic}-{index}: "
                                   f"{error_name(partition.error_code)}")
                got, gaps = deliveries(self.topic, partition)
                self.pending[leader][index].extend((g, GAP) for g in gaps)
                out += got
        return out

    # -- acknowledging and closing --------------------------------------------------
    def acknowledge(self, d: Delivery) -> None:
        leader = self.info.leaders.get(d.partition, -1)
        queue = self.held if self.ack_type == ACK_TYPES["release"] else self.pending
        queue[leader][d.partition].append((d.offset, self.ack_type))

    def close(self) -> None:
        """Each leader's remaining acknowledgements in a closing ShareAcknowledge
        (epoch -1), then leave the group."""
        for leader in sorted(self.epochs):
            acks: Acks = defaultdict(list)
            for queue in (self.pending, self.held):
                for p, rows in queue.pop(leader, {}).items():
                    acks[p] += rows
            request = share_ack.ShareAcknowledgeRequest(
                group_id=GroupId(self.group_id), member_id=self.member_id, share_session_epoch=i32(-1),
                topics=(share_ack.AcknowledgeTopic(topic_id=self.info.topic_id, partitions=tuple(
                    share_ack.AcknowledgePartition(
                        partition_index=i32(p), acknowledgement_batches=_ack_batches_v(rows))
                    for p, rows in sorted(acks.items()))),) if acks else ())
            answer = self.cluster.node(leader).call(request)
            self._check_close(leader, answer)
        self.epochs.clear()
        self.leave()

    def _check_close(self, leader: int, answer: Any) -> None:
        if answer.error_code != ErrorCode.none:
            stderr(f"kcompat: warning: closing the share session at broker {leader}: "
                   f"{error_name(answer.error_code)}")
        for topic in answer.responses:
            for partition in topic.partitions:
                if partition.error_code != ErrorCode.none:
                    stderr(f"kcompat: warning: acknowledgements of "
                           f"{self.topic}-{partition.partition_index} refused: "
                           f"{error_name(partition.error_code)}")


def _ack_batches_v(rows: list[tuple[int, int]]) -> tuple[Any, ...]:
    """``ack_batches`` as ShareAcknowledge's AcknowledgementBatch entities."""
    return tuple(share_ack.AcknowledgementBatch(first_offset=b.first_offset,
                                                last_offset=b.last_offset,
                                                acknowledge_types=b.acknowledge_types)
                 for b in ack_batches(rows))
