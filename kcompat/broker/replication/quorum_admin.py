"""Admin operations on Raft groups, carried out where they can be.

Theory of operation
-------------------
Two admin APIs act on a Raft group that the broker a client asked need not
hold: ElectLeaders (a preferred-leader election, KIP-460) and DescribeQuorum
(the metadata quorum's replication state, KIP-595/KIP-853).

* **Preferred leader.** Only a partition's current leader can hand its
  leadership over, with the Raft leadership transfer (``Raft.
  transfer_leadership``: it stops proposals, waits until the target's log
  matches, sends TimeoutNow; the target campaigns at once). ``elect_preferred``
  asks the leader — itself, or a peer through an ``AdminCallRequest``; asked
  again a tick later if the broker it asked no longer leads — and returns once
  the leader has stepped down in favour of the target, then waits until this
  broker has heard of the new leader too (announcements), so a client that
  asks it for Metadata next sees the election's result. A target
  outside the in-sync replicas cannot be elected (Raft elects only an
  up-to-date log): PREFERRED_LEADER_NOT_AVAILABLE.
* **Quorum status.** Only the metadata leader knows each voter's log end and
  when it last fetched (``Raft.status``); ``quorum_status`` asks it the same
  way. The leader keeps, on every tick, the wall-clock time at which each
  voter was last caught up to the high watermark (Kafka's
  ``lastCaughtUpTimestamp``).

Every broker serves both for its peers (``_serve``). Replies travel as
``AdminCallReply`` through ``PeerCalls``; a lost one is a timeout.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio
from kio.schema.errors import ErrorCode

from kcompat.broker.replication import codec
from kcompat.broker.replication.storage import now_ms
from kcompat.raft import NO_NODE

if TYPE_CHECKING:
    from kcompat.broker.replication.peer_calls import PeerCalls
    from kcompat.broker.replication.runtime import ClusterRuntime

log = logging.getLogger("kcompat.cluster")

TRANSFER, STATUS = "transfer_leader", "quorum_status"


class QuorumAdmin:
    def __init__(self, rt: ClusterRuntime, calls: PeerCalls) -> None:
        self.rt = rt
        self.calls = calls
        self.caught_up_ms: dict[int, int] = {}  # metadata leader: voter -> last caught up
        rt.inbound[codec.AdminCallRequest] = lambda src, m: rt.spawn(self._serve, src, m)
        rt.tick_hooks.append(self._tick)

    # -- preferred leader election ------------------------------------------------------

    async def elect_preferred(self, topic: str, index: int, target: int,
                              timeout_s: float) -> ErrorCode:
        """Move ``topic``-``index``'s leadership to ``target`` (its preferred
        replica) and wait until this broker knows it; Kafka's error otherwise."""
        rt = self.rt
        deadline = trio.current_time() + timeout_s
        args = {"topic": topic, "index": index, "target": target}
        while True:  # this broker's view of the leader may be a moment old
            leader = rt.partition_view(topic, index)[0]
            if leader == target:
                return ErrorCode.none
            left = deadline - trio.current_time()
            code, _ = await self._call(leader, TRANSFER, args, max(left, 0.0))
            if code != ErrorCode.not_leader_or_follower or left <= rt.tick_s:
                break
            await trio.sleep(rt.tick_s)
        if code != ErrorCode.none:
            return code
        with trio.move_on_at(deadline):
            while rt.partition_view(topic, index)[0] != target:
                await trio.sleep(rt.tick_s)
            return ErrorCode.none
        return ErrorCode.request_timed_out

    async def _transfer(self, args: dict[str, Any], timeout_s: float) -> ErrorCode:
        """At the partition's leader: hand the leadership to ``target``."""
        rt = self.rt
        group = rt.group_of(str(args["topic"]), int(args["index"]))
        target = int(args["target"])
        if group is None or group.removed or not group.is_leader:
            return ErrorCode.not_leader_or_follower
        if target not in rt.isr(group) or not rt.transfer_leadership(group, target):
            return ErrorCode.preferred_leader_not_available
        log.info("node %d hands %s to preferred leader %d (ElectLeaders)", rt.node_id,
                 group.name, target)
        rt.kick()
        with trio.move_on_after(timeout_s):
            while not (group.raft.leader == target and not group.is_leader):
                if group.removed:
                    return ErrorCode.unknown_topic_or_partition
                await group.changed.wait()
            return ErrorCode.none
        return ErrorCode.request_timed_out

    # -- metadata quorum status -------------------------------------------------------

    async def quorum_status(self, timeout_s: float) -> tuple[ErrorCode, dict[str, Any] | None]:
        """The metadata quorum as its leader sees it (``status``)."""
        return await self._call(self.rt.controller_id, STATUS, {}, timeout_s)

    def status(self) -> dict[str, Any] | None:
        """At the metadata leader: leader, epoch, high watermark, and per voter
        and per observer (id, log end offset, last fetch ms, last caught-up
        ms); None elsewhere."""
        rt = self.rt
        meta = rt.meta
        if not meta.is_leader:
            return None
        st = meta.raft.status()
        now = now_ms()
        tick_ms = int(rt.tick_s * 1000)
        voters = []
        for node in sorted(rt.voters):
            if node == rt.node_id:
                voters.append([node, st.log_end, now, now])
                continue
            idle = st.idle_ticks.get(node)
            fetched = now - idle * tick_ms if idle is not None else -1
            voters.append([node, st.match_ends.get(node, -1), fetched,
                           self.caught_up_ms.get(node, -1)])
        observers = []  # broker-only nodes following the metadata log
        for node in sorted(set(st.match_ends) - set(rt.voters)):
            idle = st.idle_ticks.get(node)
            observers.append([node, st.match_ends[node],
                              now - idle * tick_ms if idle is not None else -1,
                              self.caught_up_ms.get(node, -1)])
        return {"leader": rt.node_id, "epoch": st.term, "high_watermark": meta.hw,
                "voters": voters, "observers": observers}

    def _tick(self, _ticks: int) -> None:
        meta = self.rt.meta
        if not meta.is_leader:
            if self.caught_up_ms:
                self.caught_up_ms.clear()
            return
        st = meta.raft.status()
        now = now_ms()
        for node, end in st.match_ends.items():
            if end >= st.high_watermark:
                self.caught_up_ms[node] = now

    # -- calls --------------------------------------------------------------------------

    async def _call(self, node: int, op: str, args: dict[str, Any],
                    timeout_s: float) -> tuple[ErrorCode, dict[str, Any] | None]:
        rt = self.rt
        if node == rt.node_id:
            return await self._local(op, args, timeout_s)
        if node == NO_NODE or node not in rt.peers:
            return ErrorCode.not_leader_or_follower, None
        slot = await self.calls.call(node, lambda rid: codec.AdminCallRequest(rid, op, args),
                                     timeout_s)
        return slot[1], (slot[2] if len(slot) > 2 else None)

    async def _local(self, op: str, args: dict[str, Any], timeout_s: float
                     ) -> tuple[ErrorCode, dict[str, Any] | None]:
        if op == TRANSFER:
            return await self._transfer(args, timeout_s), None
        if op == STATUS:
            result = self.status()
            code = ErrorCode.none if result is not None else ErrorCode.not_leader_or_follower
            return code, result
        return ErrorCode.invalid_request, None

    async def _serve(self, src: int, req: codec.AdminCallRequest) -> None:
        code, result = await self._local(req.op, req.args, timeout_s=10.0)
        self.rt.send_internal(src, codec.AdminCallReply(req.request_id, int(code), result))
