"""AlterReplicaLogDirs (key 34), versions 1-2 (v0 was removed in Kafka 4.0).

Quirks: a kcompat broker has one log dir, the absolute ``data.dir`` that
DescribeLogDirs names, so no replica ever moves; each partition gets the
answer Apache Kafka 4.4 gives on a broker with one log dir:
- a destination that is not exactly that path (a trailing slash or a
  relative path too) is LOG_DIR_NOT_FOUND, whatever the partition;
- a replica this broker holds, moved to the dir it is in: NONE (nothing to do);
- a partition the cluster has but this broker holds no replica of:
  REPLICA_NOT_AVAILABLE (Kafka's NOT_LEADER_OR_FOLLOWER, kept as the old code
  for this API);
- an unknown topic or partition (a filtered view too: it has no replica):
  UNKNOWN_TOPIC_OR_PARTITION;
- a topic whose future-log directory name would pass 255 bytes (name,
  partition, a 32-hex id and ``-future``): INVALID_TOPIC_EXCEPTION, first
  (topic names are ASCII, so characters are bytes).
A partition named in two dirs of one request is answered once, for the last
dir (Kafka keys the request by partition). Answers are grouped per topic.
Authorization (Kafka's): ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED
for every partition named.
"""

from __future__ import annotations

import os
from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.host.context import RequestContext

#: a future log's directory: "<topic>-<partition>.<32 hex>-future", at most 255 bytes
FUTURE_NAME_EXTRA = 1 + 32 + len("-future")
DIR_NAME_MAX = 255


def _answer(ctx: RequestContext, topic: str, index: int, path: str, log_dir: str) -> ErrorCode:
    if len(f"{topic}-{index}") + FUTURE_NAME_EXTRA > DIR_NAME_MAX:
        return ErrorCode.invalid_topic_exception
    if path != log_dir:
        return ErrorCode.log_dir_not_found
    meta = ctx.state.topics.get(topic)
    if meta is None or meta.view_of is not None:
        return ErrorCode.unknown_topic_or_partition
    if (topic, index) in ctx.state.partitions:
        return OK  # already in the one log dir
    if (topic, index) in ctx.cluster.assignments:
        return ErrorCode.replica_not_available
    return ErrorCode.unknown_topic_or_partition


async def handle(ctx: RequestContext, request: Any) -> Any:
    wanted: dict[tuple[str, int], str] = {}  # the last dir named for a partition wins
    for d in request.dirs:
        for t in d.topics:
            for p in t.partitions:
                wanted.pop((t.name, int(p)), None)
                wanted[(t.name, int(p))] = d.path
    allowed = _authz.cluster(ctx, _authz.Op.ALTER)
    log_dir = os.path.abspath(ctx.state.data_dir)
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), path in wanted.items():
        code = (_answer(ctx, topic, index, path, log_dir) if allowed
                else ErrorCode.cluster_authorization_failed)
        by_topic.setdefault(topic, []).append(ctx.build(
            "AlterReplicaLogDirPartitionResult", partition_index=index, error_code=code))
    results = tuple(ctx.build("AlterReplicaLogDirTopicResult", topic_name=name,
                              partitions=tuple(parts)) for name, parts in by_topic.items())
    return ctx.response(throttle_time=NO_THROTTLE, results=results)
