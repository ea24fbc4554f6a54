"""Dynamic membership of the Raft core, step by step (Raft thesis §4.1,
single-server changes; KIP-853): observers, add/remove voter, refusals,
truncation reverting a change, the leader removing itself, snapshots and
restarts keeping the voter set, removed voters that cannot disrupt."""

from __future__ import annotations

from random import Random

import pytest

from kcompat.raft import (
    NO_NODE,
    BeginQuorumEpoch,
    ChangeRefused,
    Entry,
    FetchRequest,
    HardState,
    Raft,
    RaftConfig,
    Refusal,
    Role,
    Snapshot,
    SnapshotId,
    VoteRequest,
    VoteResponse,
    persist_ready,
)
from kcompat.testing.memory_storage import MemoryStorage
from kcompat.testing.raft_env import RaftEnv


def _cluster(n: int = 3, observers: tuple[int, ...] = (), **options: int | bool) -> RaftEnv:
    """``n`` voters led by 1 with one committed proposal, and ``observers``."""
    env = RaftEnv()
    env.add_nodes(n, **options)
    for node in observers:
        env.add_observer(node, **options)
    env.nodes[1].campaign()
    env.stabilize()
    assert env.nodes[1].role is Role.LEADER
    env.propose(1, "a")
    env.stabilize()
    for _ in range(50):  # the observers find the leader (asking the voters in turn)
        if all(env.nodes[o].leader == 1 for o in observers):
            break
        _tick_all(env, 1)
    assert all(env.nodes[o].leader == 1 for o in observers)
    return env


def _tick_all(env: RaftEnv, ticks: int) -> None:
    for _ in range(ticks):
        for node in sorted(env.nodes):
            if node not in env.down:
                env.tick(node)
        env.stabilize()


def _voters(env: RaftEnv, node: int) -> set[int]:
    return set(env.nodes[node].voters)


def _added(result: Entry | ChangeRefused) -> Entry:
    assert isinstance(result, Entry), result
    return result


def _refusal(result: Entry | ChangeRefused) -> Refusal:
    assert isinstance(result, ChangeRefused), result
    return result.reason


def _sent(env: RaftEnv, node: int) -> list[object]:
    """Every message ``node`` hands out in its next Ready (and advance it)."""
    raft = env.nodes[node]
    if not raft.has_ready():
        return []
    ready = raft.ready()
    persist_ready(env.storages[node], ready)
    raft.advance(ready)
    return list(ready.messages)


# -- observers ---------------------------------------------------------------------


def test_observer_finds_the_leader_and_catches_up() -> None:
    """KIP-853 observers: a node outside the voter set fetches from the
    leader; knowing no leader, it asks the voters in turn and a follower's
    rejection names the leader (KRaft's fetch from the bootstrap servers)."""
    env = _cluster(3)
    env.add_observer(4)
    observer = env.nodes[4]
    first = _sent(env, 4)  # at start, before any tick: it asks a voter at once
    assert [type(m) for m in first] == [FetchRequest] and first[0].dst == 1
    env.inbox[1].append(first[0])
    env.stabilize()
    assert observer.leader == 1 and observer.role is Role.FOLLOWER and not observer.is_voter
    assert observer.log.end == env.nodes[1].log.end and observer.high_watermark == 2
    assert env.nodes[1].caught_up(4)
    assert env.nodes[1].status().match_ends[4] == env.nodes[1].log.end


def test_observer_never_campaigns_nor_counts() -> None:
    """An observer never campaigns, and the leader counts it neither for the
    commit nor for check quorum."""
    env = _cluster(3, observers=(4,))
    _tick_all(env, 5)
    leader = env.nodes[1]
    # with both followers cut off, leader + observer are no quorum of {1,2,3}
    env.partition([[1, 4], [2, 3]])
    env.propose(1, "b")
    _tick_all(env, 3)
    assert env.nodes[4].log.end == leader.log.end == 3  # replicated to the observer...
    assert leader.high_watermark == 2  # ...but not committed by it
    _tick_all(env, 2 * leader.config.election_timeout_ticks)
    assert leader.role is not Role.LEADER  # check quorum did not count it either
    # the observer never asked for a vote, however long it heard no leader
    env.partition([[4], [1, 2, 3]])
    for _ in range(100):
        env.tick(4)
        for m in _sent(env, 4):
            assert isinstance(m, FetchRequest) and m.dst in (1, 2, 3)
    assert env.nodes[4].role is Role.FOLLOWER and env.nodes[4].term <= leader.term


# -- adding ----------------------------------------------------------------------


def test_add_learner_then_promote() -> None:
    """Add a learner: it catches up as an observer, then ``add_voter`` appends
    the new voter set, in force on each node as soon as that node appends it
    (before the commit), and the commit then needs a majority of four."""
    env = _cluster(3, observers=(4,))
    _tick_all(env, 3)
    leader = env.nodes[1]
    assert leader.caught_up(4)
    entry = _added(leader.add_voter(4))
    assert entry.voters == {1, 2, 3, 4} and entry.control
    assert _voters(env, 1) == {1, 2, 3, 4} and leader.status().config_pending
    assert _voters(env, 2) == {1, 2, 3}  # not appended there yet
    env.process_ready(1)
    env.deliver(2)
    env.process_ready(2)
    assert _voters(env, 2) == {1, 2, 3, 4}  # appended, not committed: in force
    assert leader.high_watermark <= entry.index
    env.stabilize()
    assert leader.high_watermark == entry.end and not leader.status().config_pending
    assert all(_voters(env, n) == {1, 2, 3, 4} for n in env.nodes)
    assert env.nodes[4].is_voter
    # two of four is no longer a quorum: 1 and 4 alone cannot commit
    env.partition([[1, 4], [2, 3]])
    env.propose(1, "b")
    _tick_all(env, 3)
    assert leader.high_watermark == entry.end
    env.partition([])
    _tick_all(env, 3)
    assert leader.high_watermark == leader.log.end


def test_new_voter_votes_before_it_knows() -> None:
    """KIP-853 accepts Vote from any replica and a replica votes though it
    does not know yet that it is a voter: a fourth voter's vote may be needed
    (thesis §4.1's example) before it has the entry that adds it."""
    env = _cluster(3, observers=(4,), check_quorum=False)
    _tick_all(env, 3)
    # the change reaches 2 only; 1 then crashes: {2, 3, 4} must elect 2
    env.partition([[1, 2], [3, 4]])
    _added(env.nodes[1].add_voter(4))
    env.stabilize()
    env.crash(1)
    env.partition([])
    assert _voters(env, 2) == {1, 2, 3, 4} and not env.nodes[4].is_voter
    env.nodes[2].campaign()
    env.stabilize()
    assert env.nodes[2].role is Role.LEADER  # with 3's and 4's votes: 3 of 4
    assert env.nodes[4].vote == 2


# -- removing --------------------------------------------------------------------


def test_remove_follower() -> None:
    """Removing a follower: the rest commit without it; it learns from the log
    that it is an observer now and never campaigns, and it keeps fetching."""
    env = _cluster(3)
    leader = env.nodes[1]
    entry = _added(leader.remove_voter(3))
    env.stabilize()
    assert leader.high_watermark == entry.end
    assert all(_voters(env, n) == {1, 2} for n in env.nodes)
    assert not env.nodes[3].is_voter
    env.partition([[1, 2], [3]])
    env.propose(1, "b")
    env.stabilize()
    assert leader.high_watermark == leader.log.end  # 2 of {1, 2}
    env.partition([])
    _tick_all(env, 4 * leader.config.election_timeout_ticks)
    assert leader.role is Role.LEADER and leader.term == 1
    assert env.nodes[3].log.end == leader.log.end  # still replicated to, as an observer


def test_remove_leader_resigns_after_commit() -> None:
    """A leader that removes itself keeps leading, not counting itself, until
    the change commits; then it sends TimeoutNow to its most caught-up voter,
    which wins at once, and it carries on as an observer."""
    env = _cluster(3)
    leader = env.nodes[1]
    env.partition([[1, 2], [3]])
    entry = _added(leader.remove_voter(1))
    assert leader.role is Role.LEADER and not leader.is_voter
    env.stabilize()
    # 2 has the entry, and the leader's own copy does not count: 2 alone is
    # no majority of {2, 3}
    assert env.nodes[2].log.end == entry.end and _voters(env, 2) == {2, 3}
    assert leader.high_watermark < entry.end and leader.role is Role.LEADER
    assert not isinstance(leader.propose(b"still leading"), ChangeRefused)
    env.stabilize()
    env.take_output()
    env.partition([])
    _tick_all(env, leader.config.fetch_wait_ticks + 2)  # 3 fetches again
    trace = env.take_output()
    # both are caught up: the lower id is the successor
    assert "1->2 TimeoutNow term=1" in trace and "1->3 TimeoutNow" not in trace, trace
    assert leader.high_watermark >= entry.end and leader.role is Role.FOLLOWER
    assert env.nodes[2].role is Role.LEADER and env.nodes[2].term == 2
    _tick_all(env, 2 * leader.config.election_timeout_ticks)
    assert leader.leader == 2 and not leader.is_voter and leader.term == 2
    assert leader.log.end == env.nodes[2].log.end


def test_resigning_leader_picks_the_most_caught_up_voter() -> None:
    """Its successor is the voter with the longest durable match, not merely
    the first id: 2 is cut off, so 3 (caught up) gets the TimeoutNow."""
    env = _cluster(4)
    leader = env.nodes[1]
    env.partition([[1, 3, 4], [2]])
    env.propose(1, "b")
    env.stabilize()
    env.take_output()
    _added(leader.remove_voter(1))
    env.stabilize()  # {3, 4} of {2, 3, 4} commit it
    trace = env.take_output()
    assert "1->3 TimeoutNow term=1" in trace and "1->2 TimeoutNow" not in trace, trace
    assert env.nodes[3].role is Role.LEADER


def test_remove_leader_in_two_node_group() -> None:
    """{1, 2} minus the leader 1: 2's copy alone commits, and 2 takes over."""
    env = _cluster(2)
    _added(env.nodes[1].remove_voter(1))
    env.stabilize()
    assert env.nodes[2].role is Role.LEADER and env.nodes[2].voters == {2}
    env.propose(2, "b")
    env.stabilize()
    assert env.nodes[2].high_watermark == env.nodes[2].log.end


def test_removed_voter_cannot_depose_the_leader() -> None:
    """A voter removed while cut off times out again and again; back, its
    requests change nothing: the leader does not take them up, announces
    itself instead, and the removed node fetches and learns it is an observer."""
    env = _cluster(3)
    leader = env.nodes[1]
    env.partition([[1, 2], [3]])
    entry = _added(leader.remove_voter(3))
    env.stabilize()
    assert leader.high_watermark == entry.end and _voters(env, 3) == {1, 2, 3}
    for _ in range(10 * leader.config.election_timeout_ticks):
        env.tick(3)
        env.stabilize()
    env.partition([])
    _tick_all(env, 5 * leader.config.election_timeout_ticks)
    assert leader.role is Role.LEADER and leader.term == 1
    assert _voters(env, 3) == {1, 2} and env.nodes[3].leader == 1


def test_removed_voter_back_with_a_stale_voter_set_finds_a_leader_it_does_not_know() -> None:
    """Voter 3 is down while 4 is added and 3 removed; the leadership moves to
    4 and 1 goes down. Restarted, 3 still takes {1, 2, 3} for the voters:
    its pre-votes reach only 2, a follower of 4 that ignores them — and 4,
    the only one that would announce itself, is not asked. 2 names the leader
    in its refusal, so 3 follows 4 and learns from the log that it is an
    observer (the replacement of a dead controller left it lost for good)."""
    env = _cluster(3, observers=(4,))
    leader = env.nodes[1]
    env.crash(3)
    for change in ({"add": 4}, {"remove": 3}):
        for _ in range(50):
            env.change(1, **change)
            _tick_all(env, 1)
            if env.take_output().startswith("proposed"):
                break
        env.stabilize()
    assert _voters(env, 1) == {1, 2, 4} and not leader.status().config_pending
    assert leader.transfer_leadership(4)
    _tick_all(env, 3)
    assert env.nodes[4].role is Role.LEADER
    env.crash(1)
    env.restart(3)
    assert _voters(env, 3) == {1, 2, 3}  # its log never saw the changes
    for _ in range(20 * leader.config.election_timeout_ticks):
        _tick_all(env, 1)
        if env.nodes[3].leader == 4 and _voters(env, 3) == {1, 2, 4}:
            break
    assert env.nodes[3].leader == 4 and _voters(env, 3) == {1, 2, 4}
    assert env.nodes[4].role is Role.LEADER


@pytest.mark.parametrize("check_quorum", [True, False])
def test_removed_voter_without_prevote_cannot_depose_the_leader(check_quorum: bool) -> None:
    """Without pre-vote its term rises; the leader still never takes up a
    non-voter's vote request (nor the higher term of its refusal of the
    leader's announcement), nor does a follower that hears from the leader —
    even without check quorum, whose lease would otherwise guard them."""
    env = _cluster(3, pre_vote=False, check_quorum=check_quorum)
    leader = env.nodes[1]
    env.partition([[1, 2], [3]])
    _added(leader.remove_voter(3))
    env.stabilize()
    for _ in range(10 * leader.config.election_timeout_ticks):
        env.tick(3)
        env.stabilize()
    assert env.nodes[3].term > leader.term
    env.partition([])
    _tick_all(env, 5 * leader.config.election_timeout_ticks)
    assert leader.role is Role.LEADER and leader.term == 1
    assert env.nodes[2].leader == 1 and env.nodes[2].term == 1


def test_leader_announces_itself_to_a_non_voter_asking_for_votes() -> None:
    """A vote request from a node outside the leader's voter set gets a
    BeginQuorumEpoch back, not a vote, and does not touch the leader's term."""
    env = _cluster(3)
    leader = env.nodes[1]
    _added(leader.remove_voter(3))
    env.stabilize()
    leader.step(VoteRequest(0, 3, 1, 2, 1, 2, pre_vote=True))
    leader.step(VoteRequest(0, 3, 1, 5, 1, 2))  # a real one, from a higher term
    sent = _sent(env, 1)
    assert [(type(m), m.term) for m in sent] == [(BeginQuorumEpoch, 1)]
    assert leader.role is Role.LEADER and leader.term == 1


def test_voter_again_from_the_log() -> None:
    """Removed, then added back: the node learns from the log that it votes
    again and may then campaign and lead."""
    env = _cluster(3)
    leader = env.nodes[1]
    _added(leader.remove_voter(3))
    env.stabilize()
    assert not env.nodes[3].is_voter
    env.nodes[3].campaign()  # an observer: looks for the leader, asks no vote
    assert not any(isinstance(m, VoteRequest) for m in _sent(env, 3))
    env.stabilize()
    _tick_all(env, 2)
    _added(leader.add_voter(3))
    env.stabilize()
    assert env.nodes[3].is_voter and _voters(env, 3) == {1, 2, 3}
    assert leader.transfer_leadership(3)
    env.stabilize()
    assert env.nodes[3].role is Role.LEADER


# -- refusals --------------------------------------------------------------------


def test_refusals() -> None:
    """Each refusal appends nothing and says why (Kafka's error is in the
    Refusal's comment)."""
    env = _cluster(3, observers=(4, 5), catch_up_max_lag=0)
    _tick_all(env, 3)
    leader, follower = env.nodes[1], env.nodes[2]
    end = leader.log.end
    assert _refusal(follower.add_voter(4)) is Refusal.NOT_LEADER
    assert follower.add_voter(4) == ChangeRefused(Refusal.NOT_LEADER, 1, 1)
    assert _refusal(leader.add_voter(2)) is Refusal.ALREADY_VOTER
    assert _refusal(leader.remove_voter(4)) is Refusal.NOT_A_VOTER
    assert _refusal(leader.add_voter(9)) is Refusal.NOT_CAUGHT_UP  # never fetched
    # 5 falls behind: not caught up (lag bound 0)
    env.partition([[1, 2, 3, 4], [5]])
    env.propose(1, "b")
    env.stabilize()
    assert _refusal(leader.add_voter(5)) is Refusal.NOT_CAUGHT_UP
    # and one that stopped fetching an election timeout ago is not either
    env.partition([[1, 2, 3], [4, 5]])
    _tick_all(env, leader.config.election_timeout_ticks)
    assert _refusal(leader.add_voter(4)) is Refusal.NOT_CAUGHT_UP
    env.partition([])
    _tick_all(env, 2 * leader.config.election_timeout_ticks)  # 4 looks for the leader again
    assert leader.caught_up(4)
    # one change at a time
    _added(leader.add_voter(4))
    assert _refusal(leader.add_voter(5)) is Refusal.CHANGE_PENDING
    assert _refusal(leader.remove_voter(2)) is Refusal.CHANGE_PENDING
    env.stabilize()
    _added(leader.remove_voter(4))
    env.stabilize()
    # transferring
    assert leader.transfer_leadership(2)
    assert _refusal(leader.remove_voter(3)) is Refusal.NOT_LEADER
    env.stabilize()
    assert env.nodes[2].role is Role.LEADER
    assert leader.log.end == env.nodes[2].log.end > end


def test_refused_before_the_term_is_committed() -> None:
    """A new leader changes nothing before its leader-change entry (and so
    every entry of earlier terms) is committed (thesis §4.1's fix, KIP-853)."""
    env = _cluster(3, check_quorum=False, pre_vote=False)
    env.nodes[2].campaign()
    env.process_ready(2)
    env.deliver(1)
    env.deliver(3)
    env.process_ready(1)
    env.process_ready(3)
    env.deliver(2)  # 2 wins: it appends its leader-change entry
    new = env.nodes[2]
    assert new.role is Role.LEADER
    assert _refusal(new.remove_voter(3)) is Refusal.TERM_NOT_COMMITTED
    env.stabilize()
    _added(new.remove_voter(3))


def test_partition_leader_writes_its_leader_change_entry_on_a_change() -> None:
    """A partition leader elected over a fully committed log writes no
    leader-change entry (``always_leader_change`` off), so nothing of its
    term is committed: the first change request is refused and appends one
    (seed 17779 of the simulator deadlocked without: two leaders' changes,
    each removing itself, left only the voter with the shortest log)."""
    env = _cluster(3, always_leader_change=False, check_quorum=False, pre_vote=False)
    env.nodes[2].campaign()
    env.stabilize()
    new = env.nodes[2]
    assert new.role is Role.LEADER and new.log.last_term == 1  # no entry of term 2
    end = new.log.end
    assert _refusal(new.remove_voter(2)) is Refusal.TERM_NOT_COMMITTED
    assert new.log.end == end + 1 and new.log.last_term == 2
    assert _refusal(new.remove_voter(2)) is Refusal.TERM_NOT_COMMITTED  # one entry only
    assert new.log.end == end + 1
    env.stabilize()
    _added(new.remove_voter(2))


def test_new_partition_leader_of_an_empty_log_in_term_0_can_change_voters() -> None:
    """A brand-new partition's first leader is elected in term 0 (Kafka's
    first leader epoch: its hard state starts at term -1) over an empty log,
    whose last term reads 0 too: "an entry of my term" must not be read from
    that, or the first change request would be refused for ever without
    writing the leader-change entry (a reassignment of an empty partition
    hung so)."""
    env = RaftEnv()
    env.add_nodes(3, always_leader_change=False)
    env.add_observer(4, always_leader_change=False)
    for node in env.nodes:
        env.storages[node]._current.hard_state = HardState(-1, NO_NODE)
        env._start(node)
    env.nodes[1].campaign()
    env.stabilize()
    leader = env.nodes[1]
    assert leader.role is Role.LEADER and leader.term == 0 and leader.log.end == 0
    assert _refusal(leader.add_voter(4)) is Refusal.TERM_NOT_COMMITTED
    assert leader.log.end == 1  # the leader-change entry of term 0
    for _ in range(50):
        _tick_all(env, 1)
        result = leader.add_voter(4)
        if isinstance(result, Entry):
            break
    _added(result)
    env.stabilize()
    assert _voters(env, 4) == {1, 2, 3, 4}


def test_refused_last_voter() -> None:
    env = RaftEnv()
    env.add_nodes(1)
    env.nodes[1].campaign()
    env.stabilize()
    assert _refusal(env.nodes[1].remove_voter(1)) is Refusal.LAST_VOTER


# -- truncation, snapshots, restarts -----------------------------------------------


def test_truncation_reverts_an_uncommitted_change() -> None:
    """The new set is in force once appended, and the old one again once the
    entry is truncated by a leader that never had it."""
    env = _cluster(5, check_quorum=False)
    leader = env.nodes[1]
    _added(leader.remove_voter(5))
    env.process_ready(1)
    env.partition([[1, 2], [3, 4, 5]])  # only 2 gets it; {1, 2} commit nothing
    env.stabilize()
    assert _voters(env, 1) == _voters(env, 2) == {1, 2, 3, 4}
    assert _voters(env, 3) == {1, 2, 3, 4, 5}
    env.nodes[3].campaign()
    env.stabilize()
    assert env.nodes[3].role is Role.LEADER
    env.propose(3, "b")
    env.stabilize()
    env.partition([])
    _tick_all(env, 3 * leader.config.election_timeout_ticks)
    assert leader.role is Role.FOLLOWER and leader.leader == 3
    for node in env.nodes:
        assert _voters(env, node) == {1, 2, 3, 4, 5}, node
        assert env.storages[node].voters() is None  # the entry is gone from storage too
    assert env.nodes[5].is_voter


def test_restart_after_compaction_keeps_the_voter_set() -> None:
    """The voter set at the snapshot point survives compaction (the snapshot
    records it), a restart (read from snapshot + log) and a snapshot install."""
    env = _cluster(3, observers=(4,))
    _tick_all(env, 3)
    leader = env.nodes[1]
    _added(leader.add_voter(4))
    env.stabilize()
    _added(leader.remove_voter(2))
    env.stabilize()
    env.propose(1, "b")
    env.stabilize()
    # compact 1 past both configuration entries, 3 between them
    env.compact(1, leader.log.end)
    env.compact(3, 3)
    assert env.storages[1].snapshot().voters == {1, 3, 4}
    assert env.storages[3].snapshot().voters == {1, 2, 3, 4}
    assert _voters(env, 1) == _voters(env, 3) == {1, 3, 4}
    for node in (1, 3, 4):
        env.crash(node)
        env.restart(node)
        assert _voters(env, node) == {1, 3, 4}, node
    _tick_all(env, 3 * leader.config.election_timeout_ticks)
    lead = next(n for n in (1, 3, 4) if env.nodes[n].role is Role.LEADER)
    # a brand-new observer gets the snapshot, and with it the voter set
    env.compact(lead, env.nodes[lead].high_watermark)
    env.add_observer(5)
    _tick_all(env, 3)
    assert env.storages[5].snapshot().voters == {1, 3, 4}
    assert _voters(env, 5) == {1, 3, 4} and not env.nodes[5].is_voter
    env.crash(5)
    env.restart(5)
    assert _voters(env, 5) == {1, 3, 4}


def test_core_reads_voter_history_from_storage() -> None:
    """Restart: snapshot voters, then each configuration entry in the log;
    the last one is in force even uncommitted."""
    storage = MemoryStorage()
    storage.compact(Snapshot(SnapshotId(0, 0)))
    storage.install_snapshot(Snapshot(SnapshotId(2, 1), b"", frozenset({1, 2})))
    storage.append([
        Entry(2, 1, b"x"),
        Entry(3, 1, control=True, voters=frozenset({1, 2, 3})),
        Entry(4, 2, control=True, voters=frozenset({2, 3})),
    ])  # fmt: skip
    storage.sync()
    raft = Raft(RaftConfig(1, frozenset({1, 2, 3, 4})), storage, Random(1))
    assert raft.voters == {2, 3} and not raft.is_voter
    assert raft.voters_at(2) == raft.voters_at(3) == {1, 2}
    assert raft.voters_at(4) == {1, 2, 3} and raft.voters_at(5) == {2, 3}
    # an observer does not count itself: no lone-voter shortcut
    assert raft.high_watermark == 2


def test_storage_without_voter_history_uses_the_configured_voters() -> None:
    """A storage that never held a configuration entry (every partition log
    today) need not implement ``voter_history``."""

    class Plain(MemoryStorage):
        voter_history = None  # type: ignore[assignment]

    raft = Raft(RaftConfig(1, frozenset({1, 2, 3})), Plain(), Random(1))
    assert raft.voters == {1, 2, 3} and raft.voters_at(0) is None


# -- quiescence ------------------------------------------------------------------


def test_change_wakes_a_quiesced_group_and_observers_quiesce() -> None:
    """A voter change wakes a quiesced leader; observers are not waited for,
    and one parked at the log end quiesces with the rest."""
    env = _cluster(3, observers=(4,), quiesce=True)
    _tick_all(env, 10)
    assert all(env.nodes[n].quiesced for n in env.nodes)
    leader = env.nodes[1]
    entry = _added(leader.add_voter(4))
    assert not leader.quiesced
    env.stabilize()
    assert leader.high_watermark == entry.end
    _tick_all(env, 10)
    assert all(env.nodes[n].quiesced for n in env.nodes)
    # a lagging observer does not keep the group awake
    env.partition([[1, 2, 3, 4], [5]])
    env.add_observer(5, quiesce=True)
    _added(leader.remove_voter(4))
    _tick_all(env, 10)
    assert all(env.nodes[n].quiesced for n in (1, 2, 3, 4))


@pytest.mark.parametrize("node", [1, 2])
def test_status_reports_the_voters(node: int) -> None:
    env = _cluster(3, observers=(4,))
    _tick_all(env, 3)
    _added(env.nodes[1].add_voter(4))
    env.stabilize()
    status = env.nodes[node].status()
    assert status.voters == {1, 2, 3, 4} and not status.config_pending


def test_vote_response_from_a_non_voter_is_not_counted() -> None:
    raft = Raft(RaftConfig(1, frozenset({1, 2, 3}), pre_vote=False), MemoryStorage(), Random(1))
    raft.campaign()
    raft.step(VoteResponse(0, 7, 1, 1, True))  # a stranger's grant
    assert raft.role is Role.CANDIDATE
    raft.step(VoteResponse(0, 2, 1, 1, True))
    assert raft.role is Role.LEADER
