"""CreateTopics forwarded to the controller, whose answer is lost as it dies:
the receiving broker asks the next controller, which already has the topic the
first attempt committed (same topic id), and the client is told it was
created — not TOPIC_ALREADY_EXISTS, not NOT_CONTROLLER (``controller.admin``).

Seeded and deterministic: three real brokers of the broker simulator
(``kcompat.testing.broker_sim``: simulated disks, network and clock). The
network drops the controller's ``ForwardReply`` and the controller is crashed
at that moment, so the commit happened and its answer never arrives.
"""

from __future__ import annotations

import datetime
from typing import Any

import kio.schema.create_topics.v7.request as ct
import pytest
import trio
from kio.schema.errors import ErrorCode as E

from kcompat.broker.handlers import HANDLERS
from kcompat.broker.host.context import RequestContext
from kcompat.broker.replication import codec as rcodec
from kcompat.testing.broker_sim import BrokerSimulation, SimNode
from kcompat.testing.memory_store import MemoryFileStore
from kcompat.wire import codec
from kcompat.wire import versions as v

TOPIC = "forwarded"


class LostAnswerSim(BrokerSimulation):
    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.size, self.loss, self.lost_replies = 3, 0.0, 0.0
        self.nodes = {i: SimNode(i, MemoryFileStore(f"/sim/n{i}")) for i in (1, 2, 3)}
        self.drop_reply_to: int | None = None  # the receiving broker, while armed
        self.dropped: list[tuple[int, int]] = []  # (controller, receiver)
        self.answer: Any = None
        self.ids: dict[int, Any] = {}

    def deliver(self, src: int, dst: int, frame: bytes) -> None:
        if dst == self.drop_reply_to and any(
                isinstance(m, rcodec.ForwardReply) for m in rcodec.decode(frame[4:]).markers):
            self.drop_reply_to = None
            self.dropped.append((src, dst))
            assert self._root is not None
            self._root.start_soon(self.crash, self.nodes[src])
            return
        super().deliver(src, dst, frame)

    async def _main(self) -> None:
        async with trio.open_nursery() as root:
            self._root = root
            for node in self.nodes.values():
                await self.boot(node)
            controller = await self._controller()
            receiver = self.nodes[next(n for n in self.nodes if n != controller)]
            self.drop_reply_to = receiver.node_id
            self.answer = await self._create(receiver)
            for node in self.live():
                assert node.broker is not None
                meta = node.broker.state.topics.get(TOPIC)
                self.ids[node.node_id] = meta.topic_id if meta is not None else None
            root.cancel_scope.cancel()

    async def _controller(self) -> int:
        """The controller, once every broker is registered and unfenced."""
        while True:
            for node in self.live():
                assert node.broker is not None
                rt = node.broker.cluster
                if rt.is_controller and len(rt.image.live_brokers()) == 3:
                    return node.node_id
            await trio.sleep(0.1)

    async def _create(self, node: SimNode) -> Any:
        broker, nursery = node.broker, node.nursery
        assert broker is not None and nursery is not None
        request = codec.build(ct.CreateTopicsRequest, validate_only=False,
                              timeout=datetime.timedelta(seconds=20), topics=(
            codec.build(ct.CreatableTopic, name=TOPIC, num_partitions=2,
                        replication_factor=3, assignments=(), configs=()),))
        ctx = RequestContext(broker, v.CREATE_TOPICS, 7, 1, "sim", "sim")
        answer: list[Any] = []
        done = trio.Event()

        async def handle() -> None:
            try:
                answer.append(await HANDLERS[v.CREATE_TOPICS](ctx, request))
            finally:
                done.set()

        nursery.start_soon(handle)
        with trio.move_on_after(30):
            await done.wait()
        return answer[0] if answer else None


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_lost_answer_from_a_dying_controller_is_asked_again(seed: int) -> None:
    sim = LostAnswerSim(seed)
    sim.run()
    assert len(sim.dropped) == 1, "the controller's answer was never sent"
    controller, receiver = sim.dropped[0]
    assert sim.answer is not None, "no answer within the request's timeout"
    (topic,) = sim.answer.topics
    assert (topic.error_code, topic.error_message) == (E.none, None), topic
    assert topic.num_partitions == 2 and topic.replication_factor == 3
    # one topic, the one the first attempt committed, on both survivors
    assert set(sim.ids) == {n for n in (1, 2, 3) if n != controller}
    assert set(sim.ids.values()) == {topic.topic_id}, (sim.ids, topic.topic_id)
