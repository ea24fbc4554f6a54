"""REST v3: consumer groups, their consumers and their lag.

As Kafka's admin client gathers them: ListGroups from every broker (each
lists the groups it coordinates), FindCoordinator for a group, then
DescribeGroups (classic groups) or ConsumerGroupDescribe (KIP-848 groups)
and OffsetFetch at its coordinator, and ListOffsets (latest) at the
partitions' leaders for the lag: ``log_end_offset - current_offset`` per
partition with a committed offset, attributed to the member assigned the
partition (empty ids when none is).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import trio
from kio.schema.errors import ErrorCode
from starlette.responses import JSONResponse, Response

from kcompat.broker.http import calls
from kcompat.broker.http.rest import Ctx, RestError, check, kafka_error
from kcompat.broker.http.rest_admin import metadata
from kcompat.group.consumer_protocol import decode_assignment
from kcompat.wire import codec
from kcompat.wire import versions as v

GROUP_KEY = 0  # FindCoordinator key type
DESCRIBE_AT_ONCE = 16  # groups described side by side for a list
_CLASSIC_STATES = {"preparingrebalance": "PREPARING_REBALANCE",
                   "completingrebalance": "COMPLETING_REBALANCE", "stable": "STABLE",
                   "dead": "DEAD", "empty": "EMPTY"}
_CONSUMER_STATES = {"empty": "EMPTY", "assigning": "PREPARING_REBALANCE",
                    "reconciling": "COMPLETING_REBALANCE", "stable": "STABLE", "dead": "DEAD"}


@dataclass
class _Member:
    consumer_id: str
    instance_id: str | None
    client_id: str
    assigned: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class _Group:
    group_id: str
    state: str
    assignor: str
    is_simple: bool
    coordinator: int
    members: list[_Member]


async def brokers(c: Ctx) -> list[int]:
    answer = await c.call(v.DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=False)
    check(answer.error_code, answer.error_message)
    return sorted(b.broker_id for b in answer.brokers)


async def every_broker(c: Ctx, name: str, args: dict[str, Any]) -> list[tuple[int, Any]]:
    """(broker, its answer) to query ``name`` (``queries``) from every broker."""
    found: list[tuple[int, Any]] = []

    async def ask(node: int) -> None:
        try:
            found.append((node, await calls.query(c.broker, c.caller, node, name, args)))
        except calls.CallFailed as e:
            raise kafka_error(e.code, str(e)) from None

    async with trio.open_nursery() as nursery:
        for node in await brokers(c):
            nursery.start_soon(ask, node)
    return found


async def _listed(c: Ctx) -> list[Any]:
    """Every classic and consumer group of the cluster (ListGroups at each broker)."""
    found: list[Any] = []

    async def ask(node: int) -> None:
        answer = await c.call(v.LIST_GROUPS, 5, node, states_filter=(),
                              types_filter=("classic", "consumer"))
        check(answer.error_code, None)
        found.extend(answer.groups)

    async with trio.open_nursery() as nursery:
        for node in await brokers(c):
            nursery.start_soon(ask, node)
    return sorted({g.group_id: g for g in found}.values(), key=lambda g: g.group_id)


async def coordinator(c: Ctx, group: str) -> int:
    answer = await c.call(v.FIND_COORDINATOR, 4, key_type=GROUP_KEY, coordinator_keys=(group,))
    found = answer.coordinators[0]
    check(found.error_code, found.error_message, group)
    return int(found.node_id)


async def _describe(c: Ctx, group: str) -> _Group:
    node = await coordinator(c, group)
    classic = (await c.call(v.DESCRIBE_GROUPS, 5, node, groups=(group,),
                            include_authorized_operations=False)).groups[0]
    check(classic.error_code, None, group)
    if classic.group_state.lower() != "dead":
        members = []
        for m in classic.members:
            assigned = decode_assignment(m.member_assignment) or ()
            members.append(_Member(m.member_id, m.group_instance_id, m.client_id,
                                   [(t, p) for t, ps in assigned for p in ps]))
        return _Group(group, _CLASSIC_STATES.get(classic.group_state.lower(), "UNKNOWN"),
                      classic.protocol_data, not classic.members and not classic.protocol_type,
                      node, members)
    answer = await c.call(v.CONSUMER_GROUP_DESCRIBE, 0, node, group_ids=(group,),
                          include_authorized_operations=False)
    described = answer.groups[0]
    if described.error_code == ErrorCode.group_id_not_found:
        if await _offsets(c, group, node):  # committed offsets alone: a simple group
            return _Group(group, "EMPTY", "", True, node, [])
        raise RestError(404, f"Consumer group {group} cannot be found.")
    check(described.error_code, described.error_message, group)
    members = [_Member(m.member_id, m.instance_id, m.client_id,
                       [(t.topic_name, p) for t in m.assignment.topic_partitions
                        for p in t.partitions]) for m in described.members]
    return _Group(group, _CONSUMER_STATES.get(described.group_state.lower(), "UNKNOWN"),
                  described.assignor_name, False, node, members)


async def _offsets(c: Ctx, group: str, node: int) -> dict[tuple[str, int], int]:
    mod = codec.request_module(v.OFFSET_FETCH, 8)
    answer = await c.call(v.OFFSET_FETCH, 8, node, groups=(mod.OffsetFetchRequestGroup(
        group_id=group, topics=None),), require_stable=False)
    fetched = answer.groups[0]
    check(fetched.error_code, None, group)
    return {(t.name, p.partition_index): p.committed_offset for t in fetched.topics
            for p in t.partitions if p.error_code == 0 and p.committed_offset >= 0}


async def _ends(c: Ctx, partitions: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The log end offsets (ListOffsets latest) of ``partitions``, asked of their leaders."""
    topics = sorted({t for t, _ in partitions})
    md = await metadata(c, topics)
    by_leader: dict[int, dict[str, list[int]]] = {}
    for t in md.topics:
        for p in t.partitions:
            if (t.name, p.partition_index) in partitions and p.leader_id >= 0:
                by_leader.setdefault(p.leader_id, {}).setdefault(t.name, []).append(
                    p.partition_index)
    mod = codec.request_module(v.LIST_OFFSETS, 7)
    ends: dict[tuple[str, int], int] = {}

    async def ask(leader: int, wanted: dict[str, list[int]]) -> None:
        request_topics = tuple(mod.ListOffsetsTopic(name=t, partitions=tuple(
            mod.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1, timestamp=-1)
            for p in ps)) for t, ps in wanted.items())
        answer = await c.call(v.LIST_OFFSETS, 7, leader, replica_id=-1, isolation_level=0,
                              topics=request_topics)
        for t in answer.topics:
            for p in t.partitions:
                if p.error_code == 0:
                    ends[(t.name, p.partition_index)] = p.offset

    async with trio.open_nursery() as nursery:
        for leader, wanted in by_leader.items():
            nursery.start_soon(ask, leader, wanted)
    return ends


@dataclass
class _Lag:
    topic: str
    partition: int
    current: int
    end: int
    member: _Member | None

    @property
    def lag(self) -> int:
        return max(0, self.end - self.current)


async def _lags(c: Ctx, g: _Group) -> list[_Lag]:
    committed = await _offsets(c, g.group_id, g.coordinator)
    ends = await _ends(c, set(committed))
    owner = {tp: m for m in g.members for tp in m.assigned}
    return [_Lag(t, p, offset, ends.get((t, p), offset), owner.get((t, p)))
            for (t, p), offset in sorted(committed.items())]


# -- shapes ---------------------------------------------------------------------------------


def _group(c: Ctx, g: _Group) -> dict[str, Any]:
    base = ("consumer-groups", g.group_id)
    return c.resource("KafkaConsumerGroup", c.url(*base),
                      c.crn(("consumer-group", g.group_id)), cluster_id=c.cluster_id,
                      consumer_group_id=g.group_id, is_simple=g.is_simple,
                      partition_assignor=g.assignor, state=g.state,
                      coordinator=c.related("brokers", g.coordinator),
                      consumers=c.related(*base, "consumers"),
                      lag_summary=c.related(*base, "lag-summary"))


def _consumer(c: Ctx, g: _Group, m: _Member) -> dict[str, Any]:
    base = ("consumer-groups", g.group_id, "consumers", m.consumer_id)
    return c.resource("KafkaConsumer", c.url(*base),
                      c.crn(("consumer-group", g.group_id), ("consumer", m.consumer_id)),
                      cluster_id=c.cluster_id, consumer_group_id=g.group_id,
                      consumer_id=m.consumer_id, instance_id=m.instance_id,
                      client_id=m.client_id, assignments=c.related(*base, "assignments"))


def _lag(c: Ctx, g: _Group, lag: _Lag) -> dict[str, Any]:
    m = lag.member
    return c.resource(
        "KafkaConsumerLag",
        c.url("consumer-groups", g.group_id, "lags", lag.topic, "partitions", lag.partition),
        c.crn(("consumer-group", g.group_id), ("lag", lag.topic), ("partition", lag.partition)),
        cluster_id=c.cluster_id, consumer_group_id=g.group_id, topic_name=lag.topic,
        partition_id=lag.partition, current_offset=lag.current, log_end_offset=lag.end,
        lag=lag.lag, consumer_id=m.consumer_id if m else "",
        instance_id=m.instance_id if m else None, client_id=m.client_id if m else "")


# -- endpoints ------------------------------------------------------------------------------


async def each_group(c: Ctx, ids: list[str], describe: Any) -> list[Any]:
    """``describe(c, id)`` of every group, ``DESCRIBE_AT_ONCE`` at a time, in
    ``ids``' order; a group gone since it was listed (404) is left out."""
    found: dict[str, Any] = {}
    limit = trio.CapacityLimiter(DESCRIBE_AT_ONCE)

    async def one(group_id: str) -> None:
        async with limit:
            try:
                found[group_id] = await describe(c, group_id)
            except RestError as e:
                if e.status != 404:  # gone between the listing and its description
                    raise

    async with trio.open_nursery() as nursery:
        for group_id in ids:
            nursery.start_soon(one, group_id)
    return [found[g] for g in ids if g in found]


async def list_groups(c: Ctx) -> Response:
    ids = [g.group_id for g in await _listed(c)]
    return c.listing("KafkaConsumerGroupList",
                     [_group(c, g) for g in await each_group(c, ids, _describe)])


async def get_group(c: Ctx) -> Response:
    return JSONResponse(_group(c, await _describe(c, c.param("consumer_group_id"))))


async def list_consumers(c: Ctx) -> Response:
    g = await _describe(c, c.param("consumer_group_id"))
    return c.listing("KafkaConsumerList", [_consumer(c, g, m) for m in
                                           sorted(g.members, key=lambda m: m.consumer_id)])


async def get_consumer(c: Ctx) -> Response:
    g = await _describe(c, c.param("consumer_group_id"))
    wanted = c.param("consumer_id")
    for m in g.members:
        if m.consumer_id == wanted:
            return JSONResponse(_consumer(c, g, m))
    raise RestError(404, f"Consumer {wanted} cannot be found in group {g.group_id}.")


async def list_lags(c: Ctx) -> Response:
    g = await _describe(c, c.param("consumer_group_id"))
    return c.listing("KafkaConsumerLagList", [_lag(c, g, lag) for lag in await _lags(c, g)])


async def get_lag(c: Ctx) -> Response:
    g = await _describe(c, c.param("consumer_group_id"))
    key = (c.param("topic_name"), c.int_param("partition_id"))
    for lag in await _lags(c, g):
        if (lag.topic, lag.partition) == key:
            return JSONResponse(_lag(c, g, lag))
    raise RestError(404, f"Consumer group {g.group_id} has no offset for {key[0]}-{key[1]}.")


async def lag_summary(c: Ctx) -> Response:
    g = await _describe(c, c.param("consumer_group_id"))
    lags = await _lags(c, g)
    if not lags:
        raise RestError(404, f"Consumer group {g.group_id} has no committed offset.")
    top = max(lags, key=lambda lag: (lag.lag, lag.topic, -lag.partition))
    m = top.member
    consumer_id = m.consumer_id if m else ""
    return JSONResponse(c.resource(
        "KafkaConsumerGroupLagSummary", c.url("consumer-groups", g.group_id, "lag-summary"),
        c.crn(("consumer-group", g.group_id)) + "/lag-summary",
        cluster_id=c.cluster_id, consumer_group_id=g.group_id,
        max_lag_consumer_id=consumer_id, max_lag_instance_id=m.instance_id if m else None,
        max_lag_client_id=m.client_id if m else "", max_lag_topic_name=top.topic,
        max_lag_partition_id=top.partition, max_lag=top.lag,
        total_lag=sum(lag.lag for lag in lags),
        max_lag_consumer=c.related("consumer-groups", g.group_id, "consumers", consumer_id),
        max_lag_partition=c.related("topics", top.topic, "partitions", top.partition)))


def routes() -> list[tuple[str, Any, str]]:
    g = "/clusters/{cluster_id}/consumer-groups"
    one = g + "/{consumer_group_id}"
    return [(g, list_groups, "GET"), (one, get_group, "GET"),
            (one + "/consumers", list_consumers, "GET"),
            # a member id may hold "/" (standard base64 of a client-made KIP-848 id)
            (one + "/consumers/{consumer_id:path}", get_consumer, "GET"),
            (one + "/lags", list_lags, "GET"),
            (one + "/lags/{topic_name}/partitions/{partition_id}", get_lag, "GET"),
            (one + "/lag-summary", lag_summary, "GET")]


