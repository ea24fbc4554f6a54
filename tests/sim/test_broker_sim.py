"""The seeded broker-level simulator inside the test suite.

Runs BROKER_SEEDS schedules (default 1000) of 1 or 3 real brokers on
simulated disks and a simulated network, with crashes that lose unsynced
writes, checking that no acknowledged produce is lost, committed group
offsets never go backwards and no transaction is both committed and aborted
(``kcompat.testing.broker_sim``). A failure names the seed and the replay
command.

Long run: ``make sim`` (BROKER_SEEDS=5000 by default) or
``.venv/bin/python -m kcompat.testing.broker_sim --seed 0 --seeds 5000``.
"""

from __future__ import annotations

import os

import pytest

from kcompat.testing.broker_sim import BrokerSimulation, SimFailure

SEEDS = int(os.environ.get("BROKER_SEEDS", "1000"))
SEED_BASE = int(os.environ.get("SEED_BASE", "0"))
CHUNK = 50


@pytest.mark.parametrize(
    "first", range(SEED_BASE, SEED_BASE + SEEDS, CHUNK), ids=lambda s: f"seeds{s}"
)
def test_broker_simulation(first: int) -> None:
    for seed in range(first, min(first + CHUNK, SEED_BASE + SEEDS)):
        try:
            BrokerSimulation(seed).run()
        except SimFailure as failure:
            pytest.fail(str(failure), pytrace=False)


def test_a_lost_fsync_is_caught() -> None:
    """The checks can fail: with the Raft rounds' fsync of partition data
    skipped, crashes lose acknowledged produces and the simulator says so."""
    from kcompat.broker.replication import runtime

    original = runtime.ClusterRuntime._must_fsync
    runtime.ClusterRuntime._must_fsync = lambda self, group: group.gid == 0  # type: ignore
    try:
        caught = 0
        for seed in range(10):
            try:
                BrokerSimulation(seed).run()
            except SimFailure as failure:
                caught += "acknowledged produce lost" in str(failure)
        assert caught >= 5, f"only {caught} of 10 seeds noticed the lost fsyncs"
    finally:
        runtime.ClusterRuntime._must_fsync = original  # type: ignore[method-assign]


def test_replay_is_deterministic() -> None:
    """One seed, one run: two runs leave the same trace (what was acknowledged
    where and when, crashes, restarts, cuts)."""
    a, b = BrokerSimulation(11), BrokerSimulation(11)
    a.run()
    b.run()
    assert len(a.trace) > 20
    assert a.trace == b.trace
