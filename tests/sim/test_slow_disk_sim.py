"""A slow disk is not a dead broker (``ClusterRuntime._beat_while_syncing``).

Three brokers on a perfect simulated network; the leader of a partition gets
a disk whose every fsync pass takes 3 s of simulated time — three election
timeouts — while an acks=all produce waits on it. Its Raft driver waits for
that pass, and before the fix so did its pair heartbeats: both peers marked
it down within an election timeout, and every quiet partition it led (no
traffic, its groups quiesced, followers relying on the pair heartbeat) was
elected away with it (Kafka's broker heartbeats do not wait for log I/O).
Now its peers keep it alive and its quiet partitions keep their leader and
epoch. (The partition written to may move: its followers' own election
timers run while its leader answers nothing, as Raft's do.)
"""

from __future__ import annotations

import trio
from kio.schema.errors import ErrorCode as E

from kcompat.testing.broker_sim import TOPIC, BrokerSimulation, SimNode
from kcompat.testing.memory_store import MemoryFileStore

SLOW_S = 3.0


def _three_brokers(seed: int) -> BrokerSimulation:
    sim = BrokerSimulation(seed)
    sim.size = 3
    sim.nodes = {i: SimNode(i, MemoryFileStore(f"/sim/n{i}")) for i in (1, 2, 3)}
    sim.loss = sim.lost_replies = sim.crash_rate = sim.garble = 0.0
    return sim


def test_a_broker_whose_fsyncs_take_three_election_timeouts_stays_leader() -> None:
    sim = _three_brokers(7)
    seen: dict[str, object] = {}

    async def scenario(sim: BrokerSimulation) -> None:
        await trio.sleep(3)  # leaders elected everywhere
        leader = sim.leader_of(TOPIC, 0)
        assert leader is not None and leader.broker is not None
        error, _offset = await sim.produce(leader, 0, b"before")
        assert error == E.none
        await trio.sleep(3)  # the groups without traffic quiesce
        rt = leader.broker.cluster
        quiet = {g.gid: g.raft.term for g in rt.groups.values()
                 if g.is_leader and g.raft.quiesced and g.gid != rt.group_of(TOPIC, 0).gid}
        assert quiet, "no quiet group led by the slow broker: nothing to check"
        others = [n for n in sim.nodes.values() if n is not leader]
        leader.store.faults.sync_delay_s = SLOW_S
        downs: list[str] = []

        async def produce() -> None:
            await sim.produce(leader, 0, b"slow")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce)
            for _ in range(int(4 * SLOW_S / 0.05)):
                await trio.sleep(0.05)
                for n in others:
                    assert n.broker is not None
                    if leader.node_id in n.broker.cluster.down:
                        downs.append(f"{n.node_id} at {trio.current_time():.2f}")
        leader.store.faults.sync_delay_s = 0.0
        moved = {gid: (g.raft.term, g.is_leader) for gid in quiet
                 if (g := rt.groups[gid]).raft.term != quiet[gid] or not g.is_leader}
        seen.update(downs=downs, moved=moved, quiet=len(quiet))

    sim.run(scenario)
    assert not seen["downs"], f"peers took the slow broker for dead: {seen['downs'][:3]}"
    assert not seen["moved"], (
        f"quiet groups of the slow broker changed leader or term: {seen['moved']} "
        f"of {seen['quiet']}")
