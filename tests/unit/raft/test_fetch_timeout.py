"""The metadata log's fetch timeout (KRaft's controller.quorum.fetch.timeout.ms).

A follower of a group with ``fetch_timeout_ticks`` campaigns only after that long
without word from its leader (plus up to an election timeout), holds its lease as
long, and is not hurried by the runtime's suspicion of a silent peer; a group
without one keeps the election timeout. A leader that only answers late (a busy
process) deposes no one while it answers within the fetch timeout.
"""

from __future__ import annotations

from kcompat.raft import Role, VoteRequest, VoteResponse
from kcompat.testing.raft_env import RaftEnv

ELECTION = 10
FETCH = 20  # twice the election timeout, as KRaft's defaults (2 s and 1 s)


def _env(fetch_timeout: int) -> RaftEnv:
    env = RaftEnv()
    env.add_nodes(3, election_timeout_ticks=ELECTION, fetch_wait_ticks=3,
                  fetch_timeout_ticks=fetch_timeout)
    env.nodes[1].campaign()
    env.stabilize()
    assert env.nodes[1].role is Role.LEADER
    return env


def _silent_ticks_until_a_campaign(env: RaftEnv, node: int, suspected: bool = False) -> int:
    """Ticks ``node`` takes, its leader silent (and, if ``suspected``, its leader's
    broker held down by the runtime), to leave the follower role."""
    env.partition([[1], [2, 3]])  # the leader hears nothing and is heard by no one
    if suspected:
        env.suspect(node, 1)
    for ticks in range(1, 10 * FETCH):
        env.tick(node)
        if env.nodes[node].role is not Role.FOLLOWER:
            return ticks
    raise AssertionError("never campaigned")


def test_a_follower_waits_its_fetch_timeout_before_it_campaigns() -> None:
    for node in (2, 3):
        ticks = _silent_ticks_until_a_campaign(_env(FETCH), node)
        assert FETCH <= ticks < FETCH + ELECTION
    for node in (2, 3):  # without one: the election timeout, as before
        ticks = _silent_ticks_until_a_campaign(_env(0), node)
        assert ELECTION <= ticks < 2 * ELECTION


def test_a_leader_late_by_more_than_an_election_timeout_keeps_its_followers() -> None:
    """Fetches answered 1.5 election timeouts apart (a leader's process short of a
    core): with the fetch timeout nobody campaigns; without it someone does."""
    for fetch_timeout, kept in ((FETCH, True), (0, False)):
        env = _env(fetch_timeout)
        term = env.nodes[1].term
        for _ in range(20):
            for _ in range(ELECTION * 3 // 2):  # the followers tick, the leader is late
                env.tick(2)
                env.tick(3)
                env.stabilize()
            env.tick(1, ELECTION * 3 // 2)  # then it catches up and answers
            env.stabilize()
        held = env.nodes[1].role is Role.LEADER and env.nodes[1].term == term
        assert held is kept, fetch_timeout


def test_a_follower_in_its_fetch_timeout_refuses_a_pre_vote() -> None:
    env = _env(FETCH)
    follower = env.nodes[2]
    env.partition([[1], [2], [3]])
    env.tick(2, ELECTION + 2)  # past an election timeout, within the fetch timeout
    follower.step(VoteRequest(0, 3, 2, follower.term + 1, follower.term, 100, pre_vote=True))
    answers = [m for m in follower.ready().messages if isinstance(m, VoteResponse)]
    assert answers == []  # ignored: it still holds its lease


def test_a_suspected_leader_is_waited_out_for_the_fetch_timeout() -> None:
    """The runtime's suspicion of the leader's broker does not cut the fetch
    timeout short (KRaft has no such signal); without one it does."""
    assert _silent_ticks_until_a_campaign(_env(FETCH), 2, suspected=True) >= FETCH
    assert _silent_ticks_until_a_campaign(_env(0), 2, suspected=True) < ELECTION
