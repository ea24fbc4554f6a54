"""Current-leader hints (KIP-951) and topic-id resolution shared by Produce and Fetch.

KIP-951: a Produce (v10+) partition answered NOT_LEADER_OR_FOLLOWER, or a Fetch
(v16+) one answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH, carries the
partition's current leader id and epoch as this broker knows them, and the
response lists the endpoint of each such leader (``node_endpoints``), so the
client moves to the new leader without a Metadata round trip. An unknown leader
is (-1, -1) and adds no endpoint, as Kafka's metadata cache answers.

KIP-516: Produce v13, Fetch v13+ and OffsetCommit/OffsetFetch v10 name topics by
id only; ``topic_name`` turns an id into this broker's topic name (None for an
id it does not know: UNKNOWN_TOPIC_ID).
"""

from __future__ import annotations

import uuid
from typing import Any

from kcompat.broker.host.context import RequestContext


def topic_name(ctx: RequestContext, topic_id: uuid.UUID | None) -> str | None:
    """The name of the topic with ``topic_id`` in the metadata image, or None."""
    meta = ctx.state.topic_by_id(topic_id)
    return meta.name if meta is not None else None


class LeaderHints:
    """Collects the current leaders of errored partitions of one response."""

    def __init__(self, ctx: RequestContext) -> None:
        self.ctx = ctx
        self.leaders: set[int] = set()

    def current_leader(self, topic: str | None, index: int) -> Any:
        """The ``LeaderIdAndEpoch`` entity of one partition; remembers its leader."""
        leader, epoch = -1, -1
        cluster = self.ctx.cluster
        if topic is not None and (topic, index) in cluster.assignments:
            leader, epoch, _replicas, _isr = cluster.partition_view(topic, index)
            if leader < 0:
                epoch = -1
        if leader >= 0:
            self.leaders.add(leader)
        return self.ctx.build("LeaderIdAndEpoch", leader_id=leader, leader_epoch=epoch)

    def node_endpoints(self) -> tuple[Any, ...]:
        """``NodeEndpoint`` entities of the leaders named, those this broker can reach."""
        if not self.leaders:
            return ()
        return tuple(
            self.ctx.build("NodeEndpoint", node_id=node, host=host, port=port, rack=rack)
            for node, host, port, rack
            in self.ctx.controller.lifecycle.broker_endpoints(self.leaders, self.ctx.listener)
            if node in self.leaders)
