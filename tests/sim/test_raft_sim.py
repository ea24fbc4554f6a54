"""The seeded Raft simulator inside the test suite.

Runs SEEDS schedules (default 2000) in chunks, each a 3-5 node cluster under
loss, duplication, reordering, partitions, crashes with unsynced writes lost,
clock skew, leadership transfers and compactions — and, in about a third of the seeds,
voter changes (spare nodes as observers, adding and removing voters, the
leader included) — checking the invariants of ``kcompat.testing.invariants``
after every Ready and liveness after healing. A failure names the seed and
the one-line replay command.

Long run: ``SEEDS=100000 SEED_BASE=0 .venv/bin/python -m pytest -q tests/sim``
or ``.venv/bin/python -m kcompat.testing.simulator --seed 0 --seeds 100000``.

The quiescence simulator (``kcompat.testing.quiet_simulator``) runs
QUIET_SEEDS schedules (default 100) of quiescent groups with the runtime's
liveness (heartbeats, suspect, revive, incarnations) and faults while the
group is quiet, checking the same invariants plus bounded recovery: a leader,
a commit on every live member, and every member quiesced again with no tick
and no Raft message while idle. Long run:
``.venv/bin/python -m kcompat.testing.quiet_simulator --seed 0 --seeds 10000``.
QUIET_MEMBER_SEEDS (default 10) more run with voter changes in their chaos
(``--membership 1``): observers quiesce like followers and are told when
their leader steps down.
"""

from __future__ import annotations

import os

import pytest

from kcompat.testing.quiet_simulator import QuietOptions, QuietSimulation
from kcompat.testing.simulator import SimFailure, Simulation

SEEDS = int(os.environ.get("SEEDS", "2000"))
SEED_BASE = int(os.environ.get("SEED_BASE", "0"))
CHUNK = 100
QUIET_SEEDS = int(os.environ.get("QUIET_SEEDS", "100"))
QUIET_CHUNK = 100
QUIET_MEMBER_SEEDS = int(os.environ.get("QUIET_MEMBER_SEEDS", "10"))


@pytest.mark.parametrize(
    "first", range(SEED_BASE, SEED_BASE + SEEDS, CHUNK), ids=lambda s: f"seeds{s}"
)
def test_raft_simulation(first: int) -> None:
    for seed in range(first, min(first + CHUNK, SEED_BASE + SEEDS)):
        try:
            Simulation(seed).run()
        except SimFailure as failure:
            pytest.fail(str(failure), pytrace=False)


def test_seed_13553_converges_once_every_node_pre_votes() -> None:
    """Seed 13553 drew node 4 without pre-vote: the fastest clock, its log 13
    offsets behind. After healing it raised everyone's term at each of its
    timeouts (resetting their election timers, taking the vote of node 1,
    further behind) and held off an election past the recovery deadline —
    Raft's disruptive server, not a safety bug. Liveness is checked with
    pre-vote everywhere, as the broker runs it: node 4 restarts with it."""
    sim = Simulation(13553)
    assert [n.config.pre_vote for n in sim.nodes.values()] == [True, True, True, False]
    sim.run()
    assert any(line.endswith("pre-vote on 4") for line in sim.trace)
    assert all(n.config.pre_vote for n in sim.nodes.values())


def test_membership_schedules_change_voters() -> None:
    """The membership seeds do change voters: additions, removals of
    followers and of the leader, all accepted under faults."""
    sims = [Simulation(seed) for seed in range(30)]
    for sim in sims:
        sim.run()
    changes = [c for sim in sims if sim.membership for c in sim.changes]
    assert sum(1 for sim in sims if sim.membership) >= 6
    assert sum(c.startswith("+") for c in changes) >= 5
    assert sum(c.startswith("-") and not c.endswith("(leader)") for c in changes) >= 5
    assert sum(c.endswith("(leader)") for c in changes) >= 2


def test_replay_is_deterministic() -> None:
    """One seed, one schedule: two runs leave identical traces and logs."""
    a, b = Simulation(7), Simulation(7)
    a.run()
    b.run()
    assert a.membership and a.changes
    assert a.trace == b.trace
    assert [n.storage.all_entries() for n in a.nodes.values()] == [
        n.storage.all_entries() for n in b.nodes.values()
    ]


@pytest.mark.parametrize(
    "first", range(SEED_BASE, SEED_BASE + QUIET_SEEDS, QUIET_CHUNK), ids=lambda s: f"seeds{s}"
)
def test_quiet_simulation(first: int) -> None:
    """Quiescent groups under faults while quiet: safety, bounded recovery and
    quiet again (idle cost zero) after every settle."""
    for seed in range(first, min(first + QUIET_CHUNK, SEED_BASE + QUIET_SEEDS)):
        try:
            QuietSimulation(seed).run()
        except SimFailure as failure:
            pytest.fail(str(failure), pytrace=False)


def test_quiet_simulation_with_voter_changes() -> None:
    """The quiescence simulator with spare nodes and voter changes."""
    for seed in range(SEED_BASE, SEED_BASE + QUIET_MEMBER_SEEDS):
        try:
            QuietSimulation(seed, QuietOptions(membership=1.0)).run()
        except SimFailure as failure:
            pytest.fail(str(failure), pytrace=False)


def test_quiet_replay_is_deterministic() -> None:
    """One seed, one schedule, with liveness and quiescence too."""
    a, b = QuietSimulation(3), QuietSimulation(3)
    a.run()
    b.run()
    assert a.trace == b.trace and a.summary() == b.summary()
