"""The quiescence protocol of the Raft core, step by step (``RaftConfig.quiesce``;
the "Quiescence" paragraph of ``kcompat.raft.node``).

Each test drives a ``RaftEnv`` by hand: messages move only on ``stabilize`` /
``deliver``, time only on ``tick``, and liveness only on ``suspect`` /
``revive`` (the verdicts the runtime's pair heartbeats give).
"""

from __future__ import annotations

import pytest

from kcompat.raft import BeginQuorumEpoch, FetchRequest, FetchResponse, Role
from kcompat.testing.raft_env import RaftEnv

WAIT = 3  # fetch_wait_ticks (the runtime's FETCH_WAIT_TICKS)
ET = 10  # election_timeout_ticks


def _quiet_env(n: int = 3, wait: int = WAIT, **options: int | bool) -> RaftEnv:
    """Node 1 leads a group of ``n`` that has quiesced (everyone parked)."""
    env = RaftEnv()
    env.add_nodes(n, quiesce=True, fetch_wait_ticks=wait, election_timeout_ticks=ET, **options)
    env.nodes[1].campaign()
    env.stabilize()
    assert env.nodes[1].role is Role.LEADER
    env.tick(1)
    env.stabilize()
    assert _quiesced(env) == [True] * n
    env.take_output()
    return env


def _quiesced(env: RaftEnv) -> list[bool]:
    return [env.nodes[i].quiesced for i in sorted(env.nodes)]


def _tick_all(env: RaftEnv, ticks: int) -> None:
    """``ticks`` rounds of: tick every core that is not quiesced (as the
    runtime does), then let messages settle."""
    for _ in range(ticks):
        for i in sorted(env.nodes):
            if i not in env.down and not env.nodes[i].quiesced:
                env.tick(i)
        env.stabilize()


def _settle_without(env: RaftEnv, held: set[int]) -> None:
    """``stabilize`` but leave the inboxes of ``held`` undelivered."""
    busy = True
    while busy:
        busy = False
        for i in sorted(env.nodes):
            busy |= env.process_ready(i)
        for i in sorted(env.nodes):
            if i not in held:
                busy |= env.deliver(i)


def _caught_up(env: RaftEnv, node_id: int) -> bool:
    leader, node = env.nodes[1], env.nodes[node_id]
    return node.log.end == leader.log.end and node.high_watermark == leader.high_watermark


def test_leader_quiesces_only_when_every_follower_is_parked_knowing_the_hw() -> None:
    """A leader quiesces on a tick where its log is committed and durable and
    every live follower has a fetch parked at the log end and was told the
    high watermark; the followers quiesce on its ``quiesce`` answer and park a
    ``quiet`` fetch."""
    env = RaftEnv()
    env.add_nodes(3, quiesce=True, fetch_wait_ticks=3, election_timeout_ticks=ET)
    env.nodes[1].campaign()
    env.stabilize()
    leader = env.nodes[1]
    env.propose(1, "x")
    _settle_without(env, held={3})  # 2 acknowledged: committed, but 3 lacks the entry
    assert leader.high_watermark == leader.log.end
    assert leader._progress[2].parked is not None and leader._progress[3].parked is None
    env.tick(1)  # 3's fetch is not parked at the log end
    assert not leader.quiesced
    env.stabilize()  # 3 gets the entry and the high watermark, and parks
    env.tick(1)
    env.stabilize()
    assert _quiesced(env) == [True, True, True]
    for follower in (2, 3):
        assert _caught_up(env, follower)
        parked = leader._progress[follower].parked
        assert parked is not None and parked.quiet and parked.fetch_offset == leader.log.end


def test_uncommitted_entry_keeps_the_leader_awake() -> None:
    """Nothing is quiet while an entry waits for its quorum."""
    env = _quiet_env()
    env.crash(2)
    env.crash(3)
    env.propose(1, "x")
    _tick_all(env, 3 * WAIT)
    leader = env.nodes[1]
    assert leader.high_watermark < leader.log.end and not leader.quiesced


def test_quiet_fetch_does_not_wake_a_quiesced_leader() -> None:
    """The quiet fetches a quiesced group's followers send are parked by the
    quiesced leader without waking it; a plain fetch does wake it."""
    env = _quiet_env()
    leader = env.nodes[1]
    assert leader.quiesced and not leader.has_ready()
    progress = leader._progress  # the parked fetches are the leader's business
    assert all(p.parked is not None and p.parked.quiet for p in progress.values())
    end, term = leader.log.end, leader.log.last_term
    leader.step(FetchRequest(0, 2, 1, leader.term, end, term, quiet=True))
    assert leader.quiesced and not leader.has_ready()
    leader.step(FetchRequest(0, 2, 1, leader.term, 0, 0))  # a plain fetch, from the start
    assert not leader.quiesced
    (answer,) = leader.ready().messages
    assert isinstance(answer, FetchResponse) and answer.dst == 2 and answer.entries


def test_proposal_answers_the_parked_quiet_fetches_at_once() -> None:
    """A proposal wakes the leader and its Ready already carries the entry to
    every follower (the parked quiet fetches), so the commit needs no tick."""
    env = _quiet_env()
    leader = env.nodes[1]
    env.propose(1, "x")
    assert not leader.quiesced
    ready = leader.ready()
    sent = [m for m in ready.messages if isinstance(m, FetchResponse) and m.entries]
    assert sorted(m.dst for m in sent) == [2, 3]
    leader.advance(ready)
    env.inbox[2].extend(m for m in sent if m.dst == 2)
    env.inbox[3].extend(m for m in sent if m.dst == 3)
    env.stabilize()  # no tick anywhere
    assert all(_caught_up(env, i) for i in (2, 3))
    assert leader.high_watermark == leader.log.end


def test_lost_quiet_fetch_is_healed_by_the_woken_leader() -> None:
    """Follower 3's quiet fetch is lost, so a proposal reaches only 2 and 3
    stays quiesced; the woken leader re-announces itself to the silent 3
    (BeginQuorumEpoch), which wakes it and it catches up; the group quiesces
    again."""
    env = _quiet_env()
    leader = env.nodes[1]
    leader._progress[3].parked = None  # as if 3's quiet fetch never arrived
    env.propose(1, "x")
    env.stabilize()
    assert env.nodes[3].quiesced and not _caught_up(env, 3)
    assert leader.high_watermark == leader.log.end  # 1 and 2 are a quorum
    for tick in range(1, 2 * WAIT + 3):  # noqa: B007 (read after the loop)
        env.tick(1)
        if any(isinstance(m, BeginQuorumEpoch) and m.dst == 3 for m in leader._msgs):
            break
        assert not leader.quiesced  # 3 is live and not parked: no quiescence without it
        env.stabilize()
    else:
        raise AssertionError("no BeginQuorumEpoch to 3")
    assert tick == WAIT + 2
    env.stabilize()
    assert not env.nodes[3].quiesced
    _tick_all(env, 2 * WAIT)
    assert _caught_up(env, 3)
    _tick_all(env, 3 * WAIT)
    assert _quiesced(env) == [True, True, True]


@pytest.mark.parametrize("seed_node", [2, 3])
def test_suspected_leader_makes_a_quiesced_follower_campaign_within_half_an_et(
    seed_node: int,
) -> None:
    """``suspect(leader)`` wakes a quiesced follower with its lease expired:
    it campaigns within half an election timeout (randomized)."""
    env = _quiet_env()
    env.crash(1)
    follower = env.nodes[seed_node]
    env.suspect(seed_node, 3 if seed_node == 2 else 2)  # another peer: stays quiet
    assert follower.quiesced
    env.suspect(seed_node, 1)
    assert not follower.quiesced
    for tick in range(1, ET // 2 + 1):  # noqa: B007 (read after the loop)
        env.tick(seed_node)
        if follower.role is not Role.FOLLOWER:
            break
    assert follower.role in (Role.PRE_CANDIDATE, Role.CANDIDATE), f"after {tick} ticks"


def test_follower_of_a_suspected_leader_grants_its_vote() -> None:
    """With both followers suspecting the crashed leader, they elect one of
    them without waiting out a lease."""
    env = _quiet_env()
    env.crash(1)
    env.suspect(2, 1)
    env.suspect(3, 1)
    _tick_all(env, ET // 2 + 2)
    roles = {env.nodes[i].role for i in (2, 3)}
    assert Role.LEADER in roles


def test_leader_quiesces_without_a_down_follower_only_while_a_quorum_is_live() -> None:
    """A follower held down is left out of the quiescence condition (the
    quorum of the leader and 2 is live and caught up) and gets no quiesce
    answer; with 2 down too the quorum is not live: the suspect wakes the
    leader, and check quorum deposes it after its fresh period."""
    env = _quiet_env()
    leader = env.nodes[1]
    env.crash(3)
    env.suspect(1, 3)
    env.suspect(2, 3)
    assert leader.quiesced  # a quorum (1, 2) is still live
    env.propose(1, "x")
    _tick_all(env, WAIT + 1)
    assert leader.high_watermark == leader.log.end
    assert leader.quiesced and env.nodes[2].quiesced
    assert not _caught_up(env, 3)
    env.take_output()
    env.crash(2)
    env.suspect(1, 2)
    assert not leader.quiesced
    _tick_all(env, 2 * ET)
    assert leader.role is Role.FOLLOWER


def test_revive_wakes_a_quiesced_leader_that_left_the_follower_out() -> None:
    """``revive(peer)`` of a follower the quiesced leader left out while it was
    down (it lacks entries) wakes the leader, which catches the restarted
    follower up; then the group quiesces again."""
    env = _quiet_env()
    env.crash(3)
    env.suspect(1, 3)
    env.suspect(2, 3)
    env.propose(1, "x")
    _tick_all(env, WAIT + 1)
    assert env.nodes[1].quiesced and env.nodes[2].quiesced
    env.restart(3)
    env.revive(2, 3)
    env.revive(1, 3)
    assert not env.nodes[1].quiesced
    _tick_all(env, ET)
    assert _caught_up(env, 3)
    _tick_all(env, 3 * WAIT)
    assert _quiesced(env) == [True, True, True]


def test_restarted_follower_of_a_quiet_group_learns_its_leader_at_once() -> None:
    """A follower restarts while its group is quiesced and its parked fetch
    looks current: ``revive(peer, restarted=True)`` makes the leader announce
    itself, so the follower names its leader (Metadata answers from it) after
    one delivery, not after its election timeout; then the group quiesces again."""
    env = _quiet_env()
    env.crash(3)
    env.restart(3)
    assert env.nodes[3].leader == -1
    env.revive(1, 3, restarted=True)
    env.revive(2, 3, restarted=True)
    sent = [m for m in env.nodes[1]._msgs if m.dst == 3]
    assert [type(m) for m in sent] == [BeginQuorumEpoch], sent
    env.stabilize()
    assert env.nodes[3].leader == 1
    _tick_all(env, 3 * WAIT)
    assert _caught_up(env, 3) and _quiesced(env) == [True, True, True]


def test_revive_of_a_non_member_or_self_changes_nothing() -> None:
    env = _quiet_env()
    env.nodes[1].revive(1)
    env.nodes[2].revive(9)
    env.nodes[2].suspect(9)
    assert _quiesced(env) == [True, True, True]


@pytest.mark.parametrize(
    ("nodes", "wait", "holds"), [(3, 2, [{3}]), (5, 3, [{4, 5}, {5}])], ids=["3-nodes", "5-nodes"]
)
def test_staggered_fetches_still_quiesce(nodes: int, wait: int, holds: list[set[int]]) -> None:
    """Followers whose parked fetches expire on different ticks (deliveries
    held back a tick, so their phases cover every residue of the fetch wait)
    must not keep the group awake for ever."""
    env = _quiet_env(nodes, wait)
    env.propose(1, "x")
    for held in holds:
        _settle_without(env, held)
        env.tick(1)
    env.stabilize()
    _tick_all(env, 10 * wait)
    assert all(_caught_up(env, i) for i in env.nodes)
    assert _quiesced(env) == [True] * nodes


def test_follower_woken_by_a_pre_vote_then_suspecting_the_leader_grants_at_once() -> None:
    """Liveness verdicts land on different ticks: 2 suspects the crashed
    leader first and pre-votes; 3, still quiesced, wakes on that request (in
    its lease, it refuses) and suspects the leader a tick later. From then on
    3 has no leader either, so it must not wait out a lease: a leader within
    half an election timeout plus a round."""
    env = _quiet_env()
    env.crash(1)
    env.suspect(2, 1)
    for _ in range(ET // 2):
        env.tick(2)
        if env.nodes[2].role is not Role.FOLLOWER:
            break
    env.stabilize()  # 2's pre-vote wakes 3, which refuses it (lease)
    assert not env.nodes[3].quiesced
    env.suspect(3, 1)
    _tick_all(env, ET // 2 + 2)
    assert Role.LEADER in {env.nodes[2].role, env.nodes[3].role}
