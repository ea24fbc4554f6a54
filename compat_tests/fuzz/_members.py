"""The fuzzer's classic group members: two per group, as consumers drive them.

JoinGroup (joining again with the id a MEMBER_ID_REQUIRED answer names, as a
consumer does), SyncGroup (the leader handing out the partitions the machine
chose: its own and the other member's; a follower handing out none),
Heartbeat, LeaveGroup and OffsetCommit in the member's generation (or a stale
one), and DescribeGroups. The member ids and generations are each broker's
own, kept per peer (``Peer.state``); what is compared is what a consumer acts
on: error codes, whether it leads, whether its generation advanced, the
members it was told of (how many), the assignment it received as a set of
partitions, and the group's state, protocol and members' assignments.

Each member has its own connection, as each consumer has. A broker holds a
JoinGroup until every member rejoined, and a follower's SyncGroup until the
leader's: a member's request is awaited ``SHORT_S``; unanswered, it is
pending (``WAITING``), the member sends nothing more (a broker answers a
connection's requests in order), and its next operation looks for that
answer instead (``("earlier request answered", ...)``). When one broker
answered and the other is ``WAITING``, the machine awaits the latter
``LONG_S`` more (``collect``) before it compares: what is compared is which
requests a broker holds, not how fast it answers the others. Timing (the
initial rebalance delay, the rebalance and session timeouts, longer than a
sequence) is never compared.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.admin.groups import DescribeGroupsRequest, DescribeGroupsResponse
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


SHORT_S = 0.3  # how long a member's request is awaited before it is pending
LONG_S = 15.0  # how long, when the other broker answered it
WAITING = "waiting for the answer"
EARLIER = "earlier request answered"
COORDINATOR_MOVED = {14, 15, 16}


@dataclass
class Pending:
    sent: Any  # what Peer.receive takes
    decode: Callable[[dict[str, Any]], Observation]
    fresh: bool = True  # sent by the operation being compared


@dataclass
class Member:
    conn: Peer
    member_id: str = ""
    generation: int = -1
    #: the members a JoinGroup answer named (the leader's; a follower's is empty)
    members: tuple[str, ...] = ()
    pending: Pending | None = field(default=None)

    def close(self) -> None:
        self.conn.close()


def member_of(peer: Peer, group: str, who: int) -> Member:
    """Member ``who`` of ``group`` (its id and generation), as it stands."""
    return _member(peer, group, who)


def _member(peer: Peer, group: str, who: int) -> Member:
    key = f"member:{group}:{who}"
    member = peer.state.get(key)
    if member is None:
        member = peer.state[key] = Member(Peer(f"{peer.name}/{key}", ",".join(peer.addresses)))
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


def _send(peer: Peer, member: Member, group: str, request: Any, response: Any, version: int,
          data: dict[str, Any], error_of: Callable[[dict[str, Any]], int],
          decode: Callable[[dict[str, Any]], Observation], wait_s: float = SHORT_S
          ) -> Observation:
    """The member's request to the group's coordinator on its own connection:
    its decoded answer, or ``WAITING`` (then pending); in a cluster sent again
    while the coordinator moves, as a consumer does."""
    for _ in range(ops.ROUTE_ATTEMPTS):
        sent = member.conn.send(request, response, version, data, ops.coordinator(peer, group))
        answer = member.conn.receive(sent, wait_s)
        if answer is None:
            member.pending = Pending(sent, decode)
            return WAITING
        if answer == CLOSED:
            return CLOSED
        if len(peer.addresses) == 1 or error_of(answer) not in COORDINATOR_MOVED:
            break
        time.sleep(0.1)
    return decode(answer)


def _act(peer: Peer, group: str, who: int, act: Callable[[Member], Observation]) -> Observation:
    """``act`` as member ``who``; while a request of its own is pending,
    that request's answer (a short wait) instead."""
    member = _member(peer, group, who)
    if member.pending is not None:
        member.pending.fresh = False
        return _collect(member, SHORT_S)
    return act(member)


def _collect(member: Member, wait_s: float) -> Observation:
    pending = member.pending
    assert pending is not None
    answer = member.conn.receive(pending.sent, wait_s)
    if answer is None:
        return WAITING
    member.pending = None
    seen = CLOSED if answer == CLOSED else pending.decode(answer)
    return seen if pending.fresh else (EARLIER, seen)


def collect(peer: Peer, group: str, who: int) -> Observation:
    """What ``WAITING`` turns into when awaited ``LONG_S`` (the other broker
    answered)."""
    member = _member(peer, group, who)
    return WAITING if member.pending is None else _collect(member, LONG_S)


def join_group(peer: Peer, group: str, topics: list[str], who: int = 0) -> Observation:
    """JoinGroup (v7) of member ``who`` subscribing to ``topics``."""
    return _act(peer, group, who, lambda member: _join(peer, group, topics, member))


def _join(peer: Peer, group: str, topics: list[str], member: Member) -> Observation:
    def data() -> dict[str, Any]:
        return {"group_id": group, "session_timeout_ms": SESSION_MS,
                "rebalance_timeout_ms": REBALANCE_MS, "member_id": member.member_id,
                "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": PROTOCOL, "metadata": subscription(topics)}]}

    def error_of(answer: dict[str, Any]) -> int:
        return int(answer["error_code"])

    if not member.member_id:  # answered at once: MEMBER_ID_REQUIRED, or an error
        first = _send(peer, member, group, JoinGroupRequest, JoinGroupResponse, 7, data(),
                      error_of, lambda a: a, LONG_S)
        if first in (CLOSED, WAITING) or first["error_code"] != MEMBER_ID_REQUIRED:
            return first if first in (CLOSED, WAITING) else _joined(member, first)
        member.member_id = first["member_id"]
    return _send(peer, member, group, JoinGroupRequest, JoinGroupResponse, 7, data(), error_of,
                 lambda a: _joined(member, a))


def _joined(member: Member, answer: dict[str, Any]) -> Observation:
    if answer["error_code"]:
        if answer["error_code"] == 25:  # UNKNOWN_MEMBER_ID: a consumer joins afresh
            member.member_id, member.generation, member.members = "", -1, ()
        return ("error", answer["error_code"])
    advanced = answer["generation_id"] > member.generation
    member.member_id, member.generation = answer["member_id"], answer["generation_id"]
    member.members = tuple(m["member_id"] for m in answer["members"])
    return ("ok", answer["leader"] == member.member_id, len(answer["members"]),
            "generation advanced" if advanced else "generation kept", answer["protocol_name"])


def sync_group(peer: Peer, group: str, partitions: dict[str, list[int]],
               others: dict[str, list[int]] | None = None, who: int = 0) -> Observation:
    """SyncGroup (v5) of member ``who``: as the leader (its last JoinGroup
    named the members) assigning itself ``partitions`` and each other member
    ``others``, as a follower assigning nothing; the error, or the partitions
    it received."""
    def act(member: Member) -> Observation:
        assignments = [{"member_id": m, "assignment": assignment(
            partitions if m == member.member_id else others or {})} for m in member.members]
        return _send(peer, member, group, SyncGroupRequest, SyncGroupResponse, 5, {
            "group_id": group, "generation_id": member.generation,
            "member_id": member.member_id, "group_instance_id": None,
            "protocol_type": "consumer", "protocol_name": PROTOCOL,
            "assignments": assignments}, lambda a: a["error_code"], _synced)
    return _act(peer, group, who, act)


def _synced(answer: dict[str, Any]) -> Observation:
    if answer["error_code"]:
        return ("error", answer["error_code"])
    return ("ok", tuple(sorted(assigned(answer["assignment"]))))


def heartbeat(peer: Peer, group: str, who: int = 0) -> Observation:
    return _act(peer, group, who, lambda member: _send(
        peer, member, group, HeartbeatRequest, HeartbeatResponse, 4, {
            "group_id": group, "generation_id": member.generation,
            "member_id": member.member_id, "group_instance_id": None},
        lambda a: a["error_code"], lambda a: a["error_code"]))


def leave_group(peer: Peer, group: str, who: int = 0) -> Observation:
    """LeaveGroup (v4) of member ``who``: the request's and the member's
    errors; the member joins afresh next."""
    def left(answer: dict[str, Any], member: Member) -> Observation:
        member.member_id, member.generation, member.members = "", -1, ()
        return (answer["error_code"], tuple(m["error_code"] for m in answer["members"]))

    return _act(peer, group, who, lambda member: _send(
        peer, member, group, LeaveGroupRequest, LeaveGroupResponse, 4, {
            "group_id": group, "members": [
                {"member_id": member.member_id, "group_instance_id": None}]},
        lambda a: a["error_code"], lambda a: left(a, member)))


def commit_in_generation(peer: Peer, group: str, stale: bool, topic: str, partition: int,
                         offset: int, who: int = 0) -> Observation:
    """OffsetCommit (v8) as member ``who``, in its generation or the one before."""
    def error_of(answer: dict[str, Any]) -> int:
        return int(answer["topics"][0]["partitions"][0]["error_code"])

    return _act(peer, group, who, lambda member: _send(
        peer, member, group, OffsetCommitRequest, OffsetCommitResponse, 8, {
            "group_id": group, "generation_id_or_member_epoch": member.generation - int(stale),
            "member_id": member.member_id, "group_instance_id": None, "topics": [
                {"name": topic, "partitions": [
                    {"partition_index": partition, "committed_offset": offset,
                     "committed_leader_epoch": -1, "committed_metadata": ""}]}]},
        error_of, error_of))


def describe_group(peer: Peer, group: str) -> Observation:
    """DescribeGroups (v5): the group's error, state, protocol type and
    protocol, and its members' assignments (not their ids)."""
    answer = ops.to_coordinator(peer, group, DescribeGroupsRequest, DescribeGroupsResponse, 5, {
        "groups": [group], "include_authorized_operations": False},
        lambda a: a["groups"][0]["error_code"])
    if answer == CLOSED:
        return CLOSED
    found = answer["groups"][0]
    return (found["error_code"], found["group_state"], found["protocol_type"],
            found["protocol_data"], tuple(sorted(
                tuple(sorted(assigned(m["member_assignment"]))) for m in found["members"])))
