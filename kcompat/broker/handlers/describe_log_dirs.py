"""DescribeLogDirs (key 35), versions 1-5 (v0 was removed in Kafka 4.0).

Quirks: answered by the broker asked, about its own data directory (Admin
clients ask every broker): one log dir, the absolute ``data.dir``, with each
local replica's size (bytes of its segments), offset lag (Kafka's: how far
the replica's log end is behind the partition's high watermark — 0 on a
leader; a follower counts from the leader's high watermark as last heard, so
a follower still fetching shows what it lacks), ``is_future_key`` false (one log dir:
AlterReplicaLogDirs moves nothing). v4+ carry the volume's total and usable bytes
(``statvfs``), v5 ``is_cordoned`` (false). Null topics means every replica;
an unknown topic or partition is left out, as Kafka does. Filtered views
have no replicas of their own and the metadata log is not a topic.
Authorization (Kafka's): DESCRIBE on the cluster, else no result and (v3+)
CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import os
from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.partition import Partition


def _wanted(ctx: RequestContext, request: Any) -> list[tuple[str, int, Partition]]:
    local = ctx.state.partitions
    topics = ctx.state.topics
    if request.topics is None:
        keys = sorted(k for k in local if k[0] in topics)
    else:
        keys = sorted({(t.topic, int(p)) for t in request.topics for p in t.partitions
                       if (t.topic, int(p)) in local and t.topic in topics})
    return [(topic, index, local[(topic, index)]) for topic, index in keys]


def _partition(ctx: RequestContext, part: Partition) -> Any:
    end = part.log.log_end_offset
    high_watermark = part.high_watermark
    group = ctx.cluster.group_of(part.topic, part.index)
    if group is not None and not group.is_leader:  # the leader's, as last heard
        high_watermark = max(high_watermark, group.raft.heard_high_watermark)
    return ctx.build("DescribeLogDirsPartition", partition_index=part.index,
                     partition_size=part.log.size_bytes,
                     offset_lag=max(0, high_watermark - end), is_future_key=False)


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not _authz.cluster(ctx, _authz.Op.DESCRIBE):  # Kafka: no result, the error (v3+)
        top = {"error_code": ErrorCode.cluster_authorization_failed} if ctx.version >= 3 else {}
        return ctx.response(throttle_time=NO_THROTTLE, results=(), **top)
    by_topic: dict[str, list[Any]] = {}
    for topic, _index, part in _wanted(ctx, request):
        by_topic.setdefault(topic, []).append(_partition(ctx, part))
    topics = tuple(ctx.build("DescribeLogDirsTopic", name=name, partitions=tuple(parts))
                   for name, parts in by_topic.items())
    log_dir = os.path.abspath(ctx.state.data_dir)
    fields: dict[str, Any] = {"error_code": OK, "log_dir": log_dir, "topics": topics}
    if ctx.version >= 4:
        st = os.statvfs(log_dir)
        fields.update(total_bytes=st.f_blocks * st.f_frsize,
                      usable_bytes=st.f_bavail * st.f_frsize)
    result = ctx.build("DescribeLogDirsResult", **fields)
    top = {"error_code": OK} if ctx.version >= 3 else {}
    return ctx.response(throttle_time=NO_THROTTLE, results=(result,), **top)
