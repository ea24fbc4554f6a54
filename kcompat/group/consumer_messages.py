"""What goes in and out of a KIP-848 consumer group, and the request checks.

Theory of operation
-------------------
Value types of ``consumer_group``: a ConsumerGroupHeartbeat as the machine
sees it (``Heartbeat``; ``None`` fields did not change since the last one),
its answer (``epoch_group.HeartbeatResult``, shared with share groups),
and a described group. ``check_request`` is Kafka 4.4's
validation of a heartbeat, done before the coordinator is looked up, with
Kafka's error codes and messages. Pure: no clock, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from kcompat.group.assignors import TopicPartitions
from kcompat.group.consumer_member import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
)
from kcompat.group.epoch_group import DescribedGroup, HeartbeatResult

__all__ = ["ConsumerGroupConfig", "DescribedConsumerGroup", "DescribedMember", "GroupError",
           "Heartbeat", "HeartbeatResult", "check_request"]


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """One ConsumerGroupHeartbeat request; ``None`` fields did not change."""

    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: TopicPartitions | None = None
    client_id: str = ""
    client_host: str = ""
    # who sent it (not on the wire): a regex subscription is resolved to the
    # topics this principal may describe from ``client_host`` (``ConsumerGroup.topic_filter``)
    principal: str = ""


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str  # "" when none, as Kafka describes it
    assignment: TopicPartitions  # what it owns: assigned and still to revoke, as Kafka
    target_assignment: TopicPartitions
    classic: bool = False  # joined with JoinGroup (ConsumerGroupDescribe member type 0)


DescribedConsumerGroup = DescribedGroup[DescribedMember]


def check_request(group_id: str, hb: Heartbeat, assignors: Sequence[str],
                  member_id_required: bool = True) -> tuple[ErrorCode, str] | None:
    """Kafka 4.4's request checks, in its order (None: well-formed)."""
    epoch = hb.member_epoch
    if (member_id_required or epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH) \
            and not hb.member_id.strip():
        return ErrorCode.invalid_request, "MemberId can't be empty."
    for value, name in ((group_id, "GroupId"), (hb.instance_id, "InstanceId"),
                        (hb.rack_id, "RackId")):
        if value is not None and not value.strip():
            return ErrorCode.invalid_request, f"{name} can't be empty."
    if epoch == 0:
        if hb.rebalance_timeout_ms == -1:
            return ErrorCode.invalid_request, "RebalanceTimeoutMs must be provided in first request."
        if hb.owned is None or hb.owned:
            return ErrorCode.invalid_request, "TopicPartitions must be empty when (re-)joining."
        if hb.subscribed_topic_names is None and hb.subscribed_topic_regex is None:
            return ErrorCode.invalid_request, ("Either SubscribedTopicNames or SubscribedTopicRegex"
                                               " must be non-null when (re-)joining.")
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if hb.instance_id is None:
            return ErrorCode.invalid_request, "InstanceId can't be null."
    elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        return ErrorCode.invalid_request, "MemberEpoch is invalid."
    if hb.subscribed_topic_regex is not None:
        try:
            re.compile(hb.subscribed_topic_regex)
        except re.error as e:
            return ErrorCode.invalid_regular_expression, (
                f"SubscribedTopicRegex `{hb.subscribed_topic_regex}` is not a valid regular "
                f"expression: {e.msg}.")
    if hb.server_assignor is not None and hb.server_assignor not in assignors:
        return ErrorCode.unsupported_assignor, (
            f"ServerAssignor {hb.server_assignor} is not supported. Supported assignors: "
            f"{', '.join(assignors)}.")
    return None


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    max_size: int = 2_147_483_647  # group.consumer.max.size
    assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors
    assignment_interval_ms: int = 1_000  # group.consumer.assignment.interval.ms
    regex_refresh_interval_ms: int = 600_000  # group.consumer.regex.refresh.interval.ms


class GroupError(Exception):
    """A heartbeat refused with a Kafka error code (data for the client)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
