"""kcompat over HTTP: the cluster at a glance, in one request.

``GET /v3/clusters/{c}/overview`` — what the console's first page shows,
gathered in one go so it costs the same few requests with 10 or 10,000 topics:
one Metadata (every topic the caller may see, its partitions' leaders,
replicas and in-sync replicas), DescribeCluster (the brokers), DescribeQuorum
(the metadata quorum: its leader, voters and observers with how far each
has caught up) and ListPartitionReassignments (moves in progress). Per
broker: partitions led and replicas held; for the cluster: topics,
partitions, under-replicated and offline partitions. A part the caller may
not see (DescribeQuorum needs DESCRIBE on the cluster) is null with the
reason, not an error for the whole page.
"""

from __future__ import annotations

import datetime
from typing import Any

from starlette.responses import JSONResponse, Response

from kcompat.broker.http.rest import Ctx, RestError, check
from kcompat.broker.http.rest_admin import metadata
from kcompat.wire import codec
from kcompat.wire import versions as v

METADATA_TOPIC = "__cluster_metadata"


async def _quorum(c: Ctx) -> dict[str, Any]:
    mod = codec.request_module(v.DESCRIBE_QUORUM, 2)
    answer = await c.call(v.DESCRIBE_QUORUM, 2, topics=(mod.TopicData(
        topic_name=METADATA_TOPIC, partitions=(mod.PartitionData(partition_index=0),)),))
    check(answer.error_code, answer.error_message)
    part = answer.topics[0].partitions[0]
    check(part.error_code, part.error_message)

    def replica(r: Any) -> dict[str, Any]:
        return {"node_id": r.replica_id, "log_end_offset": r.log_end_offset,
                "lag": max(0, part.high_watermark - r.log_end_offset),
                "last_caught_up_ms": r.last_caught_up_timestamp}

    return {"leader_id": part.leader_id, "leader_epoch": part.leader_epoch,
            "high_watermark": part.high_watermark,
            "voters": [replica(r) for r in part.current_voters],
            "observers": [replica(r) for r in part.observers]}


async def _reassignments(c: Ctx) -> list[dict[str, Any]]:
    answer = await c.call(v.LIST_PARTITION_REASSIGNMENTS, 0,
                          timeout=datetime.timedelta(seconds=10), topics=None)
    check(answer.error_code, answer.error_message)
    return [{"topic_name": t.name, "partition_id": p.partition_index,
             "replicas": list(p.replicas), "adding_replicas": list(p.adding_replicas),
             "removing_replicas": list(p.removing_replicas)}
            for t in answer.topics for p in t.partitions]


async def overview(c: Ctx) -> Response:
    cluster = await c.call(v.DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=False)
    check(cluster.error_code, cluster.error_message)
    md = await metadata(c, None)
    led: dict[int, int] = {}
    held: dict[int, int] = {}
    partitions = under = offline = internal = 0
    topics = [t for t in md.topics if t.error_code == 0]
    for t in topics:
        internal += bool(t.is_internal)
        for p in t.partitions:
            partitions += 1
            if p.leader_id >= 0:
                led[p.leader_id] = led.get(p.leader_id, 0) + 1
            else:
                offline += 1
            under += len(p.isr_nodes) < len(p.replica_nodes)
            for r in p.replica_nodes:
                held[r] = held.get(r, 0) + 1
    brokers = [{"broker_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack,
                "partitions_led": led.get(b.broker_id, 0),
                "replicas": held.get(b.broker_id, 0)}
               for b in sorted(cluster.brokers, key=lambda b: b.broker_id)]
    parts: dict[str, Any] = {}
    for name, get in (("quorum", _quorum), ("reassignments", _reassignments)):
        try:
            parts[name] = await get(c)
        except RestError as e:
            parts[name] = None
            parts[name + "_unavailable"] = e.message
    return JSONResponse({"kind": "KcompatClusterOverview",
                         "metadata": {"self": str(c.request.url)},
                         "cluster_id": c.cluster_id, "controller_id": cluster.controller_id,
                         "brokers": brokers, "topics": len(topics) - internal,
                         "internal_topics": internal, "partitions": partitions,
                         "under_replicated_partitions": under,
                         "offline_partitions": offline, **parts})


def routes() -> list[tuple[str, Any, str]]:
    return [("/clusters/{cluster_id}/overview", overview, "GET")]
