"""Admin operations on Raft groups, carried out where they can be.

Theory of operation
-------------------
Admin APIs that act on a Raft group the broker a client asked need not
hold: ElectLeaders (a preferred-leader election, KIP-460), DescribeQuorum
(the metadata quorum's replication state, KIP-595/KIP-853) and
AddRaftVoter / RemoveRaftVoter (KIP-853).

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

* **Metadata quorum voters.** ``change_voter`` asks the metadata leader for
  one Raft membership change (``Raft.add_voter`` / ``remove_voter``: one at a
  time; a new voter must have caught up as an observer — a broker-only node
  is one) and answers once it is committed; refusals that may pass (not
  caught up, a change pending) are retried until the request's timeout, the
  others are KIP-853's errors (DUPLICATE_VOTER, VOTER_NOT_FOUND; the last
  voter INVALID_REQUEST). The voter set lives in the metadata log, so a
  restart keeps it whatever ``controller.quorum.voters`` says.

Every broker serves them for its peers (``_serve``). Replies travel as
``AdminCallReply`` through ``PeerCalls``; a lost one is a timeout.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio
from kio.schema.errors import ErrorCode

from kcompat.broker.replication import codec
from kcompat.broker.replication.storage import now_ms
from kcompat.raft import NO_NODE, ChangeRefused, Refusal

if TYPE_CHECKING:
    from kcompat.broker.replication.peer_calls import PeerCalls
    from kcompat.broker.replication.runtime import ClusterRuntime

log = logging.getLogger("kcompat.cluster")

TRANSFER, STATUS, VOTER, MOVING = ("transfer_leader", "quorum_status", "change_voter",
                                   "reassignments")
#: Raft's refusals of a voter change that are final, as KIP-853's errors (Kafka
#: 4.4's codes and wording, less its directory ids: removing the last voter is
#: VOTER_NOT_FOUND as removing a node that is none); the others (not caught up,
#: a change pending, nothing of the term committed yet) are retried until the
#: request's timeout
FINAL_REFUSALS = {
    Refusal.ALREADY_VOTER: (ErrorCode.duplicate_voter, "The voter id for {node} is already "
                            "part of the set of voters {voters}."),
    Refusal.NOT_A_VOTER: (ErrorCode.voter_not_found, "Cannot remove voter {node} from the set "
                          "of voters {voters}"),
    Refusal.LAST_VOTER: (ErrorCode.voter_not_found, "Cannot remove voter {node} from the set "
                         "of voters {voters}"),
}


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
        for node in sorted(st.voters):
            if node == rt.node_id:
                voters.append([node, st.log_end, now, now])
                continue
            idle = st.idle_ticks.get(node)
            fetched = now - idle * tick_ms if idle is not None else -1
            voters.append([node, st.match_ends.get(node, -1), fetched,
                           self.caught_up_ms.get(node, -1)])
        observers = []  # broker-only nodes following the metadata log
        for node in sorted(set(st.match_ends) - st.voters):
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

    # -- partition reassignments in progress (ListPartitionReassignments) -------------

    async def reassignments(self, timeout_s: float) -> dict[
            tuple[str, int], tuple[list[int], list[int], list[int]]] | None:
        """(target, original, leaving) of every reassignment in progress as the
        controller knows it — it has applied every change it acknowledged, so
        a reassignment a client just started through any broker is listed
        (this broker's image may lag a moment); None without a controller."""
        deadline = trio.current_time() + timeout_s
        while True:
            left = max(0.0, deadline - trio.current_time())
            code, found = await self._ask_controller(MOVING, {}, left)
            if code == ErrorCode.none and found is not None:
                return {(str(row[0]), int(row[1])): (list(row[2]), list(row[3]), list(row[4]))
                        for row in found["moving"]}
            if left <= self.rt.tick_s:
                return None
            await trio.sleep(self.rt.tick_s)

    def _moving(self) -> tuple[ErrorCode, dict[str, Any] | None]:
        if not self.rt.is_controller:
            return ErrorCode.not_leader_or_follower, None
        return ErrorCode.none, {"moving": [
            [name, index, list(r.target), list(r.original), list(r.leaving)]
            for (name, index), r in self.rt.image.reassignments.items()]}

    # -- metadata quorum voters (KIP-853) ----------------------------------------------

    async def change_voter(self, node: int, add: bool, timeout_s: float,
                           committed: bool = True) -> tuple[ErrorCode, str | None]:
        """AddRaftVoter / RemoveRaftVoter: at the metadata leader — here, or
        asked again while it moves — one voter change of the metadata quorum,
        answered once it is committed (``committed``, AddRaftVoter v1's
        AckWhenCommitted; else once the leader wrote it)."""
        rt = self.rt
        deadline = trio.current_time() + timeout_s
        args = {"node": node, "add": add, "committed": committed}
        while True:
            left = max(0.0, deadline - trio.current_time())
            code, found = await self._ask_controller(VOTER, args, left)
            if code != ErrorCode.not_leader_or_follower or left <= rt.tick_s:
                break
            await trio.sleep(rt.tick_s)
        return code, (found or {}).get("message")

    async def _ask_controller(self, op: str, args: dict[str, Any], timeout_s: float
                              ) -> tuple[ErrorCode, dict[str, Any] | None]:
        """``_call`` at the metadata leader, given up (NOT_LEADER_OR_FOLLOWER:
        ask again) as soon as that leader is replaced or goes silent."""
        rt = self.rt
        leader = rt.controller_id
        out: tuple[ErrorCode, dict[str, Any] | None] = (ErrorCode.not_leader_or_follower, None)
        if leader == NO_NODE:
            return out
        async with trio.open_nursery() as nursery:
            async def ask() -> None:
                nonlocal out
                out = await self._call(leader, op, args, timeout_s)
                nursery.cancel_scope.cancel()

            async def watch() -> None:
                while rt.controller_id == leader and leader not in rt.down:
                    await trio.sleep(rt.tick_s)
                nursery.cancel_scope.cancel()

            nursery.start_soon(ask)
            nursery.start_soon(watch)
        return out

    async def _change_voter(self, args: dict[str, Any], timeout_s: float
                            ) -> tuple[ErrorCode, dict[str, Any] | None]:
        rt, node, add = self.rt, int(args["node"]), bool(args["add"])
        meta = rt.meta
        with trio.move_on_after(timeout_s):
            while True:
                if not meta.is_leader:
                    return ErrorCode.not_leader_or_follower, None
                result = rt.change_voters(meta, add=node) if add else rt.change_voters(
                    meta, remove=node)
                if not isinstance(result, ChangeRefused):
                    break
                if result.reason in FINAL_REFUSALS:
                    code, text = FINAL_REFUSALS[result.reason]
                    voters = sorted(meta.raft.voters)
                    return code, {"message": text.format(node=node, voters=voters)}
                await trio.sleep(rt.tick_s)  # not caught up, or a change pending
            log.info("node %d %s voter %d of the metadata quorum (KIP-853)", rt.node_id,
                     "adds" if add else "removes", node)
            while args.get("committed", True) and meta.hw <= result.index:
                if meta.raft.term != result.term:
                    return ErrorCode.not_leader_or_follower, None
                await meta.changed.wait()
            return ErrorCode.none, None
        return ErrorCode.request_timed_out, {
            "message": f"The voter change of node {node} did not complete within "
                       f"{timeout_s:g} s (a new voter must first catch up as an observer)"}

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
        if op == VOTER:
            return await self._change_voter(args, timeout_s)
        if op == MOVING:
            return self._moving()
        if op == STATUS:
            result = self.status()
            code = ErrorCode.none if result is not None else ErrorCode.not_leader_or_follower
            return code, result
        return ErrorCode.invalid_request, None

    async def _serve(self, src: int, req: codec.AdminCallRequest) -> None:
        code, result = await self._local(req.op, req.args, timeout_s=10.0)
        self.rt.send_internal(src, codec.AdminCallReply(req.request_id, int(code), result))
