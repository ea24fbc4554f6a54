"""The fuzzer's share-group members (KIP-932): two per group, joining,
heartbeating and leaving, and the group described.

ShareGroupHeartbeat (v1) joins (epoch 0, the subscribed topic names),
heartbeats at the member's epoch and leaves (epoch -1); ShareGroupDescribe
(v1) reads the group. As for the KIP-848 members (``_consumers``), member
ids are the client's (the same UUID on both brokers), epochs are compared
as moves and against the group's epoch, and the group's own configs
(``GROUP_CONFIGS``, set alike on both) make a heartbeat compute the target
assignment at once and in line, and let the group read records produced
before it joined (``share.auto.offset.reset=earliest``).

The members read with ShareFetch and ShareAcknowledge in ``_share_fetch``
(records acquired, their delivery counts, ACCEPT/RELEASE/REJECT, share
session epochs), keeping each member's share sessions here
(``ShareMember.sessions``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.admin.configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kio.schema.share_group_describe.v1 import request as describe_v1
from kio.schema.share_group_heartbeat.v1 import request as heartbeat_v1
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32

from compat_tests.fuzz._consumers import GROUP_RESOURCE, _code, _moved, _named, _to_coordinator
from compat_tests.fuzz._wire import CLOSED, Peer

Observation = Any
UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH = 25, 110
GROUP_CONFIGS = {"share.assignment.interval.ms": "0", "share.assignor.offload.enable": "false",
                 "share.auto.offset.reset": "earliest"}


@dataclass
class ShareMember:
    member_id: str
    epoch: int = 0  # 0: not in the group, joins next
    subscribed: tuple[str, ...] = ()
    owned: dict[uuid.UUID, tuple[int, ...]] = field(default_factory=dict)
    #: share session epoch per broker address (None: the bootstrap); 0: none open
    #: (``_share_fetch``). A leave keeps them: the broker decides what is left.
    sessions: dict[str | None, int] = field(default_factory=dict)
    #: the (topic id, partition)s each share session holds, as a client tracks them
    #: to forget what it no longer fetches (``_share_fetch``)
    in_session: dict[str | None, set[tuple[uuid.UUID, int]]] = field(default_factory=dict)


def set_group_configs(peer: Peer, group: str) -> None:
    """``GROUP_CONFIGS`` on ``group`` (IncrementalAlterConfigs, GROUP)."""
    answer = peer.call(IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, 1, {
        "resources": [{"resource_type": GROUP_RESOURCE, "resource_name": group, "configs": [
            {"name": k, "config_operation": 0, "value": v}
            for k, v in GROUP_CONFIGS.items()]}], "validate_only": False})
    assert answer != CLOSED and isinstance(answer, dict), f"{peer.name}: {answer}"
    assert answer["responses"][0]["error_code"] == 0, f"{peer.name}: {answer['responses'][0]}"


def _member(peer: Peer, group: str, who: int, member_id: str) -> ShareMember:
    key = f"share:{group}:{who}"
    member = peer.state.get(key)
    if member is None:
        member = peer.state[key] = ShareMember(member_id)
    assert isinstance(member, ShareMember)
    return member


def _heartbeat(peer: Peer, group: str, member: ShareMember, epoch: int) -> Any:
    return _to_coordinator(peer, group, heartbeat_v1.ShareGroupHeartbeatRequest(
        group_id=GroupId(group), member_id=member.member_id, member_epoch=i32(epoch),
        subscribed_topic_names=tuple(TopicName(t) for t in member.subscribed)
        if epoch == 0 else None), lambda a: a.error_code)


def _answered(peer: Peer, topics: list[str], member: ShareMember, answer: Any) -> Observation:
    if answer == CLOSED:
        return CLOSED
    error = _code(answer.error_code)
    if error:
        if error in (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH):  # a share consumer joins afresh
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


def share_join(peer: Peer, group: str, member_id: str, who: int, subscribed: list[str],
               topics: list[str]) -> Observation:
    """ShareGroupHeartbeat at epoch 0 subscribing to ``subscribed``."""
    member = _member(peer, group, who, member_id)
    member.subscribed, member.owned = tuple(subscribed), {}
    before, member.epoch = member.epoch, 0
    seen = _answered(peer, topics, member, _heartbeat(peer, group, member, 0))
    if seen != CLOSED and seen[0] == "error" and before:
        member.epoch = before
    return seen


def share_heartbeat(peer: Peer, group: str, member_id: str, who: int,
                    topics: list[str]) -> Observation:
    """A heartbeat at the member's epoch (a join when it is not in the group)."""
    member = _member(peer, group, who, member_id)
    return _answered(peer, topics, member, _heartbeat(peer, group, member, member.epoch))


def share_leave(peer: Peer, group: str, member_id: str, who: int) -> Observation:
    member = _member(peer, group, who, member_id)
    answer = _heartbeat(peer, group, member, -1)
    if answer == CLOSED:
        return CLOSED
    member.epoch, member.owned = 0, {}
    return (_code(answer.error_code), int(answer.member_epoch))


def share_describe(peer: Peer, group: str, member_ids: list[str]) -> Observation:
    """ShareGroupDescribe (v1): the group's error, state, assignor, and each
    member (by who): at the group's epoch or not, subscription, assignment."""
    answer = _to_coordinator(peer, group, describe_v1.ShareGroupDescribeRequest(
        group_ids=(GroupId(group),), include_authorized_operations=False),
        lambda a: a.groups[0].error_code)
    if answer == CLOSED:
        return CLOSED
    found = answer.groups[0]
    if _code(found.error_code):
        return ("error", _code(found.error_code), found.group_state)
    epoch = int(found.group_epoch)
    members = tuple(sorted(
        (member_ids.index(m.member_id) if m.member_id in member_ids else m.member_id,
         "at the group epoch" if int(m.member_epoch) == epoch else "behind",
         tuple(sorted(m.subscribed_topic_names)),
         tuple(sorted((str(tp.topic_name), int(p)) for tp in m.assignment.topic_partitions
                      for p in tp.partitions)))
        for m in found.members))
    return ("ok", found.group_state, found.assignor_name,
            "assigned at the group epoch" if int(found.assignment_epoch) == epoch
            else "assignment behind", members)
