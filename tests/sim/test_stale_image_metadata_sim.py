"""A restarted broker that has not caught up with the metadata log never
tells a client that an existing topic does not exist (``handlers.metadata``).

A restarted broker learns what was committed only from the quorum's leader;
until then its image may lack topics. Metadata holds its answer a moment
(5 s), then answers what it knows: an existing topic missing from its image
must be LEADER_NOT_AVAILABLE, which clients retry, not UNKNOWN_TOPIC_OR_PARTITION,
which librdkafka caches as final (a consumer's ``get_watermark_offsets`` then
fails with "Unknown partition", as a CI run of ``test_quiet_failover`` did).
Once the broker hears the leader again it describes the topic.

Seeded and deterministic: three brokers of the broker simulator; the restarted
one is cut off from both peers until the first answer.
"""

from __future__ import annotations

from typing import Any

import kio.schema.metadata.v12.request as md
import pytest
import trio
from kio.schema.errors import ErrorCode as E

from kcompat.testing.broker_sim import TOPIC, BrokerSimulation, SimNode
from kcompat.testing.memory_store import MemoryFileStore
from kcompat.wire import codec
from kcompat.wire import versions as v


async def _describe(sim: BrokerSimulation, node: SimNode) -> Any:
    """Metadata v12 of TOPIC from ``node``, waited for longer than its 5 s hold."""
    answer = await sim.request(
        node, v.METADATA, 12, timeout_s=10,
        topics=(codec.build(md.MetadataRequestTopic, topic_id=None, name=TOPIC),),
        allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    assert answer is not None, "no Metadata answer within 10 s"
    (topic,) = answer.topics
    return topic


@pytest.mark.parametrize("seed", [1, 2])
def test_a_restarted_broker_cut_off_from_the_quorum_never_says_unknown_topic(seed: int) -> None:
    seen: list[tuple[int, int]] = []

    async def scenario(sim: BrokerSimulation) -> None:
        victim = next(n for n in sim.live()
                      if n.broker is not None and not n.broker.cluster.is_controller)
        await sim.crash(victim)
        others = [n for n in sim.nodes if n != victim.node_id]
        sim.cut |= {frozenset((victim.node_id, n)) for n in others}
        await sim.boot(victim)
        assert victim.broker is not None and not victim.broker.cluster.caught_up
        stale = await _describe(sim, victim)
        seen.append((stale.error_code, len(stale.partitions)))
        sim.cut.clear()
        with trio.move_on_after(30):
            while True:
                fresh = await _describe(sim, victim)
                if fresh.error_code == E.none:
                    break
                await trio.sleep(0.2)
        seen.append((fresh.error_code, len(fresh.partitions)))

    sim = BrokerSimulation(seed)
    sim.size, sim.loss, sim.crash_rate, sim.lost_replies = 3, 0.0, 0.0, 0.0
    sim.nodes = {i: SimNode(i, MemoryFileStore(f"/sim/n{i}")) for i in (1, 2, 3)}
    sim.run(scenario)
    # the restarted image lacks the topic (its creation is learnt from the leader):
    # LEADER_NOT_AVAILABLE, which clients retry, never UNKNOWN_TOPIC_OR_PARTITION
    assert seen[0] == (E.leader_not_available, 0), seen
    assert seen[-1][0] == E.none and seen[-1][1] > 0, seen
