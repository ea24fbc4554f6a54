"""The seeded broker-level simulator inside the test suite.

Runs BROKER_SEEDS schedules (default 50) of 1 or 3 real brokers on
simulated disks and a simulated network, with crashes that lose unsynced
writes, checking that no acknowledged produce is lost, committed group
offsets never go backwards, no transaction is both committed and aborted and
every acknowledged delayed record, retry and dead letter is moved exactly once
(``kcompat.testing.broker_sim``). A failure names the seed and the replay
command.

Long run: ``make sim`` (BROKER_SEEDS=5000 by default) or
``.venv/bin/python -m kcompat.testing.broker_sim --seed 0 --seeds 5000``.
"""

from __future__ import annotations

import itertools
import os

import pytest

from kcompat.broker import delays
from kcompat.broker.replication import runtime
from kcompat.ext import schedule_log
from kcompat.testing.broker_sim import BrokerSimulation, SimFailure
from kcompat.txn import producer_state

SEEDS = int(os.environ.get("BROKER_SEEDS", "50"))
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


def _caught(what: str | tuple[str, ...], seeds: int = 10, need: int = 1) -> int:
    """How many of the first ``seeds`` schedules fail saying ``what``
    (counting stops once ``need`` did: suite time)."""
    phrases = (what,) if isinstance(what, str) else what
    caught = 0
    for seed in range(seeds):
        try:
            BrokerSimulation(seed).run()
        except SimFailure as failure:
            caught += any(p in str(failure) for p in phrases)
        if caught >= need:
            break
    return caught


def test_a_lost_fsync_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks can fail: with the Raft rounds' fsync of partition data
    skipped, crashes lose acknowledged produces and the simulator says so."""
    monkeypatch.setattr(runtime.ClusterRuntime, "_must_fsync",
                        lambda self, group: group.gid == 0)
    assert _caught(("acknowledged produce lost",
                    "acknowledged delayed records never delivered"), need=5) >= 5


def test_a_broken_deduplication_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the producer-state table blind to repeated sequence numbers, the
    idempotent producer's retries after lost answers write batches twice (so
    do the broker's own idempotent writers: delayed and retried records)."""
    monkeypatch.setattr(producer_state.ProducerStateTable, "check", lambda self, header: None)
    assert _caught(("idempotent produce", "written 2 times"), need=3) >= 3


def test_a_delivery_without_its_producer_sequence_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Delayed delivery is exactly-once only because a re-sent delivery carries
    the schedule partition's producer id and sequence: with a fresh producer id
    per attempt, a leader that fails between ``out`` and ``done`` is followed
    by one that delivers the same records again."""
    fresh = itertools.count(1 << 50)
    monkeypatch.setattr(delays, "internal_producer_id", lambda _index: next(fresh))
    assert _caught(("delayed record", "moved record"), seeds=40) >= 1  # 36 (hash seed 0)


def test_a_schedule_without_retry_dedup_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A retried produce whose answer was lost is a duplicate for the partition
    and is scheduled again: without the schedule log's check, twice."""
    monkeypatch.setattr(schedule_log.ScheduleLog, "_repeated", lambda self, doc: False)
    assert _caught("delayed record", seeds=30) >= 1


def test_replay_is_deterministic() -> None:
    """One seed, one run: two runs leave the same trace (what was acknowledged
    where and when, crashes, restarts, cuts)."""
    a, b = BrokerSimulation(11), BrokerSimulation(11)
    a.run()
    b.run()
    assert len(a.trace) > 20
    assert a.trace == b.trace
