"""The seeded Raft cluster simulator (TigerBeetle's VOPR, in miniature).

Theory of operation
-------------------
One seed determines everything: the cluster size (3-5), each node's tick
period (clock skew: 80-120 ms per tick), the network's fault rates, and the
schedule of client proposals, crashes, restarts, partitions, heals,
leadership transfers and compactions. Time is simulated milliseconds; the
loop jumps to the next event (a tick, a message delivery or a scheduled
action), so a run costs only the work it does.

After every event each live node's Ready is processed as a runtime would:
persist, sync, send, advance — except that, with a small probability, the
node crashes between writing and syncing (``MemoryStorage.crash`` keeps a
random prefix of the unsynced writes and none of the messages go out). The
``InvariantChecker`` inspects every processed Ready.

Membership (``SimOptions.membership``, the share of seeds; drawn from a
stream of its own, so the other seeds keep their schedules): the cluster
gets one or two spare nodes that start as observers (configured with the
initial voters, as a learner is given the bootstrap voters), every node
runs pre-vote (see ``__init__`` for why), and some chaos
actions ask a leader to add a voter (a spare, or a removed one) or remove
one — any voter, the leader itself included — while partitions, crashes and
lossy links go on; refusals (pending change, not caught up, ...) are part
of the schedule. The checker also holds that at most one configuration
change is uncommitted in any log and that each node's voter set is the one
its stored log ends with (so a truncated change reverted); compactions
record the voter set at the snapshot point (``Raft.voters_at``).

The *chaos* phase runs ``duration_ms``; then the network heals, faults stop,
every stopped node restarts, and the *recovery* phase must see one leader
whose last proposal is committed on every voter of its configuration within
``recovery_ms`` (liveness; observers need not converge — a removed voter
that raised its term without pre-vote is ignored for good).

Pre-vote and check quorum are drawn per node (on for 80 % each) so that the
core's paths without them are checked for safety under chaos; liveness is
checked with pre-vote on everywhere, as the broker runs it: a node drawn
without restarts with it when the recovery begins (``_restart_with_pre_vote``
says why).

A failure raises ``SimFailure`` naming the seed and the replay command::

    python -m kcompat.testing.simulator --seed N [--verbose]

``quiet_simulator`` runs quiescent groups in this loop: it overrides the
hooks ``_new_node``, ``_deliver``, ``_tick``, ``_send``, ``_restart`` and
``_action_gap_ms`` (the runtime's frames, liveness and ticking set).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from dataclasses import dataclass
from random import Random

from kcompat.raft import (
    ChangeRefused,
    Message,
    NotLeader,
    Raft,
    RaftConfig,
    Role,
    Snapshot,
    SnapshotId,
    describe,
)
from kcompat.raft.storage import persist_ready, write_ready
from kcompat.testing.invariants import InvariantChecker
from kcompat.testing.memory_storage import MemoryStorage
from kcompat.testing.sim_network import NetworkFaults, SimNetwork


class SimFailure(AssertionError):
    """A simulator found a broken invariant; the message names the seed and how to
    replay it (this module's and ``broker_sim``'s)."""


def replay_command(seed: int, module: str = "kcompat.testing.simulator") -> str:
    return f".venv/bin/python -m {module} --seed {seed} --verbose"


@dataclass(frozen=True, slots=True)
class SimOptions:
    duration_ms: int = 20_000
    recovery_ms: int = 6_000
    action_gap_ms_max: int = 200
    crash_mid_write: float = 0.01
    membership: float = 0.3  # the share of seeds with voter changes
    membership_actions: float = 0.1  # the share of their chaos actions that are changes


class _Node:
    def __init__(self, config: RaftConfig, tick_ms: int, rng: Random) -> None:
        self.config = config
        self.tick_ms = tick_ms
        self.rng = rng
        self.storage = MemoryStorage()
        self.raft = self.new_raft()
        self.alive = True
        self.next_tick_ms = tick_ms
        self.applied = 0  # the high watermark of the last processed Ready

    def new_raft(self) -> Raft:
        """The core a (re)started node runs over its durable storage."""
        return Raft(self.config, self.storage, self.rng)


class Simulation:
    replay_module = "kcompat.testing.simulator"

    def __init__(self, seed: int, options: SimOptions | None = None, verbose: bool = False) -> None:
        self.seed = seed
        self.options = options or SimOptions()
        self.verbose = verbose
        self.rng = Random(seed)
        rng = self.rng
        size = rng.choice([3, 3, 4, 5, 5])
        voters = frozenset(range(1, size + 1))
        faults = NetworkFaults(
            loss=rng.choice([0.0, 0.01, 0.05, 0.15]),
            duplicate=rng.choice([0.0, 0.02, 0.1]),
            delay_ms_max=rng.choice([5, 20, 60]),
            spike=rng.choice([0.0, 0.01, 0.05]),
        )
        self.network = SimNetwork(Random(rng.getrandbits(64)), faults)
        self.nodes: dict[int, _Node] = {}
        for node_id in sorted(voters):
            config = RaftConfig(
                node_id, voters, election_timeout_ticks=5, fetch_wait_ticks=2,
                max_fetch_bytes=rng.choice([4, 64, 1 << 20]),
                pre_vote=rng.random() < 0.8, check_quorum=rng.random() < 0.8,
                always_leader_change=seed % 2 == 0,  # no draw: seeds keep their schedules
                catch_up_max_lag=8,
            )  # fmt: skip
            node_rng = Random(rng.getrandbits(64))
            self.nodes[node_id] = self._new_node(config, rng.randint(80, 120), node_rng)
        # membership draws come from their own stream: other seeds keep their schedules
        self.knobs = Random(seed * 104_729 + 3)
        self.membership = self.knobs.random() < self.options.membership
        self.changes: list[str] = []  # accepted voter changes
        self.min_voters = getattr(self, "min_voters", 1)  # removals stop here
        if self.membership:
            # pre-vote everywhere (the broker's setting): without it a member
            # whose log is behind and whose clock is fastest keeps resetting
            # the others' election timers with its term bumps (Raft's
            # disruptive server) — rare with 3-5 voters, common with the 2
            # voters a change can leave. Removed voters without pre-vote are
            # covered by tests/unit/raft/test_membership.py.
            for node in self.nodes.values():
                node.config = dataclasses.replace(node.config, pre_vote=True)
                node.raft = node.new_raft()
            first = next(iter(self.nodes.values())).config
            for node_id in range(size + 1, size + 1 + self.knobs.choice([1, 1, 2])):
                config = dataclasses.replace(first, node_id=node_id,
                                             max_fetch_bytes=self.knobs.choice([4, 1 << 20]))
                node_rng = Random(self.knobs.getrandbits(64))
                self.nodes[node_id] = self._new_node(config, self.knobs.randint(80, 120),
                                                     node_rng)
        self.checker = InvariantChecker()
        self.now_ms = 0
        self.next_action_ms = 0
        self.proposed = 0
        self.trace: list[str] = []

    def _new_node(self, config: RaftConfig, tick_ms: int, rng: Random) -> _Node:
        return _Node(config, tick_ms, rng)

    # -- the loop ----------------------------------------------------------------

    def summary(self) -> str:
        c = self.checker
        changes = f", voter changes {' '.join(self.changes)}" if self.membership else ""
        return (
            f"seed {self.seed}: {len(self.nodes)} nodes, {self.proposed} proposals, "
            f"{len(c.committed)} entries committed, {len(c.leaders)} terms with a leader, "
            f"{self.network.sent} messages ({self.network.dropped} dropped){changes}"
        )

    def run(self) -> None:
        try:
            self._run()
        except AssertionError as e:
            tail = "\n".join(self.trace[-40:])
            raise SimFailure(
                f"seed {self.seed} failed at {self.now_ms} ms: {e}\n"
                f"replay: {replay_command(self.seed, self.replay_module)}\n{tail}"
            ) from e

    def _run(self) -> None:
        end_ms = self.options.duration_ms
        while self.now_ms < end_ms:
            self._step(end_ms, chaos=True)
        self._log("-- recovery: heal, no faults, restart everyone")
        self.network.heal()
        self.network.faults = NetworkFaults()
        for node_id, node in self.nodes.items():
            if not node.config.pre_vote:
                self._restart_with_pre_vote(node_id)
            elif not node.alive:
                self._restart(node_id)
        self._recover()

    def _restart_with_pre_vote(self, node_id: int) -> None:
        """A node drawn without pre-vote restarts with it (the broker's
        setting) before the liveness check: without it, one whose log is
        behind keeps raising everyone's term at its timeouts, which resets
        their election timers and takes the votes of those further behind —
        Raft's disruptive server, a delay bounded only by luck (seed 13553:
        node 4, the fastest clock and 13 offsets behind, held off the election
        7 s). The chaos phase keeps the draw: safety is checked without it."""
        node = self.nodes[node_id]
        if node.alive:
            node.alive = False  # a clean stop: synced, in-flight messages lost
            self.network.drop_to(node_id)
            self.checker.on_crash(node_id)
        node.config = dataclasses.replace(node.config, pre_vote=True)
        self._log(f"pre-vote on {node_id}")
        self._restart(node_id)

    def _step(self, end_ms: int, chaos: bool) -> None:
        candidates = [n.next_tick_ms for n in self.nodes.values()] + [end_ms]
        if chaos:
            candidates.append(self.next_action_ms)
        delivery = self.network.next_delivery_ms()
        if delivery is not None:
            candidates.append(delivery)
        self.now_ms = max(self.now_ms, min(candidates))
        for m in self.network.due(self.now_ms):
            self._deliver(m)
        for node_id, node in self.nodes.items():
            if node.next_tick_ms <= self.now_ms:
                node.next_tick_ms += node.tick_ms
                if node.alive:
                    self._tick(node_id)
        if chaos and self.next_action_ms <= self.now_ms:
            self._random_action()
            self.next_action_ms = self.now_ms + self._action_gap_ms()
        for node_id in sorted(self.nodes):
            self._process_ready(node_id, chaos)

    def _action_gap_ms(self) -> int:
        return self.rng.randint(1, self.options.action_gap_ms_max)

    def _deliver(self, m: Message) -> None:
        node = self.nodes[m.dst]
        if node.alive:
            node.raft.step(m)

    def _tick(self, node_id: int) -> None:
        self.nodes[node_id].raft.tick()

    def _send(self, node_id: int, m: Message) -> None:
        self.network.send(self.now_ms, m)

    def _process_ready(self, node_id: int, chaos: bool) -> None:
        node = self.nodes[node_id]
        if not node.alive or not node.raft.has_ready():
            return
        ready = node.raft.ready()
        if chaos and ready.must_sync and self.rng.random() < self.options.crash_mid_write:
            write_ready(node.storage, ready)
            self._crash(node_id, mid_write=True)
            return
        persist_ready(node.storage, ready)
        self.checker.on_ready(node_id, node.raft, node.storage, ready)
        for m in ready.messages:
            if self.verbose:
                self._log(describe(m))
            self._send(node_id, m)
        node.raft.advance(ready)
        node.applied = ready.high_watermark

    def _recover(self) -> None:
        """Liveness: after healing, a leader commits a fresh entry everywhere."""
        deadline = self.now_ms + self.options.recovery_ms
        marker, marker_term = b"", -1
        while self.now_ms < deadline:
            self._step(deadline, chaos=False)
            leaders = [n.raft for n in self.nodes.values() if n.raft.role is Role.LEADER]
            if len(leaders) == 1 and leaders[0].term != marker_term:
                marker = f"final@{leaders[0].term}".encode()
                if not isinstance(leaders[0].propose(marker), NotLeader):
                    marker_term = leaders[0].term
            if marker_term >= 0 and len(leaders) == 1 and self._all_committed(
                    marker, leaders[0].voters):
                return
        status = "; ".join(str(n.raft.status()) for n in self.nodes.values())
        raise AssertionError(f"liveness: cluster did not converge after healing: {status}")

    def _all_committed(self, marker: bytes, members: frozenset[int]) -> bool:
        """Every voter of the final configuration has ``marker`` committed."""
        for node in (self.nodes[i] for i in sorted(members)):
            hw = node.raft.high_watermark
            e = node.storage.entry_at(hw - 1) if hw else None
            if e is None or e.data != marker:
                return False
        return True

    # -- chaos -------------------------------------------------------------------

    def _random_action(self) -> None:
        rng = self.rng
        roll = rng.random()
        alive = [i for i, n in self.nodes.items() if n.alive]
        dead = [i for i, n in self.nodes.items() if not n.alive]
        if self.membership and self.knobs.random() < self.options.membership_actions:
            self._change_voters()
        elif roll < 0.70:
            for _ in range(rng.randint(1, 3)):
                self._propose()
        elif roll < 0.74 and alive:
            self._crash(rng.choice(alive), mid_write=False)
        elif roll < 0.80 and dead:
            self._restart(rng.choice(dead))
        elif roll < 0.84:
            ids = list(self.nodes)
            rng.shuffle(ids)
            cut = rng.randint(1, len(ids) - 1)
            self.network.partition([ids[:cut], ids[cut:]])
            self._log(f"partition {sorted(ids[:cut])} | {sorted(ids[cut:])}")
        elif roll < 0.90:
            self.network.heal()
            self._log("heal")
        elif roll < 0.94:
            self._transfer()
        elif alive:
            self._compact(rng.choice(alive))

    def _propose(self) -> None:
        leaders = [i for i, n in self.nodes.items() if n.alive and n.raft.role is Role.LEADER]
        if not leaders:
            return
        node_id = self.rng.choice(leaders)
        self.proposed += 1
        count = self.rng.choice([1, 1, 1, 3])
        result = self.nodes[node_id].raft.propose(f"p{self.proposed}".encode(), count)
        self._log(f"propose p{self.proposed} to {node_id}: {result}")

    def _change_voters(self) -> None:
        """Ask a leader to add or remove a voter (any, itself included)."""
        knobs = self.knobs
        leaders = [i for i, n in self.nodes.items() if n.alive and n.raft.role is Role.LEADER]
        if not leaders:
            return
        node_id = knobs.choice(leaders)
        raft = self.nodes[node_id].raft
        voters = raft.voters
        others = sorted(set(self.nodes) - voters)
        add = bool(others) and (len(voters) <= max(2, self.min_voters)
                                or (len(voters) < 5 and knobs.random() < 0.5))
        if not add and len(voters) <= self.min_voters:
            return
        target = knobs.choice(others if add else sorted(voters))
        result = raft.add_voter(target) if add else raft.remove_voter(target)
        what = f"{'add' if add else 'remove'} voter {target} at {node_id}"
        if not isinstance(result, ChangeRefused):
            leader = "(leader)" if target == node_id else ""
            self.changes.append(f"{'+' if add else '-'}{target}{leader}")
        self._log(f"{what}: {result}")

    def _transfer(self) -> None:
        for node_id, node in self.nodes.items():
            if node.alive and node.raft.role is Role.LEADER:
                others = sorted(node.raft.voters - {node_id})
                if not others:
                    return
                target = self.rng.choice(others)
                ok = node.raft.transfer_leadership(target)
                self._log(f"transfer {node_id} -> {target}: {ok}")
                return

    def _compact(self, node_id: int) -> None:
        node = self.nodes[node_id]
        raft = node.raft
        end = min(node.applied, raft.log.stable_end)  # snapshot what was applied
        if not node.alive or end <= raft.log.start:
            return
        e = node.storage.entry_at(end - 1)
        assert e is not None
        end = e.index if e.end > end else end  # a whole-entry boundary
        if end <= raft.log.start:
            return
        snapshot = Snapshot(SnapshotId(end, raft.log.term_at(end - 1)), b"state",
                            raft.voters_at(end))
        node.storage.compact(snapshot)
        node.storage.sync()
        raft.compact(snapshot.id)
        self._log(f"compact {node_id} to {end}")

    def _crash(self, node_id: int, mid_write: bool) -> None:
        node = self.nodes[node_id]
        lost = node.storage.crash(self.rng)
        node.alive = False
        self.network.drop_to(node_id)
        self.checker.on_crash(node_id)
        self._log(f"crash {node_id}{' mid-write' if mid_write else ''} (lost {lost} writes)")

    def _restart(self, node_id: int) -> None:
        node = self.nodes[node_id]
        node.raft = node.new_raft()
        node.applied = 0
        node.alive = True
        self._log(f"restart {node_id}")

    def _log(self, line: str) -> None:
        self.trace.append(f"{self.now_ms:>6} {line}")
        if self.verbose:
            print(self.trace[-1])


def run_seed(seed: int, verbose: bool = False) -> Simulation:
    sim = Simulation(seed, verbose=verbose)
    sim.run()
    return sim


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the seeded Raft simulator.")
    parser.add_argument("--seed", type=int, default=0, help="first seed")
    parser.add_argument("--seeds", type=int, default=1, help="how many seeds from --seed")
    parser.add_argument("--verbose", action="store_true", help="print the schedule")
    args = parser.parse_args(argv)
    for seed in range(args.seed, args.seed + args.seeds):
        try:
            sim = run_seed(seed, verbose=args.verbose)
            if args.verbose or args.seeds == 1:
                print(sim.summary())
        except SimFailure as e:
            print(e, file=sys.stderr)
            return 1
    print(f"{args.seeds} seeds from {args.seed}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
