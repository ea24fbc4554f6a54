"""The seeded broker-level simulator inside the test suite.

Runs BROKER_SEEDS schedules (default 50) of 1 or 3 real brokers on
simulated disks and a simulated network, with crashes that lose unsynced
writes, checking that no acknowledged produce is lost, committed group
offsets never go backwards, no transaction is both committed and aborted,
every acknowledged delayed record, retry and dead letter is moved exactly once,
and a consumer group's members (joining, leaving, cut off, restarted) never
share a partition in a generation, are fenced once superseded, lose no
acknowledged commit and settle once the cluster healed
(``kcompat.testing.broker_sim``, ``group_workload``). A failure names the seed
and the replay command, which replays it exactly (alone or not).

Long run: ``make sim`` (BROKER_SEEDS=5000 by default) or
``.venv/bin/python -m kcompat.testing.broker_sim --seed 0 --seeds 5000``.
"""

from __future__ import annotations

import itertools
import os

import pytest
from kio.schema.errors import ErrorCode

from kcompat.broker.ext import delays
from kcompat.broker.groups import groups
from kcompat.broker.replication import runtime
from kcompat.broker.replication.group import NotLeaderError
from kcompat.broker.storage.partition import Partition
from kcompat.ext import schedule_log
from kcompat.group import coordinator
from kcompat.testing.broker_sim import BrokerSimulation
from kcompat.testing.simulator import SimFailure
from kcompat.txn import producer_state
from kcompat.wire import batch as wbatch

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
    and is scheduled again: without the schedule log's check, twice. The check
    is the holes seen per producer batch (``_holes_seen``), which both an
    ``adds`` op and the older per-record ops consult (first caught: seed 3)."""
    monkeypatch.setattr(schedule_log.ScheduleLog, "_holes_seen",
                        lambda self, source, src: None)
    assert _caught("delayed record", seeds=30) >= 1


def test_a_commit_of_an_old_generation_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the group coordinator blind to generations (ILLEGAL_GENERATION
    turned into an acceptance), a member's commit of before its rebalance,
    arriving after the next generation was handed out, is acknowledged and
    the group ledger says so (first caught: seed 3)."""
    check = coordinator.GroupCoordinator.commit_error

    def blind(self: coordinator.GroupCoordinator, group_id: str, generation_id: int,
              member_id: str, instance_id: str | None) -> ErrorCode | None:
        code = check(self, group_id, generation_id, member_id, instance_id)
        return None if code == ErrorCode.illegal_generation else code

    monkeypatch.setattr(coordinator.GroupCoordinator, "commit_error", blind)
    assert _caught("was handed out") >= 1


def test_a_commit_acknowledged_before_it_is_written_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``__consumer_offsets`` writes answered once proposed, not once
    committed, an OffsetFetch after a leader change reads less than a commit
    acknowledged before: a group member resuming from the committed offset
    (``group_workload``) or the plain committer beside it (``broker_sim``),
    whichever reads first (first caught: seed 5, by either)."""

    async def unawaited(self: groups.GroupService, part: Partition, raw: bytes,
                        now: int) -> None:
        group = self.cluster.group_of(part.topic, part.index)
        assert group is not None
        try:
            self.cluster.propose_batch(group, memoryview(raw), wbatch.validate(memoryview(raw)),
                                       now)
        except NotLeaderError:
            raise groups.NotCoordinatorError(ErrorCode.not_coordinator) from None

    monkeypatch.setattr(groups.GroupService, "_write", unawaited)
    assert _caught(("an acknowledged commit was lost", "committed offsets went back")) >= 1


def test_replay_is_deterministic() -> None:
    """One seed, one run: two runs leave the same trace (what was acknowledged
    where and when, crashes, restarts, cuts, group generations), the second
    after the first in the same process."""
    a, b = BrokerSimulation(11), BrokerSimulation(11)
    a.run()
    b.run()
    assert len(a.trace) > 20
    assert a.trace == b.trace
