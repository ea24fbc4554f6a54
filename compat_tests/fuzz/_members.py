"""The fuzzer's classic group member: one per group, as a consumer drives it.

JoinGroup (joining again with the id a MEMBER_ID_REQUIRED answer names, as a
consumer does), SyncGroup as the leader handing itself the partitions the
machine chose, Heartbeat, LeaveGroup and OffsetCommit in the member's
generation (or a stale one). The member id and generation are each broker's
own, kept per peer (``Peer.state``); what is compared is what a consumer acts
on: error codes, whether it leads, whether its generation advanced, the
members it was told of, and the assignment it received, as a set of
partitions. Timing (the initial rebalance delay a broker waits before it
answers a first JoinGroup) is never compared: a call waits for its answer.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

from compat_tests.fuzz import _ops as ops
from compat_tests.fuzz._wire import CLOSED, Peer

Observation = Any
MEMBER_ID_REQUIRED = 79
SESSION_MS = 300_000  # longer than a sequence: no member expires while it runs
# longer than a sequence too: a member that joined and has not synced yet is not
# removed meanwhile (a broker's timing, not compared)
REBALANCE_MS = 300_000
PROTOCOL = "range"


@dataclass
class Member:
    member_id: str
    generation: int = -1


def _member(peer: Peer, group: str) -> Member:
    member = peer.state.setdefault(f"member:{group}", Member(""))
    assert isinstance(member, Member)
    return member


def subscription(topics: list[str]) -> bytes:
    """A consumer protocol subscription (v0) of ``topics``."""
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


def assignment(partitions: dict[str, list[int]]) -> bytes:
    """A consumer protocol assignment (v0) of ``partitions``."""
    out = struct.pack(">hi", 0, len(partitions))
    for topic, indexes in sorted(partitions.items()):
        out += struct.pack(">h", len(topic)) + topic.encode()
        out += struct.pack(f">i{len(indexes)}i", len(indexes), *indexes)
    return out + struct.pack(">i", -1)


def assigned(raw: bytes | None) -> frozenset[tuple[str, int]]:
    """The partitions of a consumer protocol assignment."""
    if not raw:
        return frozenset()
    data = bytes(raw)
    pos = 2
    (count,) = struct.unpack_from(">i", data, pos)
    pos += 4
    out: set[tuple[str, int]] = set()
    for _ in range(count):
        (size,) = struct.unpack_from(">h", data, pos)
        topic = data[pos + 2:pos + 2 + size].decode()
        pos += 2 + size
        (n,) = struct.unpack_from(">i", data, pos)
        out.update((topic, p) for p in struct.unpack_from(f">{n}i", data, pos + 4))
        pos += 4 + 4 * n
    return frozenset(out)


def join_group(peer: Peer, group: str, topics: list[str]) -> Observation:
    """JoinGroup (v7) of the group's member subscribing to ``topics``."""
    member = _member(peer, group)
    for _ in range(2):
        answer = ops.to_coordinator(peer, group, JoinGroupRequest, JoinGroupResponse, 7, {
            "group_id": group, "session_timeout_ms": SESSION_MS,
            "rebalance_timeout_ms": REBALANCE_MS, "member_id": member.member_id,
            "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": PROTOCOL, "metadata": subscription(topics)}]},
            lambda a: a["error_code"])
        if answer == CLOSED:
            return CLOSED
        if answer["error_code"] != MEMBER_ID_REQUIRED:
            break
        member.member_id = answer["member_id"]
    if answer["error_code"]:
        if answer["error_code"] == 25:  # UNKNOWN_MEMBER_ID: a consumer joins afresh
            member.member_id = ""
        return ("error", answer["error_code"])
    advanced = answer["generation_id"] > member.generation
    member.member_id, member.generation = answer["member_id"], answer["generation_id"]
    return ("ok", answer["leader"] == member.member_id, len(answer["members"]),
            "generation advanced" if advanced else "generation kept", answer["protocol_name"])


def sync_group(peer: Peer, group: str, partitions: dict[str, list[int]]) -> Observation:
    """SyncGroup (v5) as the leader assigning itself ``partitions``: the
    error, or the partitions it received."""
    member = _member(peer, group)
    answer = ops.to_coordinator(peer, group, SyncGroupRequest, SyncGroupResponse, 5, {
        "group_id": group, "generation_id": member.generation, "member_id": member.member_id,
        "group_instance_id": None, "protocol_type": "consumer", "protocol_name": PROTOCOL,
        "assignments": [{"member_id": member.member_id,
                         "assignment": assignment(partitions)}] if member.member_id else []},
        lambda a: a["error_code"])
    if answer == CLOSED:
        return CLOSED
    if answer["error_code"]:
        return ("error", answer["error_code"])
    return ("ok", tuple(sorted(assigned(answer["assignment"]))))


def heartbeat(peer: Peer, group: str) -> Observation:
    member = _member(peer, group)
    answer = ops.to_coordinator(peer, group, HeartbeatRequest, HeartbeatResponse, 4, {
        "group_id": group, "generation_id": member.generation, "member_id": member.member_id,
        "group_instance_id": None}, lambda a: a["error_code"])
    return answer if answer == CLOSED else answer["error_code"]


def leave_group(peer: Peer, group: str) -> Observation:
    """LeaveGroup (v4) of the member: the request's and the member's errors."""
    member = _member(peer, group)
    answer = ops.to_coordinator(peer, group, LeaveGroupRequest, LeaveGroupResponse, 4, {
        "group_id": group, "members": [
            {"member_id": member.member_id, "group_instance_id": None}]},
        lambda a: a["error_code"])
    if answer == CLOSED:
        return CLOSED
    peer.state.pop(f"member:{group}", None)
    return (answer["error_code"], tuple(m["error_code"] for m in answer["members"]))


def commit_in_generation(peer: Peer, group: str, stale: bool, topic: str, partition: int,
                         offset: int) -> Observation:
    """OffsetCommit (v8) as the member, in its generation or the one before."""
    member = _member(peer, group)
    answer = ops.to_coordinator(peer, group, OffsetCommitRequest, OffsetCommitResponse, 8, {
        "group_id": group, "generation_id_or_member_epoch": member.generation - int(stale),
        "member_id": member.member_id, "group_instance_id": None, "topics": [
            {"name": topic, "partitions": [
                {"partition_index": partition, "committed_offset": offset,
                 "committed_leader_epoch": -1, "committed_metadata": ""}]}]},
        lambda a: a["topics"][0]["partitions"][0]["error_code"])
    return answer if answer == CLOSED else answer["topics"][0]["partitions"][0]["error_code"]
