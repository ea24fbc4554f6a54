"""kcompat over HTTP: share groups (KIP-932) and their records in flight.

REST Proxy has no share groups; the shapes follow its conventions. A group
is what Kafka's admin client gathers — ListGroups (type ``share``) from every
broker, ShareGroupDescribe at its coordinator — plus what no Kafka request
tells: each share-partition's start offset, its records per state and its
first runs in flight with their delivery counts, asked of every broker (a
share-partition lives at its data partition's leader; ``queries.shares``).

* ``GET /v3/clusters/{c}/share-groups`` — the share groups, their state and
  member count;
* ``GET /v3/clusters/{c}/share-groups/{g}[?limit=N]`` — members and their
  assignments, and per share-partition ``start_offset``, ``counts``
  (available, acquired, acknowledged, archived) and ``in_flight`` runs
  (``first_offset``, ``last_offset``, ``state``, ``delivery_count``,
  ``member_id``, ``lock_deadline_ms``), at most N runs each (default 100).
"""

from __future__ import annotations

from typing import Any

import trio
from kio.schema.errors import ErrorCode
from starlette.responses import JSONResponse, Response

from kcompat.broker.http.rest import Ctx, RestError, check
from kcompat.broker.http.rest_admin import metadata
from kcompat.broker.http.rest_groups import brokers, coordinator, each_group, every_broker
from kcompat.wire import versions as v


async def _describe(c: Ctx, group: str) -> tuple[Any, int]:
    node = await coordinator(c, group)
    answer = await c.call(v.SHARE_GROUP_DESCRIBE, 1, node, group_ids=(group,),
                          include_authorized_operations=False)
    described = answer.groups[0]
    if described.error_code == ErrorCode.group_id_not_found:
        raise RestError(404, f"Share group {group} cannot be found.")
    check(described.error_code, described.error_message, group)
    return described, node


async def list_share_groups(c: Ctx) -> Response:
    listed: dict[str, Any] = {}

    async def ask(node: int) -> None:
        answer = await c.call(v.LIST_GROUPS, 5, node, states_filter=(), types_filter=("share",))
        check(answer.error_code, None)
        for g in answer.groups:
            listed[g.group_id] = g

    async with trio.open_nursery() as nursery:
        for node in await brokers(c):
            nursery.start_soon(ask, node)
    data = [{"kind": "KcompatShareGroup", "group_id": described.group_id,
             "state": described.group_state.upper(), "members": len(described.members),
             "coordinator": node}
            for described, node in await each_group(c, sorted(listed), _describe)]
    return c.listing("KcompatShareGroupList", data)


async def get_share_group(c: Ctx) -> Response:
    group = c.param("group_id")
    limit = c.query_int("limit", 100)
    if limit is None or not 1 <= limit <= 500:
        raise RestError(400, f"limit must be 1 to 500, not {limit}")
    described, node = await _describe(c, group)
    members = [{"member_id": m.member_id, "client_id": m.client_id,
                "client_host": m.client_host,
                "assignments": [{"topic_name": t.topic_name, "partition_id": p}
                                for t in m.assignment.topic_partitions
                                for p in sorted(t.partitions)]}
               for m in sorted(described.members, key=lambda m: m.member_id)]
    visible = {t.name for t in (await metadata(c, None)).topics if t.error_code == 0}
    partitions = []
    for broker_id, answer in await every_broker(c, "shares", {"group": group,
                                                              "limit": limit}):
        # as the group's offsets: only the topics the caller may describe
        partitions += [{**part, "broker_id": broker_id} for part in answer
                       if part["topic_name"] in visible]
    partitions.sort(key=lambda p: (p["topic_name"], p["partition_id"]))
    for part in partitions:
        part.pop("group_id", None)
    return JSONResponse({"kind": "KcompatShareGroup",
                         "metadata": {"self": str(c.request.url)},
                         "cluster_id": c.cluster_id, "group_id": group,
                         "state": described.group_state.upper(), "coordinator": node,
                         "members": members, "partitions": partitions})


def routes() -> list[tuple[str, Any, str]]:
    g = "/clusters/{cluster_id}/share-groups"
    return [(g, list_share_groups, "GET"), (g + "/{group_id}", get_share_group, "GET")]
