"""The fuzzer's KIP-848 consumer-group members: two per group, as the new
consumer protocol drives them.

ConsumerGroupHeartbeat (v1) joins (member epoch 0, the subscribed topic
names, the rebalance timeout), heartbeats at the member's epoch reporting the
partitions it owns (the fuzzer's member revokes and takes up at once, as a
consumer with nothing to finish does), leaves (epoch -1), and misbehaves: an
epoch past its own (fenced), the epoch before it, an id the group does not
know. OffsetCommit v9 carries the member epoch (its own or the one before:
STALE_MEMBER_EPOCH), and ConsumerGroupDescribe (v1) reads the group.

The group's own configs make a heartbeat compute the target assignment at
once (``GROUP_CONFIGS``, set alike on both brokers), so what a heartbeat
answers does not depend on how long ago the last computation was.

Member ids are the client's (KIP-1082): the machine chooses one UUID per
member and sends the same on both brokers, so members compare by id.
Assignments name topics by id, each broker's own: they are read as topic
names (Metadata). Epochs are each broker's counters, kept per peer
(``Peer.state``): what is compared is how a member's epoch moved (advanced,
kept, reset) and whether it stands at the group's epoch, never the numbers.
An answer's assignment is compared as a set of partitions per member;
``settle`` heartbeats every member in the group until a round changes no
epoch and no assignment (bounded), as consumers converge, before the
settled assignment is compared.
"""

from __future__ import annotations

import datetime
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.admin.configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kafka.protocol.consumer.group import OffsetCommitRequest, OffsetCommitResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kio.schema.consumer_group_describe.v1 import request as describe_v1
from kio.schema.consumer_group_heartbeat.v1 import request as heartbeat_v1
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i32Timedelta

from compat_tests.fuzz import _ops as ops
from compat_tests.fuzz._wire import CLOSED, Peer

Observation = Any
REBALANCE_MS = 300_000  # longer than a sequence (a broker's timing, not compared)
UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH = 25, 110
COORDINATOR_MOVED = {14, 15, 16}
SETTLE_ROUNDS = 20  # heartbeat rounds a settle may take (each member once a round)
#: a settle's quiet round is checked by one more after this pause: a topic just
#: created reaches Kafka's group coordinator a moment after its Metadata shows it
#: (a settle once ended before it on Kafka, and not on kcompat)
SETTLE_QUIET_S = 0.2
GROUP_RESOURCE = 32
#: the group's own settings, alike on both brokers: a heartbeat computes the
#: target assignment at once, in line (Kafka 4.4 waits
#: consumer.assignment.interval.ms, 1 s, between computations and makes them on
#: another thread: when a heartbeat sees the new target would be timing)
GROUP_CONFIGS = {"consumer.assignment.interval.ms": "0",
                 "consumer.assignor.offload.enable": "false"}
#: how a heartbeat misbehaves
FENCED, PREVIOUS, UNKNOWN = "epoch past its own", "the epoch before", "an unknown id"


@dataclass
class ConsumerMember:
    member_id: str
    epoch: int = 0  # 0: not in the group, joins next
    subscribed: tuple[str, ...] = ()
    #: the partitions it owns, by topic id (the broker's)
    owned: dict[uuid.UUID, tuple[int, ...]] = field(default_factory=dict)


def set_group_configs(peer: Peer, group: str, configs: dict[str, str] | None = None) -> None:
    """``configs`` (default ``GROUP_CONFIGS``) on ``group`` (IncrementalAlterConfigs, GROUP)."""
    answer = peer.call(IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, 1, {
        "resources": [{"resource_type": GROUP_RESOURCE, "resource_name": group, "configs": [
            {"name": k, "config_operation": 0, "value": v}
            for k, v in (configs or GROUP_CONFIGS).items()]}], "validate_only": False})
    assert answer != CLOSED and isinstance(answer, dict), f"{peer.name}: {answer}"
    error = answer["responses"][0]["error_code"]
    assert error == 0, f"{peer.name}: group configs of {group}: {answer['responses'][0]}"


def _member(peer: Peer, group: str, who: int, member_id: str) -> ConsumerMember:
    key = f"consumer:{group}:{who}"
    member = peer.state.get(key)
    if member is None:
        member = peer.state[key] = ConsumerMember(member_id)
    assert isinstance(member, ConsumerMember)
    return member


def _code(error: Any) -> int:
    return int(getattr(error, "value", error))


def _to_coordinator(peer: Peer, group: str, request: Any, error_of: Any) -> Any:
    """``request`` (kio) to ``group``'s coordinator, again while it moves."""
    for _ in range(ops.ROUTE_ATTEMPTS):
        answer = peer.call_kio(request, ops.coordinator(peer, group))
        if len(peer.addresses) == 1 or answer == CLOSED or \
                _code(error_of(answer)) not in COORDINATOR_MOVED:
            return answer
        time.sleep(0.1)
    return answer


def topic_names(peer: Peer, topics: list[str]) -> dict[uuid.UUID, str]:
    """``topics``' ids on ``peer`` (the ones it knows), to their names."""
    answer = peer.call(MetadataRequest, MetadataResponse, 12, {
        "topics": [{"topic_id": None, "name": t} for t in topics],
        "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    if answer == CLOSED:
        return {}
    assert isinstance(answer, dict)
    return {uuid.UUID(str(t["topic_id"])): t["name"] for t in answer["topics"]
            if not t["error_code"]}


def _named(peer: Peer, topics: list[str], owned: dict[uuid.UUID, tuple[int, ...]]
           ) -> tuple[tuple[str, int], ...]:
    names = topic_names(peer, topics)
    return tuple(sorted((names.get(tid, "?unknown topic id"), p)
                        for tid, parts in owned.items() for p in parts))


def _heartbeat(peer: Peer, group: str, member: ConsumerMember, epoch: int,
               member_id: str | None = None, subscribing: bool = False) -> Any:
    joining = epoch == 0
    request = heartbeat_v1.ConsumerGroupHeartbeatRequest(
        group_id=GroupId(group), member_id=member_id or member.member_id,
        member_epoch=i32(epoch),
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(
            milliseconds=REBALANCE_MS if joining else -1)),
        subscribed_topic_names=tuple(TopicName(t) for t in member.subscribed)
        if joining or subscribing else None,
        topic_partitions=tuple(
            heartbeat_v1.TopicPartitions(topic_id=tid, partitions=tuple(map(i32, parts)))
            for tid, parts in sorted(member.owned.items())) if epoch >= 0 else None)
    return _to_coordinator(peer, group, request, lambda a: a.error_code)


def _moved(before: int, after: int) -> str:
    return "advanced" if after > before else "kept" if after == before else "went back"


def _answered(peer: Peer, topics: list[str], member: ConsumerMember, answer: Any) -> Observation:
    """A heartbeat's answer as a consumer acts on it; the member updated."""
    if answer == CLOSED:
        return CLOSED
    error = _code(answer.error_code)
    if error:
        if error in (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH):  # a consumer joins afresh
            member.epoch, member.owned = 0, {}
        return ("error", error)
    moved = _moved(member.epoch, int(answer.member_epoch))
    member.epoch = int(answer.member_epoch)
    given: Any = "no new assignment"
    if answer.assignment is not None:
        member.owned = {tp.topic_id: tuple(sorted(map(int, tp.partitions)))
                        for tp in answer.assignment.topic_partitions if tp.partitions}
        given = _named(peer, topics, member.owned)
    return ("ok", moved, given)


def consumer_join(peer: Peer, group: str, member_id: str, who: int, subscribed: list[str],
                  topics: list[str]) -> Observation:
    """ConsumerGroupHeartbeat at epoch 0 subscribing to ``subscribed``
    (``topics``: every topic of the sequence, to name assigned ids)."""
    member = _member(peer, group, who, member_id)
    member.subscribed, member.owned = tuple(subscribed), {}
    before, member.epoch = member.epoch, 0
    seen = _answered(peer, topics, member, _heartbeat(peer, group, member, 0))
    if seen[0] == "error" and before:
        member.epoch = before  # a refused rejoin leaves the member as it stood
    return seen


def consumer_heartbeat(peer: Peer, group: str, member_id: str, who: int,
                       topics: list[str]) -> Observation:
    """A heartbeat at the member's epoch (a join when it is not in the group)."""
    member = _member(peer, group, who, member_id)
    return _answered(peer, topics, member, _heartbeat(peer, group, member, member.epoch))


def consumer_resubscribe(peer: Peer, group: str, member_id: str, who: int,
                         subscribed: list[str], topics: list[str]) -> Observation:
    """A heartbeat at the member's epoch naming a new subscription (a join
    when it is not in the group)."""
    member = _member(peer, group, who, member_id)
    member.subscribed = tuple(subscribed)
    return _answered(peer, topics, member, _heartbeat(peer, group, member, member.epoch,
                                                      subscribing=True))


def consumer_misbehave(peer: Peer, group: str, member_id: str, who: int, how: str,
                       topics: list[str]) -> Observation:
    """A heartbeat with an epoch past the member's, the one before it, or an
    id the group does not know (the member's state is what the answer makes it)."""
    member = _member(peer, group, who, member_id)
    if how == UNKNOWN:
        answer = _heartbeat(peer, group, member, max(member.epoch, 1),
                            str(uuid.uuid5(uuid.NAMESPACE_OID, member.member_id)))
        return ("error", _code(answer.error_code)) if answer != CLOSED and \
            _code(answer.error_code) else ("ok",) if answer != CLOSED else CLOSED
    epoch = member.epoch + 1 if how == FENCED else member.epoch - 1
    if epoch <= 0:  # not in the group (or at its first epoch): an epoch it never had
        epoch = member.epoch + 1
    return _answered(peer, topics, member, _heartbeat(peer, group, member, epoch))


def consumer_leave(peer: Peer, group: str, member_id: str, who: int) -> Observation:
    """A heartbeat at epoch -1: the error and the epoch answered."""
    member = _member(peer, group, who, member_id)
    answer = _heartbeat(peer, group, member, -1)
    if answer == CLOSED:
        return CLOSED
    member.epoch, member.owned = 0, {}
    return (_code(answer.error_code), int(answer.member_epoch))


def consumer_commit(peer: Peer, group: str, member_id: str, who: int, stale: bool,
                    topic: str, partition: int, offset: int) -> Observation:
    """OffsetCommit v9 with the member's epoch: its error; or with the epoch
    before (``stale``): its error and whether the member holds the partition
    as its heartbeats' answers told it (KIP-1251 accepts such a commit for
    the partitions it has held since: which is the assignor's placement)."""
    member = _member(peer, group, who, member_id)
    answer = ops.to_coordinator(peer, group, OffsetCommitRequest, OffsetCommitResponse, 9, {
        "group_id": group, "generation_id_or_member_epoch": member.epoch - int(stale),
        "member_id": member.member_id, "group_instance_id": None, "topics": [
            {"name": topic, "partitions": [
                {"partition_index": partition, "committed_offset": offset,
                 "committed_leader_epoch": -1, "committed_metadata": ""}]}]},
        lambda a: a["topics"][0]["partitions"][0]["error_code"])
    if answer == CLOSED:
        return CLOSED
    code = answer["topics"][0]["partitions"][0]["error_code"]
    if not stale:
        return code
    names = topic_names(peer, [topic])
    return code, any(names.get(tid) == topic and partition in parts
                     for tid, parts in member.owned.items())


def consumer_settle(peer: Peer, group: str, member_ids: list[str],
                    topics: list[str]) -> Observation:
    """Every member in the group heartbeats, round after round, until two
    rounds in a row, the second after ``SETTLE_QUIET_S``, change no epoch and
    no assignment (at most ``SETTLE_ROUNDS``): then each member's partitions
    (by member), and whether it settled."""
    members = [_member(peer, group, who, mid) for who, mid in enumerate(member_ids)]
    settled = quiet = False
    for _ in range(SETTLE_ROUNDS):
        if quiet:
            time.sleep(SETTLE_QUIET_S)
        changed = False
        for member in members:
            if member.epoch <= 0:
                continue
            before = (member.epoch, dict(member.owned))
            if _answered(peer, topics, member, _heartbeat(peer, group, member,
                                                           member.epoch)) == CLOSED:
                return CLOSED
            changed |= before != (member.epoch, member.owned)
        if not changed and quiet:
            settled = True
            break
        quiet = not changed
    return ("settled" if settled else "still moving", tuple(
        _named(peer, topics, m.owned) if m.epoch > 0 else "not in the group" for m in members))


def consumer_describe(peer: Peer, group: str, member_ids: list[str]) -> Observation:
    """ConsumerGroupDescribe (v1): the group's error, state, assignor, whether
    the assignment is at the group's epoch, and each member (by who): whether
    it is at the group's epoch, its subscription, assignment and target."""
    answer = _to_coordinator(peer, group, describe_v1.ConsumerGroupDescribeRequest(
        group_ids=(GroupId(group),), include_authorized_operations=False),
        lambda a: a.groups[0].error_code)
    if answer == CLOSED:
        return CLOSED
    found = answer.groups[0]
    if _code(found.error_code):
        return ("error", _code(found.error_code), found.group_state)
    epoch = int(found.group_epoch)

    def parts(assignment: Any) -> tuple[tuple[str, int], ...]:
        return tuple(sorted((str(tp.topic_name), int(p))
                            for tp in assignment.topic_partitions for p in tp.partitions))

    members = tuple(sorted(
        (member_ids.index(m.member_id) if m.member_id in member_ids else m.member_id,
         "at the group epoch" if int(m.member_epoch) == epoch else "behind",
         tuple(sorted(m.subscribed_topic_names)), parts(m.assignment),
         parts(m.target_assignment), int(m.member_type))
        for m in found.members))
    return ("ok", found.group_state, found.assignor_name,
            "assigned at the group epoch" if int(found.assignment_epoch) == epoch
            else "assignment behind", members)
