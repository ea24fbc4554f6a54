"""The seeded Raft simulator with quiescent groups and the runtime's liveness.

Theory of operation
-------------------
``simulator`` runs Raft cores that always tick. Here every core has
``RaftConfig.quiesce`` on and each node models what the replication runtime
(``kcompat.broker.replication.runtime``) adds around it:

* frames: every message travels in a ``Frame`` stamped with the sender's
  *incarnation* (a new one per restart); a node that sent nothing to a peer
  for ``heartbeat_ticks`` sends it an empty frame (the pair heartbeat);
* liveness: per node, the tick it last heard each peer (any frame counts); a
  peer silent for an election timeout joins the node's ``down`` set (the one
  its core reads) and the core gets ``suspect(peer)``; a frame from a down
  peer, or from a new incarnation (then ``suspect`` first), gives
  ``revive(peer)``. A restarted node starts with fresh liveness state;
* ticks: a quiesced core gets no ``tick()`` at all, as the runtime drops it
  from its ticking set — so a wake-up the core misses is not hidden by a
  tick; ``awake_ticks`` counts the ticks the cores did get (the idle cost).

One seed picks the cluster, the fault rates and the schedule: ``episodes``
rounds of

1. *chaos*: the base simulator's random actions (proposals, crashes with
   unsynced writes lost, restarts, partitions, transfers, compactions) on
   the seed's lossy network, with some idle gaps long enough to quiesce;
2. *settle*: heal, restart the crashed, a stable network (no loss, no
   spikes); then the liveness checks below;
3. a *quiet fault* while every member is quiesced (see ``QUIET_FAULTS``):
   the leader crashes, restarts at once, or is partitioned or muted; a
   follower restarts or is partitioned; the quiet fetch, the quiesce answer,
   the wake-up or the re-announcement is dropped; the leader or a follower
   crashes mid-write right after a proposal woke the group; a transfer; an
   idle spell on the lossy network (sometimes with lost messages of one
   kind armed too, or after compacting every log while quiet). Where a
   quorum stays connected without the leader, it must elect and commit
   while the fault lasts; then 2. again.

Liveness checks (bounds in election timeouts ``ET`` of the slowest clock,
generous but finite): (a) a leader exists within ``leader_ets``; (b) a
proposal to it commits and reaches every live member within ``commit_ets``
(plus the round trips a member catching up entry by entry needs); (c) every
member is quiesced again within ``quiet_ets``, consistently (one leader,
every follower at its log end and high watermark), and then stays so: over
``idle_ets`` no core ticks and no Raft message is sent (idle cost zero);
with a follower crashed or cut off after a write, the others quiesce too
(the leader leaves a follower its liveness holds down out), and once it is
back it is caught up within an ET (``revive`` wakes the leader). Safety: the
``InvariantChecker`` after every Ready, as in ``simulator``, and its
``check_quiesced`` (a quiesced member is settled) after each step.

With ``QuietOptions.membership`` (``--membership SHARE``) a share of the
seeds also get ``simulator``'s voter changes in their chaos (spare nodes as
observers; removals stop at three voters, as the faults above assume the
others can elect without one); the runtime's liveness covers every node, and
a partitioned leader keeps fewer than half the voters with it.

A failure raises ``SimFailure`` naming the seed and the replay command::

    python -m kcompat.testing.quiet_simulator --seed N [--verbose] [--membership 1]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass
from random import Random
from typing import cast

from kcompat.raft import (
    BeginQuorumEpoch,
    Entry,
    FetchRequest,
    FetchResponse,
    Message,
    NotLeader,
    Raft,
    RaftConfig,
    Role,
)
from kcompat.raft.storage import write_ready
from kcompat.testing.sim_network import NetworkFaults
from kcompat.testing.simulator import SimFailure, SimOptions, Simulation, _Node


@dataclass(frozen=True, slots=True)
class Frame:
    """One runtime-to-runtime frame: a Raft message, or none (a heartbeat)."""

    src: int
    dst: int
    incarnation: int
    message: Message | None = None


@dataclass(frozen=True, slots=True)
class QuietOptions:
    episodes: int = 3
    chaos_ms_max: int = 3_000
    idle_gap: float = 0.15  # the share of chaos gaps long enough to quiesce
    leader_ets: int = 12
    commit_ets: int = 8
    quiet_ets: int = 10
    idle_ets: int = 3
    # (c) as a failure; off, a settle that does not quiesce only counts in
    # ``unquiet`` and the schedule goes on (the faults then hit a busy group)
    require_quiet: bool = True
    # the share of seeds with voter changes in their chaos (``simulator``'s
    # membership: spare nodes as observers, voters added and removed)
    membership: float = 0.0


@dataclass(slots=True)
class _Drop:
    """Drop the next ``left`` frames of ``kind`` from/to ``node``."""

    kind: str
    node: int
    left: int


class _QuietNode(_Node):
    cluster: frozenset[int]  # every node (set once all exist)

    def __init__(self, config: RaftConfig, tick_ms: int, rng: Random) -> None:
        self.down: set[int] = set()
        super().__init__(config, tick_ms, rng)
        self.incarnation = 1
        self.awake_ticks = 0
        self.reset_liveness()

    def new_raft(self) -> Raft:
        return Raft(self.config, self.storage, self.rng, down=self.down)

    def reset_liveness(self) -> None:
        """A (re)started runtime: nothing heard yet, nobody down."""
        # the runtime's liveness covers every broker, voter of this group or not
        peers = sorted(getattr(self, "cluster", self.config.voters) - {self.config.node_id})
        self.down.clear()  # the set the core reads (a restart builds a new core)
        self.ticks = 0
        self.heard = dict.fromkeys(peers, 0)
        self.sent = dict.fromkeys(peers, 0)
        self.incarnations: dict[int, int] = {}
        self.quiet_seen = False


class QuietSimulation(Simulation):
    replay_module = "kcompat.testing.quiet_simulator"

    def __init__(
        self, seed: int, options: QuietOptions | None = None, verbose: bool = False
    ) -> None:
        knobs = Random(seed * 7919 + 17)  # its own stream: the base draws stay as they are
        # the runtime's own: 1000 ms / 50 ms ticks = 20, FETCH_WAIT_TICKS = 3
        self.election_ticks = knobs.choice([5, 8, 10, 20])
        self.fetch_wait_ticks = knobs.choice([2, 3, 3])
        # the runtime's pair heartbeat goes every fifth of an election timeout
        # (``HEARTBEATS_PER_ELECTION``); every tick now and then, as a runtime
        # with short timeouts has it. A suspecting member waits out the spread
        # of the peers' verdicts on a silence (``suspect_skew_ticks``)
        self.heartbeat_ticks = knobs.choice([1, max(1, self.election_ticks // 5),
                                             max(1, self.election_ticks // 5)])
        self.quiet = options or QuietOptions()
        self.min_voters = 3  # the faults below assume the others can elect without one
        super().__init__(seed, SimOptions(membership=self.quiet.membership), verbose)
        for node in self.nodes.values():
            cast(_QuietNode, node).cluster = frozenset(self.nodes)
            cast(_QuietNode, node).reset_liveness()
        self.chaos_faults = self.network.faults
        f = self.chaos_faults
        self.stable = NetworkFaults(duplicate=f.duplicate, delay_ms_max=f.delay_ms_max)
        self.drops: list[_Drop] = []
        self.muted: dict[int, int] = {}  # node -> until (ms): its frames are lost
        self.crash_on_entries: int | None = None
        self.raft_sent = 0
        self.incarnations = 1
        self.failovers_ms: list[int] = []
        self.faults_run: list[str] = []
        self.quiet_reached = 0
        self.unquiet = 0  # settles that did not quiesce (only counted when not required)
        self.dropped: dict[str, int] = {}  # targeted drops that hit, by kind

    def _new_node(self, config: RaftConfig, tick_ms: int, rng: Random) -> _Node:
        # a partition group's config in the runtime (``ClusterRuntime.new_group``):
        # pre-vote and check quorum on (with pre-vote off on some nodes, one
        # whose log is behind and whose clock is fastest can keep a group
        # leaderless for many election timeouts by raising terms: Raft's
        # disruptive server, not a quiescence matter; ``simulator`` mixes them)
        config = dataclasses.replace(
            config, quiesce=True, election_timeout_ticks=self.election_ticks,
            fetch_wait_ticks=self.fetch_wait_ticks, pre_vote=True, check_quorum=True,
            always_leader_change=False, suspect_skew_ticks=self.heartbeat_ticks + 1,
        )  # fmt: skip
        return _QuietNode(config, tick_ms, rng)

    def _qnode(self, node_id: int) -> _QuietNode:
        return cast(_QuietNode, self.nodes[node_id])

    @property
    def et_ms(self) -> int:
        """One election timeout of the slowest clock."""
        return self.election_ticks * max(n.tick_ms for n in self.nodes.values())

    def summary(self) -> str:
        ets = [round(ms / self.et_ms, 1) for ms in self.failovers_ms]
        return (
            f"{super().summary()}; ET {self.election_ticks} ticks, quiet {self.quiet_reached} "
            f"times, faults {','.join(self.faults_run)}, dropped {self.dropped}, "
            f"failovers (ET) {ets}"
        )

    # -- the runtime around each core ----------------------------------------------

    def _deliver(self, m: Message) -> None:
        frame = cast(Frame, m)
        node = self._qnode(frame.dst)
        if not node.alive:
            return
        self._hear(frame.dst, frame.src, frame.incarnation)
        if frame.message is not None:
            node.raft.step(frame.message)

    def _hear(self, node_id: int, peer: int, incarnation: int) -> None:
        node = self._qnode(node_id)
        node.heard[peer] = node.ticks
        before = node.incarnations.get(peer)
        node.incarnations[peer] = incarnation
        if before is not None and before != incarnation:
            self._log(f"{node_id}: peer {peer} restarted (suspect, revive)")
            node.raft.suspect(peer)
            self._revive(node_id, peer, restarted=True)
        elif peer in node.down:
            self._log(f"{node_id}: peer {peer} is back (revive)")
            self._revive(node_id, peer)

    def _revive(self, node_id: int, peer: int, restarted: bool = False) -> None:
        node = self._qnode(node_id)
        node.down.discard(peer)
        node.raft.revive(peer, restarted)

    def _tick(self, node_id: int) -> None:
        node = self._qnode(node_id)
        node.ticks += 1
        for peer in sorted(node.heard):
            silent = node.ticks - node.heard[peer]
            if silent >= self.election_ticks and peer not in node.down:
                self._log(f"{node_id}: peer {peer} silent for {silent} ticks (suspect)")
                node.down.add(peer)
                node.raft.suspect(peer)
            if node.ticks - node.sent[peer] >= self.heartbeat_ticks:
                node.sent[peer] = node.ticks
                self._transmit(Frame(node_id, peer, node.incarnation))
        if not node.raft.quiesced:
            node.raft.tick()
            node.awake_ticks += 1

    def _send(self, node_id: int, m: Message) -> None:
        node = self._qnode(node_id)
        node.sent[m.dst] = node.ticks
        self.raft_sent += 1
        self._transmit(Frame(m.src, m.dst, node.incarnation, m))

    def _transmit(self, frame: Frame) -> None:
        if self.muted.get(frame.src, -1) >= self.now_ms or self._drop(frame):
            return
        self.network.send(self.now_ms, cast(Message, frame))

    def _drop(self, frame: Frame) -> bool:
        m = frame.message
        for drop in self.drops:
            if drop.left <= 0 or not _matches(drop.kind, drop.node, m):
                continue
            drop.left -= 1
            self.dropped[drop.kind] = self.dropped.get(drop.kind, 0) + 1
            self._log(f"drop {drop.kind}: {frame.src}->{frame.dst} {type(m).__name__}")
            return True
        return False

    def _process_ready(self, node_id: int, chaos: bool) -> None:
        node = self._qnode(node_id)
        if (
            self.crash_on_entries == node_id
            and node.alive
            and node.raft.has_ready()
            and node.raft.log.unstable
        ):
            self.crash_on_entries = None
            write_ready(node.storage, node.raft.ready())
            self._crash(node_id, mid_write=True)
            return
        super()._process_ready(node_id, chaos)
        if node.alive:
            self.checker.check_quiesced(node_id, node.raft)
        if node.alive and node.raft.quiesced != node.quiet_seen:
            node.quiet_seen = node.raft.quiesced
            self._log(
                f"{node_id} {'quiesced' if node.quiet_seen else 'woke'} "
                f"({node.raft.role.value} term {node.raft.term})"
            )

    def _restart(self, node_id: int) -> None:
        node = self._qnode(node_id)
        node.reset_liveness()
        self.incarnations += 1
        node.incarnation = self.incarnations
        super()._restart(node_id)

    # -- the schedule -------------------------------------------------------------

    def _run(self) -> None:
        for episode in range(self.quiet.episodes):
            self._log(f"-- episode {episode}: chaos")
            self._chaos(self.rng.randint(500, self.quiet.chaos_ms_max))
            self._settle("after chaos")
            self._quiet_fault()

    def _action_gap_ms(self) -> int:
        if self.rng.random() < self.quiet.idle_gap:
            return self.rng.randint(3 * self.et_ms, 6 * self.et_ms)
        return super()._action_gap_ms()

    def _chaos(self, duration_ms: int) -> None:
        self.network.faults = self.chaos_faults
        end_ms = self.now_ms + duration_ms
        self.next_action_ms = self.now_ms
        while self.now_ms < end_ms:
            self._step(end_ms, chaos=True)

    def _run_for(self, duration_ms: int) -> None:
        end_ms = self.now_ms + duration_ms
        while self.now_ms < end_ms:
            self._step(end_ms, chaos=False)

    def _await(self, done: Callable[[], bool], bound_ms: int, what: str) -> int:
        """Step until ``done()``; the simulated ms it took (fail past ``bound_ms``)."""
        start = self.now_ms
        deadline = start + bound_ms
        while not done():
            if self.now_ms >= deadline:
                status = "; ".join(str(self._status(i)) for i in sorted(self.nodes))
                raise AssertionError(f"liveness: {what} within {bound_ms} ms: {status}")
            self._step(deadline, chaos=False)
        return self.now_ms - start

    def _status(self, node_id: int) -> str:
        node = self._qnode(node_id)
        if not node.alive:
            return f"{node_id} down"
        s = node.raft.status()
        return (
            f"{node_id} {s.role.value} t{s.term} leader={s.leader} log={s.log_end} "
            f"hw={s.high_watermark} quiesced={node.raft.quiesced} down={sorted(node.down)}"
        )

    # -- liveness -----------------------------------------------------------------

    def _leader(self, members: list[int]) -> int | None:
        """The leader of the highest term among ``members`` (alive), if any."""
        alive = [i for i in members if self.nodes[i].alive]
        if not alive:
            return None
        top = max(self.nodes[i].raft.term for i in alive)
        leaders = [
            i
            for i in alive
            if self.nodes[i].raft.role is Role.LEADER and self.nodes[i].raft.term == top
        ]
        return leaders[0] if leaders else None

    def _progress(self, members: list[int], why: str) -> int:
        """(a) a leader among ``members`` and (b) a proposal to it committed on
        every live one of them, within the bounds; the ms (a) took."""
        et = self.et_ms
        elected_ms = self._await(
            lambda: self._leader(members) is not None,
            self.quiet.leader_ets * et,
            f"a leader among {members} ({why})",
        )
        marker: Entry | None = None

        def committed() -> bool:
            nonlocal marker
            leader = self._leader(members)
            term = self.nodes[leader].raft.term if leader is not None else -1
            if leader is not None and (marker is None or marker.term != term):
                data = f"m{self.proposed + 1}".encode()
                result = self.nodes[leader].raft.propose(data)
                marker = None if isinstance(result, NotLeader) else result
                if marker is not None:
                    self.proposed += 1
                    self._log(f"propose marker {data.decode()} to {leader}: {result}")
            return marker is not None and all(
                self._holds(i, marker) for i in members if self.nodes[i].alive
            )

        lag = max(n.raft.log.end - n.raft.log.start for n in self.nodes.values())
        round_trip_ms = 2 * (self.stable.delay_ms_max + 1) + max(
            n.tick_ms for n in self.nodes.values()
        )
        self._await(
            committed,
            self.quiet.commit_ets * et + lag * round_trip_ms,
            f"a proposal committed on every live one of {members} ({why})",
        )
        return elected_ms

    def _holds(self, node_id: int, e: Entry) -> bool:
        node = self.nodes[node_id]
        return node.raft.high_watermark >= e.end and node.storage.entry_at(e.index) == e

    def _all_quiet(self, members: list[int] | None = None) -> bool:
        """(c): every member (of ``members``) quiesced, one leader, every
        follower caught up."""
        members = sorted(self.nodes) if members is None else members
        leader = self._leader(members)
        if leader is None:
            return False
        lead = self.nodes[leader].raft
        for node in (self.nodes[i] for i in members):
            r = node.raft
            if not (
                node.alive
                and r.quiesced
                and r.term == lead.term
                and r.leader == leader
                and r.log.end == lead.log.end
                and r.high_watermark == r.log.end
            ):
                return False
        return True

    def _settle(self, why: str) -> None:
        self._log(f"-- settle ({why}): heal, stable network, restart the crashed")
        self.network.heal()
        self.network.faults = self.stable
        self.drops.clear()
        self.muted.clear()
        self.crash_on_entries = None
        for node_id, node in self.nodes.items():
            if not node.alive:
                self._restart(node_id)
        self._progress(sorted(self.nodes), why)
        et = self.et_ms
        # quiet, and no Raft message sent for an ET (nothing in flight any more)
        quiet_since = [self.now_ms]
        sent = [self.raft_sent]

        def settled() -> bool:
            if not self._all_quiet() or self.raft_sent != sent[0]:
                quiet_since[0], sent[0] = self.now_ms, self.raft_sent
                return False
            return self.now_ms - quiet_since[0] >= et

        try:
            self._await(settled, self.quiet.quiet_ets * et, f"every member quiesced ({why})")
        except AssertionError:
            if self.quiet.require_quiet:
                raise
            self.unquiet += 1
            self._log(f"-- not quiet ({why})")
            return
        self.quiet_reached += 1
        ticks = sum(self._qnode(i).awake_ticks for i in self.nodes)
        sent_before = self.raft_sent
        self._run_for(self.quiet.idle_ets * et)
        woke = sum(self._qnode(i).awake_ticks for i in self.nodes) - ticks
        if woke or self.raft_sent != sent_before or not self._all_quiet():
            raise AssertionError(
                f"idle cost: {woke} ticks and {self.raft_sent - sent_before} Raft messages "
                f"in {self.quiet.idle_ets} ETs of a quiet group ({why})"
            )
        self._log("-- quiet")

    # -- faults while quiet ---------------------------------------------------------

    def _quiet_fault(self) -> None:
        self._await(
            lambda: self._leader(sorted(self.nodes)) is not None,
            self.quiet.leader_ets * self.et_ms,
            "a leader before the quiet fault",
        )
        leader = self._leader(sorted(self.nodes))
        assert leader is not None
        name = self.rng.choice(sorted(QUIET_FAULTS))
        self.faults_run.append(name)
        if self.rng.random() < 0.25:  # and a lost message of some kind on the side
            kind = self.rng.choice(DROP_KINDS)
            node = self.rng.choice(sorted(self.nodes))
            self.drops.append(_Drop(kind, node, self.rng.randint(1, 2)))
            self._log(f"arm drop of {kind} at {node}")
        if self.rng.random() < 0.25:  # retention while quiet: log starts move, nobody wakes
            for node_id in sorted(self.nodes):
                self._compact(node_id)
        self._log(f"-- quiet fault: {name} (leader {leader})")
        QUIET_FAULTS[name](self, leader)
        self._settle(f"after {name}")

    def _hold_ms(self, lo_ets: float, hi_ets: float) -> int:
        return self.rng.randint(int(lo_ets * self.et_ms), int(hi_ets * self.et_ms))

    def _others(self, leader: int) -> list[int]:
        return [i for i in sorted(self.nodes) if i != leader]

    def _propose(self) -> None:
        leader = self._leader(sorted(self.nodes))
        if leader is not None:
            self.proposed += 1
            result = self.nodes[leader].raft.propose(f"p{self.proposed}".encode())
            self._log(f"propose p{self.proposed} to {leader}: {result}")

    def _failover(self, leader: int, members: list[int], why: str) -> None:
        """The leader is gone for ``members`` (a quorum): they elect and commit."""
        self.failovers_ms.append(self._progress(members, why))
        elected = self._leader(members)
        assert elected is not None and elected != leader

    def _leader_crash(self, leader: int) -> None:
        self._crash(leader, mid_write=False)
        self._failover(leader, self._others(leader), "leader crashed while quiet")
        self._run_for(self._hold_ms(0, 2))

    def _leader_restart(self, leader: int) -> None:
        self._crash(leader, mid_write=False)
        self._run_for(self.rng.randint(1, self.et_ms // 2))
        self._restart(leader)

    def _follower_restart(self, leader: int) -> None:
        follower = self.rng.choice(self._others(leader))
        self._crash(follower, mid_write=False)
        self._run_for(self._hold_ms(0, 1))
        missed = self.rng.random() < 0.5
        if missed:
            self._propose()  # the leader quiesces without it once it is down
            self._quiet_without(follower, "a follower crashed")
        self._run_for(self._hold_ms(0, 2))
        self._restart(follower)
        if self.election_ticks >= 8 and not any(d.node == follower for d in self.drops):
            # (not when a message to or from it is armed to be lost: the bound
            # holds for a stable network; the re-announcement heals it later)
            self._leader_known_by_revive(follower)
        if missed and self.election_ticks >= 8:
            self._caught_up_by_revive(follower)

    def _leader_known_by_revive(self, follower: int) -> None:
        """A restarted follower of a quiet group names its leader well before its
        own election timeout (Metadata answers from it): the first frame it sends
        tells the leader it restarted (a new incarnation) and the leader
        announces itself — a heartbeat and a round trip or two."""
        leader = self._leader(self._others(follower))
        assert leader is not None
        node = self.nodes[follower]
        slowest_tick_ms = max(n.tick_ms for n in self.nodes.values())
        bound_ms = 2 * (self.heartbeat_ticks + 1) * slowest_tick_ms + 3 * (
            2 * (self.stable.delay_ms_max + 1))
        self._await(lambda: node.raft.leader == leader, bound_ms,
                    f"{follower} knows its leader {leader} after its restart")

    def _caught_up_by_revive(self, follower: int) -> None:
        """A returning follower that missed entries is caught up sooner than
        its own election timer would wake the group: its peers ``revive`` it
        and the quiesced leader wakes (a heartbeat, the fetch wait and a few
        round trips; measurable only when that is well below an ET)."""
        leader = self._leader(self._others(follower))
        assert leader is not None
        lead = self.nodes[leader].raft
        node = self.nodes[follower]
        slowest_tick_ms = max(n.tick_ms for n in self.nodes.values())
        lag = lead.log.end - node.raft.log.end
        bound_ms = self.et_ms + lag * (2 * (self.stable.delay_ms_max + 1) + slowest_tick_ms)

        def caught_up() -> bool:
            r = node.raft
            return r.log.end == lead.log.end and r.high_watermark == lead.high_watermark

        self._await(caught_up, bound_ms, f"{follower} caught up after its restart (revive)")

    def _partition_leader(self, leader: int) -> None:
        voters = self.nodes[leader].raft.voters
        others = [i for i in self._others(leader) if i in voters]
        self.rng.shuffle(others)
        minority = [leader] + others[: self.rng.randint(0, (len(voters) - 1) // 2 - 1)]
        # observers on either side: the majority side needs a quorum of voters
        minority += [i for i in self._others(leader)
                     if i not in voters and self.rng.random() < 0.3]
        majority = sorted(set(self.nodes) - set(minority))
        self.network.partition([minority, majority])
        self._log(f"partition {sorted(minority)} | {majority}")
        if self.rng.random() < 0.5:
            self._propose()  # to the cut-off leader: it never commits
        self._failover(leader, majority, "leader partitioned while quiet")
        self._run_for(self._hold_ms(0, 2))

    def _partition_follower(self, leader: int) -> None:
        follower = self.rng.choice(self._others(leader))
        self.network.partition([[follower]])
        self._log(f"partition [{follower}] | rest")
        self._run_for(self._hold_ms(0.5, 3))
        if self.rng.random() < 0.5:
            self._propose()
            self._quiet_without(follower, "a follower partitioned")

    def _quiet_without(self, node_id: int, why: str) -> None:
        """(c) with one follower gone: the rest, a quorum, quiesces anyway
        (once their liveness holds it down) and stays caught up."""
        rest = self._others(node_id)
        self._await(
            lambda: self._all_quiet(rest),
            self.quiet.quiet_ets * self.et_ms,
            f"{rest} quiesced without {node_id} ({why})",
        )
        self._log(f"-- quiet without {node_id}")

    def _mute(self, leader: int) -> None:
        """One node's frames are lost, while it still hears everyone."""
        node = self.rng.choice(sorted(self.nodes))
        self._log(f"mute {node}")
        if node == leader:  # muted until the others elected (else it may come back first)
            self.muted[node] = self.now_ms + 1000 * self.et_ms
            self._failover(leader, self._others(leader), "leader muted while quiet")
        self.muted[node] = self.now_ms + self._hold_ms(0.5, 3)
        self._run_for(self.muted[node] - self.now_ms)

    def _drop_then_propose(self, kind: str, leader: int) -> None:
        node = self.rng.choice(self._others(leader))
        self.drops.append(_Drop(kind, node, self.rng.randint(1, 3)))
        self._log(f"arm drop of {kind} at {node}")
        self._propose()  # wakes the group; it quiesces again (and loses the message)
        self._run_for(self._hold_ms(2, 5))
        self._propose()
        self._run_for(self._hold_ms(0, 1))

    def _leader_crash_mid_wake(self, leader: int) -> None:
        self._propose()
        self.crash_on_entries = leader
        self._process_ready(leader, chaos=False)
        self._failover(leader, self._others(leader), "leader crashed mid-write on a wake-up")

    def _follower_crash_mid_wake(self, leader: int) -> None:
        self.crash_on_entries = self.rng.choice(self._others(leader))
        self._propose()
        self._run_for(self._hold_ms(1, 3))

    def _transfer_quiet(self, leader: int) -> None:
        target = self.rng.choice(self._others(leader))
        ok = self.nodes[leader].raft.transfer_leadership(target)
        self._log(f"transfer {leader} -> {target}: {ok}")
        self._run_for(self._hold_ms(0, 2))

    def _lossy_idle(self, leader: int) -> None:
        self.network.faults = self.chaos_faults
        self._run_for(self._hold_ms(2, 6))
        if self.rng.random() < 0.5:
            self._propose()
            self._run_for(self._hold_ms(0, 2))

    def _idle_propose(self, leader: int) -> None:
        self._run_for(self._hold_ms(0, 3))
        self._propose()


def _matches(kind: str, node: int, m: Message | None) -> bool:
    if kind == "heartbeat":
        return m is None
    if kind == "quiet-fetch":
        return isinstance(m, FetchRequest) and m.quiet and m.src == node
    if kind == "quiesce-answer":
        return isinstance(m, FetchResponse) and m.quiesce and m.dst == node
    if kind == "wake-up":
        return isinstance(m, FetchResponse) and bool(m.entries) and m.dst == node
    if kind == "announce":
        return isinstance(m, BeginQuorumEpoch) and m.dst == node
    raise AssertionError(kind)


DROP_KINDS = ("quiet-fetch", "quiesce-answer", "wake-up", "announce", "heartbeat")

QUIET_FAULTS: dict[str, Callable[[QuietSimulation, int], None]] = {
    "leader-crash": QuietSimulation._leader_crash,
    "leader-restart": QuietSimulation._leader_restart,
    "follower-restart": QuietSimulation._follower_restart,
    "partition-leader": QuietSimulation._partition_leader,
    "partition-follower": QuietSimulation._partition_follower,
    "mute": QuietSimulation._mute,
    "drop-quiet-fetch": lambda s, ld: s._drop_then_propose("quiet-fetch", ld),
    "drop-quiesce-answer": lambda s, ld: s._drop_then_propose("quiesce-answer", ld),
    "drop-wake-up": lambda s, ld: s._drop_then_propose("wake-up", ld),
    "drop-announce": lambda s, ld: s._drop_then_propose("announce", ld),
    "leader-crash-mid-wake": QuietSimulation._leader_crash_mid_wake,
    "follower-crash-mid-wake": QuietSimulation._follower_crash_mid_wake,
    "transfer": QuietSimulation._transfer_quiet,
    "lossy-idle": QuietSimulation._lossy_idle,
    "idle-propose": QuietSimulation._idle_propose,
}


def run_seed(
    seed: int, verbose: bool = False, require_quiet: bool = True, membership: float = 0.0
) -> QuietSimulation:
    options = QuietOptions(require_quiet=require_quiet, membership=membership)
    sim = QuietSimulation(seed, options, verbose)
    sim.run()
    return sim


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the seeded quiescence simulator.")
    parser.add_argument("--seed", type=int, default=0, help="first seed")
    parser.add_argument("--seeds", type=int, default=1, help="how many seeds from --seed")
    parser.add_argument("--verbose", action="store_true", help="print the schedule")
    parser.add_argument(
        "--tolerate-unquiet", action="store_true",
        help="count a settle that does not quiesce instead of failing (check the rest)",
    )  # fmt: skip
    parser.add_argument(
        "--membership", type=float, default=0.0, metavar="SHARE",
        help="the share of seeds whose chaos changes voters (0 to 1)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    for seed in range(args.seed, args.seed + args.seeds):
        try:
            sim = run_seed(seed, args.verbose, not args.tolerate_unquiet, args.membership)
            if args.verbose or args.seeds == 1:
                print(sim.summary(), f"unquiet settles: {sim.unquiet}")
        except SimFailure as e:
            print(e, file=sys.stderr)
            return 1
    print(f"{args.seeds} seeds from {args.seed}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
