"""A leader publishes the commit a follower's answer moves as it steps the
answer, not with its next round's Ready (issue 31: an acks=all produce on three
replicas then waits for one turn of the leader's loop less).

Seeded and deterministic: three brokers of the broker simulator on a perfect
network. Every Ready the partition leader's group makes is recorded with the
high watermark it reports and the one published (``Group.hw``) when it was
made: none may report one that is not published already. Acks=all produces
must still be answered, each at its own offset, and every replica must hold
them.
"""

from __future__ import annotations

import pytest
import trio
from kio.schema.errors import ErrorCode as E

from kcompat.testing.broker_sim import TOPIC, BrokerSimulation, SimNode
from kcompat.testing.memory_store import MemoryFileStore
from kcompat.testing.running import record_readies


def _readies(seed: int) -> tuple[list[tuple[int, int, int]], list[tuple[E, int]]]:
    # (entries, high watermark reported, published) of each Ready of the leader's group
    recorded: list[list[tuple[int, int, int]]] = []
    answers: list[tuple[E, int]] = []

    async def scenario(sim: BrokerSimulation) -> None:
        with trio.fail_after(30):
            while (leader := sim.leader_of(TOPIC, 0)) is None or leader.broker is None \
                    or not leader.broker.cluster.leads(TOPIC, 0):
                await trio.sleep(0.1)
        assert leader.broker is not None
        group = leader.broker.cluster.group_of(TOPIC, 0)
        assert group is not None and len(group.replicas) == 3
        recorded.append(record_readies(group))
        for i in range(10):
            answers.append(await sim.produce(leader, 0, b"v%d" % i))
        await trio.sleep(1.0)  # the rounds after the last answer

    sim = BrokerSimulation(seed)
    sim.size, sim.loss, sim.crash_rate, sim.lost_replies = 3, 0.0, 0.0, 0.0
    sim.nodes = {i: SimNode(i, MemoryFileStore(f"/sim/n{i}")) for i in (1, 2, 3)}
    sim.run(scenario)
    assert recorded, "the scenario did not finish"
    return recorded[0], answers


@pytest.mark.parametrize("seed", [1, 2])
def test_a_leader_publishes_the_commit_a_followers_answer_moves(seed: int) -> None:
    readies, answers = _readies(seed)
    assert [code for code, _o in answers] == [E.none] * 10
    offsets = [o for _c, o in answers]
    assert offsets == list(range(offsets[0], offsets[0] + 10))
    assert sum(n for n, _hw, _p in readies) == 10, readies
    assert [hw for _n, hw, _p in readies] == [p for _n, _hw, p in readies], readies
