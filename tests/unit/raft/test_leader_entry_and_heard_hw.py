"""Two additions to the core for partition groups (issue 6):

* ``always_leader_change=False``: a leader appends the leader-change entry
  only when its log holds entries not known committed — that entry exists to
  commit earlier terms' entries (Raft paper §5.4.2, Figure 8) — so a brand-new
  partition's first record is offset 0, as in Kafka.
* ``heard_high_watermark``: the highest high watermark a leader has told a
  member (its own while leading), which a restarted broker must reach before
  its metadata counts as caught up.
"""

from __future__ import annotations

from kcompat.raft import FetchRequest, FetchResponse, Role
from kcompat.testing.raft_env import RaftEnv


def _elect(env: RaftEnv, node: int) -> None:
    env.nodes[node].campaign()
    env.stabilize()
    assert env.nodes[node].role is Role.LEADER


def test_first_leader_of_an_empty_log_appends_no_entry() -> None:
    env = RaftEnv()
    env.add_nodes(3, always_leader_change=False)
    _elect(env, 1)
    assert env.nodes[1].log.end == 0
    env.propose(1, "first")
    env.stabilize()
    assert [(e.index, e.control) for e in env.storages[2].entries(0, 1, 1 << 20)] == [
        (0, False)]
    assert all(env.nodes[n].high_watermark == 1 for n in (1, 2, 3))


def test_leader_with_uncommitted_entries_still_appends_one() -> None:
    """§5.4.2: entries of an earlier term are committed only through an entry
    of the leader's own term, so a new leader holding any needs one."""
    env = RaftEnv()
    env.add_nodes(3, always_leader_change=False)
    _elect(env, 1)
    env.propose(1, "a")
    env.stabilize()
    env.propose(1, "b")
    env.process_ready(1)  # answers the parked fetches with "b"
    env.deliver(2)  # node 2 appends "b" ...
    env.process_ready(2)  # ... persists it and fetches again (its ack)
    env.deliver(1)  # the leader commits "b" but dies before telling anyone
    env.crash(1)
    assert (env.nodes[2].log.end, env.nodes[2].high_watermark) == (2, 1)
    for _ in range(30):  # leases run out; one of the two survivors wins
        env.tick(2)
        env.tick(3)
        env.stabilize()
    leader = next(n for n in (2, 3) if env.nodes[n].role is Role.LEADER)
    entries = env.storages[leader].entries(0, env.nodes[leader].log.end, 1 << 20)
    assert [(e.index, e.control) for e in entries] == [(0, False), (1, False), (2, True)]
    assert env.nodes[leader].high_watermark == 3  # "b" committed through the new entry


def test_default_config_always_appends_the_leader_change_entry() -> None:
    env = RaftEnv()
    env.add_nodes(3)
    _elect(env, 1)
    assert [e.control for e in env.storages[1].entries(0, 1, 1 << 20)] == [True]


def test_heard_high_watermark_runs_ahead_of_a_lagging_follower() -> None:
    env = RaftEnv()
    env.add_nodes(3, always_leader_change=False, max_fetch_bytes=1)
    _elect(env, 1)
    env.partition([[1, 2], [3]])
    for i in range(5):
        env.propose(1, f"r{i}")
    env.stabilize()
    assert env.nodes[1].heard_high_watermark == env.nodes[1].high_watermark == 5
    assert env.nodes[3].heard_high_watermark == 0
    env.partition([[1, 2, 3]])
    # node 3 asks; the first answer carries one entry (max_fetch_bytes) and the
    # leader's high watermark: it has heard 5 while its own is still 1.
    env.tick(3, 20)
    while not env.nodes[3].log.end:
        env.process_ready(3)
        env.deliver(1)
        env.process_ready(1)
        env.deliver(3)
    assert env.nodes[3].heard_high_watermark == 5
    assert env.nodes[3].high_watermark < 5
    env.stabilize()
    assert env.nodes[3].high_watermark == env.nodes[3].heard_high_watermark == 5


def test_a_fetch_names_its_own_byte_limit() -> None:
    """``FetchRequest.max_bytes`` (the replication throttle sizes observers'
    fetches with it) caps the answer below the leader's max_fetch_bytes — at
    least one entry still goes; 0 leaves the leader's limit."""
    env = RaftEnv()
    env.add_nodes(3, always_leader_change=False)
    _elect(env, 1)
    for i in range(4):
        env.propose(1, f"r{i}")
    env.stabilize()
    leader = env.nodes[1]
    answers = []
    for limit in (1, 0):
        leader.step(FetchRequest(leader.group, 2, 1, leader.term, 0, 0, max_bytes=limit))
        ready = leader.ready()
        answers += [m for m in ready.messages if isinstance(m, FetchResponse) and m.dst == 2]
        leader.advance(ready)
    assert [len(a.entries) for a in answers] == [1, leader.log.end]
