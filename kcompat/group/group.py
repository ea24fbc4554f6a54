"""The classic consumer group: members, generation and state.

Theory of operation
-------------------
A group is in one of five states (Kafka's classic protocol, KIP-62/345/394):

    Empty --join--> PreparingRebalance --all joined / timeout--> CompletingRebalance
    CompletingRebalance --leader SyncGroup--> Stable
    Stable / CompletingRebalance --join with new protocols, leave, expiry--> PreparingRebalance
    PreparingRebalance --last member gone--> Empty
    any --DeleteGroups / all offsets gone while Empty--> Dead

This module only holds the data (``Group``, ``Member``) and small pure queries
on it; the transitions live in ``coordinator.py``. Nothing here does I/O or
reads a clock: times are passed in as ``now_ms``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    last_heartbeat_ms: int = 0
    join_token: int | None = None  # a JoinGroup waiting for the rebalance to complete
    sync_token: int | None = None  # a SyncGroup waiting for the leader's assignment
    synced: bool = False  # sent SyncGroup in the current generation

    @property
    def awaiting_join(self) -> bool:
        return self.join_token is not None

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: dict[str, int] = field(default_factory=dict)  # KIP-394: id -> deadline
    rebalance_deadline_ms: int = 0
    initial_delay_deadline_ms: int = 0  # new group: wait for more members (KIP-134)
    sync_deadline_ms: int = 0
    state_since_ms: int = 0

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    def transition(self, state: GroupState, now_ms: int) -> None:
        self.state = state
        self.state_since_ms = now_ms

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def all_joined(self) -> bool:
        return all(m.awaiting_join for m in self.members.values())

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Can a member with these protocols join (same type, one protocol in common)?"""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        names = {name for name, _ in protocols}
        return bool(names & self.common_protocols())

    def common_protocols(self) -> set[str]:
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str | None:
        """Kafka's vote: each member votes for its most preferred common protocol."""
        candidates = self.common_protocols()
        if not candidates:
            return None
        votes: dict[str, int] = {}
        order: list[str] = []
        for member in self.members.values():
            for name, _ in member.protocols:
                if name in candidates:
                    votes[name] = votes.get(name, 0) + 1
                    if name not in order:
                        order.append(name)
                    break
        return max(order, key=lambda n: (votes[n], -order.index(n)))

    def is_static_fenced(self, member_id: str, instance_id: str | None) -> bool:
        if instance_id is None:
            return False
        known = self.static_members.get(instance_id)
        return known is not None and known != member_id

    def subscribed_topics(self) -> set[str] | None:
        """Topics of the consumer protocol subscriptions; None if unknown."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            parsed = parse_subscription_topics(member.metadata_for(self.protocol_name))
            if parsed is None:
                return None
            topics |= parsed
        return topics


def parse_subscription_topics(metadata: bytes) -> set[str] | None:
    """Topics of a ConsumerProtocolSubscription (any version: version int16, then
    an array of int16-length strings). None if it cannot be read."""
    try:
        pos = 2
        count = int.from_bytes(metadata[pos : pos + 4], "big", signed=True)
        pos += 4
        topics = set()
        for _ in range(max(count, 0)):
            n = int.from_bytes(metadata[pos : pos + 2], "big", signed=True)
            pos += 2
            if n < 0 or pos + n > len(metadata):
                return None
            topics.add(metadata[pos : pos + n].decode())
            pos += n
        return topics
    except (UnicodeDecodeError, ValueError):
        return None
