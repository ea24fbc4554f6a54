"""``PeerCalls.append`` to a remote leader does not wait out its timeout on a
leader that is replaced or goes silent: the batch goes to the next leader (a
kill -9 of a schedule partition's leader held every delayed or retry produce
on the other brokers for the request's 30 s)."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing
from kio.schema.errors import ErrorCode

from kcompat.broker.replication import codec
from kcompat.broker.replication.peer_calls import PeerCalls

TP = ("__kc_schedule", 3)


class FakeRuntime:
    """Node 1; the partition led by node 2 (then whoever ``leader`` says)."""

    def __init__(self) -> None:
        self.tick_s = 0.01
        self.assignments = {TP: (7, [1, 2, 3])}
        self.peers = {2, 3}
        self.down: set[int] = set()
        self.leader = 2
        self.inbound: dict[Any, Any] = {}
        self.sent: list[tuple[int, Any]] = []

    def leads(self, topic: str, index: int) -> bool:
        return False

    def partition_view(self, topic: str, index: int) -> tuple[int, int, tuple[int, ...],
                                                             tuple[int, ...]]:
        return self.leader, 1, (1, 2, 3), (2, 3)

    def send_internal(self, node: int, message: Any) -> None:
        self.sent.append((node, message))

    def spawn(self, *_a: Any) -> bool:
        return True


def test_a_replaced_leader_is_not_waited_for_the_batch_goes_to_the_next() -> None:
    rt = FakeRuntime()
    calls = PeerCalls(rt)  # type: ignore[arg-type]
    result: list[tuple[ErrorCode, int]] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            async def call() -> None:
                result.append(await calls.append(*TP, b"batch", timeout_s=30.0))
            nursery.start_soon(call)
            await trio.testing.wait_all_tasks_blocked()
            assert [node for node, _m in rt.sent] == [2]
            rt.down.add(2)  # killed: silent
            rt.leader = 3  # and replaced
            await trio.sleep(0.05)
            assert [node for node, _m in rt.sent] == [2, 3]
            node, request = rt.sent[-1]
            assert isinstance(request, codec.AppendRequest) and request.batch == b"batch"
            calls.on_reply(codec.AppendReply(request.request_id, 0, 42))

    clock = trio.testing.MockClock(autojump_threshold=0)
    trio.run(main, clock=clock)
    assert result == [(ErrorCode.none, 42)]
    assert clock.current_time() < 1.0  # not the 30 s of the request


def test_a_silent_leader_without_a_successor_times_out_at_the_deadline() -> None:
    rt = FakeRuntime()
    calls = PeerCalls(rt)  # type: ignore[arg-type]

    async def main() -> tuple[ErrorCode, int]:
        return await calls.append(*TP, b"batch", timeout_s=2.0)

    clock = trio.testing.MockClock(autojump_threshold=0)
    assert trio.run(main, clock=clock) == (ErrorCode.request_timed_out, -1)
    assert 2.0 <= clock.current_time() < 2.1
    assert [node for node, _m in rt.sent] == [2]  # asked once: it never stopped leading
