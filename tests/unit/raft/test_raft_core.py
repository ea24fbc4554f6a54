"""Unit tests of the Raft core, each citing the rule it checks."""

from __future__ import annotations

from random import Random

import pytest

from kcompat.raft import (
    NO_NODE,
    Entry,
    EpochEnd,
    FetchRequest,
    FetchResponse,
    HardState,
    NotLeader,
    Raft,
    RaftConfig,
    Role,
    Snapshot,
    SnapshotId,
    VoteRequest,
    VoteResponse,
    persist_ready,
)
from kcompat.raft.log import RaftLog
from kcompat.raft.replication import (
    next_high_watermark,
    quorum_end,
    truncation_point,
    validate_fetch,
)
from kcompat.testing.memory_storage import MemoryStorage
from kcompat.testing.raft_env import RaftEnv

VOTERS = frozenset({1, 2, 3})


def _log_with(terms: list[int]) -> RaftLog:
    storage = MemoryStorage()
    storage.append([Entry(i, t, b"x") for i, t in enumerate(terms)])
    storage.sync()
    return RaftLog(storage)


def _leader_env(n: int = 3, **options: int | bool) -> RaftEnv:
    env = RaftEnv()
    env.add_nodes(n, **options)
    env.nodes[1].campaign()
    env.stabilize()
    assert env.nodes[1].role is Role.LEADER
    return env


def test_election_safety_one_vote_per_term() -> None:
    """Reference: section 5.2 — each server votes for at most one candidate in
    a term (first-come-first-served), and the vote is persisted."""
    raft = Raft(RaftConfig(1, VOTERS, pre_vote=False, check_quorum=False), MemoryStorage(), Random(1))
    raft.step(VoteRequest(0, 2, 1, 1, 0, 0))
    raft.step(VoteRequest(0, 3, 1, 1, 0, 0))
    ready = raft.ready()
    assert ready.hard_state == HardState(1, 2)
    grants = [m for m in ready.messages if isinstance(m, VoteResponse)]
    assert [(m.dst, m.granted) for m in grants] == [(2, True), (3, False)]


def test_vote_requires_up_to_date_log() -> None:
    """Reference: section 5.4.1 — a voter denies its vote if its own log is
    more up-to-date (compare last term, then length)."""
    log = _log_with([1, 1, 2])
    assert log.is_up_to_date(2, 3) and log.is_up_to_date(3, 1)
    assert not log.is_up_to_date(2, 2) and not log.is_up_to_date(1, 10)


def test_higher_term_turns_leader_into_follower() -> None:
    """Reference: section 5.1 — a server that sees a higher term reverts to
    follower and adopts that term."""
    env = _leader_env(check_quorum=False)
    leader = env.nodes[1]
    leader.step(FetchResponse(0, 2, 1, 5, 3, 0, 0, rejected=True))
    assert (leader.role, leader.term, leader.leader) == (Role.FOLLOWER, 5, 3)


def test_pre_vote_does_not_change_terms() -> None:
    """Reference: Raft thesis section 9.6 — pre-vote asks whether an election
    could succeed without incrementing anyone's term."""
    raft = Raft(RaftConfig(1, VOTERS), MemoryStorage(), Random(1))
    raft.step(VoteRequest(0, 2, 1, 1, 0, 0, pre_vote=True))
    assert raft.term == 0 and raft.vote == NO_NODE
    (reply,) = raft.ready().messages
    assert isinstance(reply, VoteResponse) and reply.granted and reply.term == 1


def test_lease_ignores_votes_unless_transfer() -> None:
    """Reference: Raft thesis section 4.2.3 — a server that heard from a
    current leader within the minimum election timeout ignores vote requests;
    leadership transfer (section 3.10) overrides this."""
    env = _leader_env()
    follower = env.nodes[2]
    follower.step(VoteRequest(0, 3, 2, 2, 1, 1))
    assert follower.term == 1
    follower.step(VoteRequest(0, 3, 2, 2, 1, 1, transfer=True))
    assert follower.term == 2 and follower.vote == 3


@pytest.mark.parametrize("pre_vote", [True, False])
def test_rejoining_node_does_not_depose_a_healthy_leader(pre_vote: bool) -> None:
    """Reference: Raft thesis section 9.6, KIP-996 — a node cut off for many
    election timeouts, all clocks running, never raises its term with
    pre-vote (its pre-vote rounds fail), and once back its pre-vote is
    ignored by voters in their lease: the leader keeps its leadership and
    term. Without pre-vote (the False case) its raised term deposes it."""
    env = _leader_env(pre_vote=pre_vote)
    env.run(20)
    env.partition([[1, 2], [3]])
    env.out.clear()
    env.run(300)
    rounds = sum(line.startswith("  3->1 VoteRequest") for line in env.out)
    assert rounds >= 15  # one per election timeout (10-19 ticks)
    assert (env.nodes[1].role, env.nodes[1].term) == (Role.LEADER, 1)
    env.partition([])
    env.nodes[3].campaign()  # back, before it hears the leader
    env.run(60)
    one, three = env.nodes[1], env.nodes[3]
    if pre_vote:
        assert (one.role, one.term) == (Role.LEADER, 1)
        assert (three.role, three.term, three.leader) == (Role.FOLLOWER, 1, 1)
    else:
        assert one.term > rounds  # deposed: elections at and above 3's raised term


def test_check_quorum_steps_down() -> None:
    """Reference: Raft thesis section 6.2 — a leader steps down if an election
    timeout passes without hearing from a majority."""
    env = _leader_env()
    leader = env.nodes[1]
    env.tick(1, leader.config.election_timeout_ticks)
    assert leader.role is Role.LEADER  # its followers were active
    env.tick(1, leader.config.election_timeout_ticks)
    assert leader.role is Role.FOLLOWER and leader.leader == NO_NODE


def test_check_quorum_counts_a_voter_the_runtime_heard() -> None:
    """A voter whose broker the runtime hears from (``heard``: its pair
    heartbeat) counts for check quorum without a fetch in the period, as
    etcd-io/raft counts any message; a voter heard from nobody does not, and
    a non-voter never counts."""
    env = _leader_env()
    leader = env.nodes[1]
    timeout = leader.config.election_timeout_ticks
    env.tick(1, timeout)  # the fetches of the first period
    for _period in range(3):
        for _ in range(timeout):
            leader.heard(2)
            env.tick(1, 1)
        assert leader.role is Role.LEADER
    for _ in range(timeout):
        leader.heard(9)  # no voter: not counted
        env.tick(1, 1)
    assert leader.role is Role.FOLLOWER and leader.leader == NO_NODE
    leader.heard(2)  # a follower ignores it
    assert leader.role is Role.FOLLOWER


def test_randomized_election_timeout_uses_injected_rng() -> None:
    """Reference: section 5.2 — election timeouts are chosen randomly from a
    fixed interval; here from [T, 2T) ticks with the injected Random."""
    timeouts = set()
    for seed in range(20):
        raft = Raft(RaftConfig(1, VOTERS), MemoryStorage(), Random(seed))
        ticks = 0
        while raft.role is Role.FOLLOWER:
            raft.tick()
            ticks += 1
        timeouts.add(ticks)
    assert min(timeouts) >= 10 and max(timeouts) < 20 and len(timeouts) > 3


def test_single_node_commits_after_persisting() -> None:
    """Reference: section 5.3 — an entry is committed once stored on a
    majority; a leader counts itself only for what it has persisted."""
    storage = MemoryStorage()
    raft = Raft(RaftConfig(1, frozenset({1})), storage, Random(1))
    raft.campaign()
    assert raft.role is Role.LEADER
    entry = raft.propose(b"a")
    assert isinstance(entry, Entry) and raft.high_watermark == 0
    ready = raft.ready()
    assert ready.high_watermark == 0  # not durable yet
    persist_ready(storage, ready)
    raft.advance(ready)
    assert raft.high_watermark == 2
    assert raft.ready().high_watermark == 2


def test_followers_refuse_proposals() -> None:
    """A proposal to a non-leader is data (NOT_LEADER_OR_FOLLOWER), not an error."""
    env = _leader_env()
    assert env.nodes[2].propose(b"x") == NotLeader(1, 1)


def test_commit_only_current_term() -> None:
    """Reference: section 5.4.2 — never commit entries from previous terms by
    counting replicas; only an entry of the current term."""
    log = _log_with([1, 1, 2, 3])
    assert next_high_watermark(log, 3, 0, 3) == 0  # entry 2 has term 2
    assert next_high_watermark(log, 3, 0, 4) == 4
    assert next_high_watermark(log, 2, 0, 3) == 3
    assert next_high_watermark(log, 3, 4, 4) == 4
    assert quorum_end([5, 3, 9], 2) == 5 and quorum_end([5, 3, 9, 1, 0], 3) == 3


def test_validate_fetch_detects_divergence() -> None:
    """Reference: section 5.3 (consistency check), done per term as KIP-595's
    DivergingEpoch: the leader answers with its end offset for the largest
    term <= the follower's last fetched term."""
    leader = _log_with([1, 1, 3, 3, 4])
    assert validate_fetch(leader, 2, 1).match_end == 2
    assert validate_fetch(leader, 5, 4).match_end == 5
    assert validate_fetch(leader, 0, 0).match_end == 0
    assert validate_fetch(leader, 3, 2).diverging == EpochEnd(1, 2)
    assert validate_fetch(leader, 4, 1).diverging == EpochEnd(1, 2)
    assert validate_fetch(leader, 7, 4).diverging == EpochEnd(4, 5)


def test_truncation_point_rounds() -> None:
    """Reference: section 5.3 — the follower deletes conflicting entries and
    all that follow; with epochs this takes one round per divergent term."""
    follower = _log_with([1, 1, 2, 2, 2])
    assert truncation_point(follower, EpochEnd(2, 4)) == 4
    assert truncation_point(follower, EpochEnd(1, 1)) == 1
    # The leader's term 3 is unknown here: drop the suffix after term 2's end.
    follower = _log_with([1, 1, 2, 4])
    assert truncation_point(follower, EpochEnd(3, 9)) == 3


def test_validate_fetch_below_log_start_needs_snapshot() -> None:
    """Reference: section 7 — a follower too far behind gets the snapshot
    (KIP-630: the Fetch response carries the SnapshotId)."""
    storage = MemoryStorage()
    storage.append([Entry(i, 1, b"x") for i in range(6)])
    storage.compact(Snapshot(SnapshotId(4, 1)))
    log = RaftLog(storage)
    assert (log.start, log.end, log.epochs) == (4, 6, [(1, 4)])
    assert validate_fetch(log, 2, 1).snapshot_id == SnapshotId(4, 1)
    assert validate_fetch(log, 4, 0).snapshot_id == SnapshotId(4, 1)
    assert validate_fetch(log, 4, 1).match_end == 4
    assert validate_fetch(log, 5, 1).match_end == 5


def test_log_truncation_of_unstable_and_stable_entries() -> None:
    """The core's log view: truncating persisted entries is an effect carried
    by the next Ready (``truncate_from``); unstable entries just vanish."""
    log = _log_with([1, 1, 1])
    log.append(Entry(3, 2, b"u"))
    log.truncate(4)  # nothing to do
    log.truncate(3)  # unstable only
    assert (log.end, log.truncate_pending, log.unstable) == (3, None, [])
    log.truncate(1)
    assert (log.end, log.stable_end, log.truncate_pending, log.last_term) == (1, 1, 1, 1)


def test_stale_fetch_response_is_ignored() -> None:
    """Duplicated or reordered responses: a response for another fetch
    position than the follower's current one is dropped."""
    env = _leader_env()
    follower = env.nodes[2]
    end = follower.log.end
    follower.step(FetchResponse(0, 1, 2, 1, 1, 0, 0, 9, (Entry(0, 1, b"z"),)))
    assert follower.log.end == end


def test_fetch_from_lower_term_is_told_the_new_term() -> None:
    """Reference: section 5.1 — a stale request is rejected and the reply
    carries the current term so the sender can update itself."""
    env = _leader_env()
    leader = env.nodes[1]
    env.take_output()
    leader.step(FetchRequest(0, 2, 1, 0, 0, 0))
    (reply,) = leader.ready().messages
    assert isinstance(reply, FetchResponse) and reply.rejected and reply.term == 1


def test_advance_requires_the_last_ready() -> None:
    """The Ready contract: ready() and advance() strictly alternate."""
    raft = Raft(RaftConfig(1, frozenset({1})), MemoryStorage(), Random(1))
    raft.campaign()
    raft.ready()
    with pytest.raises(AssertionError):
        raft.ready()


def test_memory_storage_crash_loses_unsynced_writes() -> None:
    """The simulator's storage: writes become durable only on sync."""
    storage = MemoryStorage()
    storage.append([Entry(0, 1, b"a")])
    storage.set_hard_state(HardState(1, 1))
    storage.sync()
    storage.append([Entry(1, 1, b"b")])
    storage.set_hard_state(HardState(2, NO_NODE))
    assert storage.crash() == 2
    assert storage.log_end() == 1 and storage.hard_state() == HardState(1, 1)
    storage.truncate(0)
    storage.append([Entry(0, 3, b"c")])
    assert storage.crash(Random(3)) in (0, 1, 2)
    assert storage.log_end() == 1
