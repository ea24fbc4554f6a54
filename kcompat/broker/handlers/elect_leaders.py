"""ElectLeaders (key 43), versions 0-2 (KIP-460; v0 is PREFERRED only).

Quirks: a PREFERRED election (0) moves a partition's leadership to the first
replica of its assignment with the Raft leadership transfer at the current
leader (``replication.quorum_admin``), and answers once this broker knows the
new leader: ELECTION_NOT_NEEDED when that replica leads already,
PREFERRED_LEADER_NOT_AVAILABLE when it is not in sync (or the partition has
no leader now: Raft is electing one), REQUEST_TIMED_OUT when the transfer did
not finish within the request's timeout. UNCLEAN (1) is Kafka's answer where a
leader exists (ELECTION_NOT_NEEDED); without one, it is
ELIGIBLE_LEADERS_NOT_AVAILABLE: a Raft partition cannot elect a replica whose
log is behind, and its in-sync replicas elect a leader by themselves once a
majority of them is alive. An unknown topic or partition is
UNKNOWN_TOPIC_OR_PARTITION with Kafka's messages; an unknown election type
INVALID_REQUEST for every partition and at the top level. Null partitions
means every partition of every topic, and then partitions whose election was
not needed are left out of the answer (each topic is still listed), as Kafka
4.4 does. The partitions asked are elected concurrently. Any broker answers
(clients send ElectLeaders to Metadata's ``controller_id``, a random live
broker): like Metadata it first waits until it is serving (caught up, its
leaders learnt), and a partition it sees leaderless gets up to
``LEADER_WAIT_S`` (within the timeout) for its leader to be known before
the answer is decided.
Authorization (Kafka's controller): ALTER on the cluster, else
CLUSTER_AUTHORIZATION_FAILED at the top and for every partition named (Kafka's
message names the request: here the error's own message).
"""

from __future__ import annotations

from typing import Any

import trio
from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, OK, request_timeout_s
from kcompat.broker.host.context import RequestContext

PREFERRED, UNCLEAN = 0, 1
NO_LEADER = -1
TIMEOUT_S_MAX = 30.0
#: how long a partition seen leaderless here may take to show its leader
LEADER_WAIT_S = 2.0
NOT_NEEDED = "Leader election not needed for topic partition."
UNCLEAN_REFUSED = ("No in-sync replica can lead now: a kcompat partition is a Raft group, "
                   "which never elects a replica whose log is behind (its in-sync replicas "
                   "elect a leader once a majority of them is alive)")

Result = tuple[ErrorCode, str | None]


async def _elect(ctx: RequestContext, topic: str, index: int, kind: int,
                 timeout_s: float) -> Result:
    meta = ctx.state.topics.get(topic)
    if meta is None or meta.view_of is not None:
        return ErrorCode.unknown_topic_or_partition, f"No such topic as {topic}"
    if not 0 <= index < meta.partitions or (topic, index) not in ctx.cluster.assignments:
        return ErrorCode.unknown_topic_or_partition, f"No such partition as {topic}-{index}"
    if kind not in (PREFERRED, UNCLEAN):
        return ErrorCode.invalid_request, f"Unknown election type {kind}"
    leader, _epoch, replicas, isr = ctx.cluster.partition_view(topic, index)
    wait_until = trio.current_time() + min(LEADER_WAIT_S, timeout_s)
    while leader == NO_LEADER and trio.current_time() < wait_until:
        await trio.sleep(ctx.cluster.tick_s)  # an election running, or not heard of yet
        leader, _epoch, replicas, isr = ctx.cluster.partition_view(topic, index)
    if kind == UNCLEAN:
        if leader != NO_LEADER:
            return ErrorCode.election_not_needed, NOT_NEEDED
        return ErrorCode.eligible_leaders_not_available, UNCLEAN_REFUSED
    preferred = replicas[0]
    if leader == preferred:
        return ErrorCode.election_not_needed, NOT_NEEDED
    if leader == NO_LEADER or preferred not in isr:
        return (ErrorCode.preferred_leader_not_available,
                f"The preferred leader {preferred} of {topic}-{index} is not in sync.")
    code = await ctx.broker.quorum_admin.elect_preferred(topic, index, preferred, timeout_s)
    if code == ErrorCode.none:
        return OK, None
    return code, f"Electing {preferred} for {topic}-{index} failed: {code.name}"


def _asked(ctx: RequestContext, request: Any) -> tuple[list[tuple[str, list[int]]], bool]:
    """(topic, partitions) to elect, and whether the request named none (all)."""
    if request.topic_partitions is None:
        return [(name, list(range(meta.partitions))) for name, meta in ctx.state.topics.items()
                if meta.view_of is None], True
    return [(t.topic, [int(p) for p in t.partitions]) for t in request.topic_partitions], False


def _denied(ctx: RequestContext, request: Any) -> Any:
    """Kafka's error answer without ALTER on the cluster: every partition named too."""
    code = ErrorCode.cluster_authorization_failed
    results = tuple(ctx.build("ReplicaElectionResult", topic=t.topic, partition_result=tuple(
        ctx.build("PartitionResult", partition_id=i, error_code=code,
                  error_message=_authz.MESSAGES[code]) for i in t.partitions))
        for t in request.topic_partitions or ())
    return ctx.response(throttle_time=NO_THROTTLE, error_code=code,
                        replica_election_results=results)


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not _authz.cluster(ctx, _authz.Op.ALTER):
        return _denied(ctx, request)
    kind = int(getattr(request, "election_type", PREFERRED))
    timeout_s = request_timeout_s(request, 0.1, TIMEOUT_S_MAX)
    await ctx.controller.lifecycle.wait_serving(timeout_s=min(5.0, timeout_s))
    asked, everything = _asked(ctx, request)
    results: dict[tuple[int, int], Result] = {}

    async def one(slot: tuple[int, int], topic: str, index: int) -> None:
        results[slot] = await _elect(ctx, topic, index, kind, timeout_s)

    async with trio.open_nursery() as nursery:
        for ti, (topic, partitions) in enumerate(asked):
            for pi, index in enumerate(partitions):
                nursery.start_soon(one, (ti, pi), topic, index)
    out = []
    for ti, (topic, partitions) in enumerate(asked):
        parts = []
        for pi, index in enumerate(partitions):
            code, message = results[(ti, pi)]
            if everything and code == ErrorCode.election_not_needed:
                continue
            parts.append(ctx.build("PartitionResult", partition_id=index, error_code=code,
                                   error_message=message))
        out.append(ctx.build("ReplicaElectionResult", topic=topic, partition_result=tuple(parts)))
    top = ErrorCode.invalid_request if kind not in (PREFERRED, UNCLEAN) else OK
    return ctx.response(throttle_time=NO_THROTTLE, error_code=top,
                        replica_election_results=tuple(out))
