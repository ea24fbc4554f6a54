"""DescribeQuorum (key 55), versions 0-2 (KIP-595, KIP-836, KIP-853).

Quirks: describes the metadata quorum, ``__cluster_metadata`` partition 0:
its voters are the ``broker,controller`` nodes (as changed since by
AddRaftVoter / RemoveRaftVoter), its observers the other nodes following the
log (broker-only nodes, ``process.roles=broker``, and removed voters), its
leader is the controller. Any broker answers: the status comes from the metadata leader
(``replication.quorum_admin``) — leader, epoch, high watermark, and per voter
its log end offset, last fetch and last caught-up wall-clock times (v1+; the
leader's own are now). v2 lists the voters as nodes with their listener (the
broker's own, named PLAINTEXT: a kcompat voter is reached on its Kafka port).
Any other topic-partition answers UNKNOWN_TOPIC_OR_PARTITION with Kafka's
message and zeros; with no leader known (an election running) the partition
answers NOT_LEADER_OR_FOLLOWER.
Authorization (Kafka's controller): DESCRIBE on the cluster, else
CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import OK
from kcompat.broker.host.context import RequestContext

METADATA_TOPIC, METADATA_PARTITION = "__cluster_metadata", 0
LISTENER = "PLAINTEXT"


def _empty(ctx: RequestContext, index: int, code: ErrorCode, message: str) -> Any:
    return ctx.build("PartitionData", partition_index=index, error_code=code,
                     error_message=message, leader_id=0, leader_epoch=0, high_watermark=0,
                     current_voters=(), observers=())


def _replicas(ctx: RequestContext, rows: list[list[int]]) -> tuple[Any, ...]:
    return tuple(
        ctx.build("ReplicaState", replica_id=node, replica_directory_id=None,
                  log_end_offset=end, last_fetch_timestamp=fetched,
                  last_caught_up_timestamp=caught_up)
        for node, end, fetched, caught_up in rows)


def _quorum(ctx: RequestContext, status: dict[str, Any]) -> Any:
    return ctx.build("PartitionData", partition_index=METADATA_PARTITION, error_code=OK,
                     error_message="", leader_id=status["leader"],
                     leader_epoch=status["epoch"], high_watermark=status["high_watermark"],
                     current_voters=_replicas(ctx, status["voters"]),
                     observers=_replicas(ctx, status.get("observers", [])))


def _nodes(ctx: RequestContext, status: dict[str, Any] | None) -> tuple[Any, ...]:
    """The voters' listeners, and the observers' (their registrations)."""
    cluster = ctx.cluster
    ends = {} if status is not None else dict(cluster.voters)
    for row in [*(status or {}).get("voters", []), *(status or {}).get("observers", [])]:
        where = cluster.endpoint(row[0])
        if where is not None:
            ends[row[0]] = where
    return tuple(
        ctx.build("Node", node_id=node, listeners=(
            ctx.build("Listener", name=LISTENER, host=host, port=port),))
        for node, (host, port) in sorted(ends.items()))


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not _authz.cluster(ctx, _authz.Op.DESCRIBE):
        code = ErrorCode.cluster_authorization_failed
        return ctx.response(error_code=code, error_message=_authz.MESSAGES[code], topics=(),
                            nodes=())
    topics, asked_metadata = [], False
    status: dict[str, Any] | None = None
    for t in request.topics:
        parts = []
        for p in t.partitions:
            index = int(p.partition_index)
            if t.topic_name != METADATA_TOPIC or index != METADATA_PARTITION:
                parts.append(_empty(ctx, index, ErrorCode.unknown_topic_or_partition,
                                    "This server does not host this topic-partition."))
                continue
            asked_metadata = True
            if status is None:
                _code, status = await ctx.broker.quorum_admin.quorum_status(timeout_s=5.0)
            if status is None:
                parts.append(_empty(ctx, index, ErrorCode.not_leader_or_follower,
                                    "The metadata quorum has no leader now."))
            else:
                parts.append(_quorum(ctx, status))
        topics.append(ctx.build("TopicData", topic_name=t.topic_name, partitions=tuple(parts)))
    nodes = _nodes(ctx, status) if asked_metadata and ctx.version >= 2 else ()
    return ctx.response(error_code=OK, error_message="", topics=tuple(topics), nodes=nodes)
