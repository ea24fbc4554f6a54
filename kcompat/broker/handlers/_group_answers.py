"""Pieces of the answers of the KIP-848 and KIP-932 group APIs.

ConsumerGroupHeartbeat and ShareGroupHeartbeat answer alike (an error, the
member id and epoch, the heartbeat interval, the assignment by topic id);
ConsumerGroupDescribe and ShareGroupDescribe describe assignments alike (by
topic id and name). A topic deleted since the assignment was computed is left
out, as it has no id any more.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from kcompat.broker.handlers._common import NO_THROTTLE
from kcompat.broker.host.context import RequestContext
from kcompat.group.assignors import TopicPartitions
from kcompat.group.epoch_group import HeartbeatResult

NOT_REQUESTED = -(1 << 31)  # authorized operations: Kafka's "not requested"


def assignment(ctx: RequestContext, assigned: TopicPartitions, with_names: bool,
               made_with: Mapping[str, object] | None = None) -> Any:
    """``assigned`` as an ``Assignment`` of ``TopicPartitions`` by topic id
    (and name, ``with_names``: the describe APIs). ``made_with``: the topic
    ids the group made it with (``DescribedGroup.topic_ids``): a topic
    deleted and re-created under its name since is left out, as Kafka, which
    keeps assignments by topic id, finds no topic of the old one."""
    topics = []
    for name, partitions in assigned:
        meta = ctx.state.topics.get(name)
        made = None if made_with is None else made_with.get(name)
        if meta is not None and (made is None or str(made) == str(meta.topic_id)):
            named = {"topic_name": name} if with_names else {}
            topics.append(ctx.build("TopicPartitions", topic_id=meta.topic_id,
                                    partitions=tuple(partitions), **named))
    return ctx.build("Assignment", topic_partitions=tuple(topics))


def heartbeat_response(ctx: RequestContext, result: HeartbeatResult) -> Any:
    """The whole answer of a consumer- or share-group heartbeat."""
    sent = None if result.assignment is None else assignment(ctx, result.assignment, False)
    return ctx.response(
        throttle_time=NO_THROTTLE, error_code=result.error, error_message=result.error_message,
        member_id=result.member_id, member_epoch=result.member_epoch,
        heartbeat_interval=datetime.timedelta(milliseconds=result.heartbeat_interval_ms),
        assignment=sent)
