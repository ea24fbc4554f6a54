"""An acks=all append waits for one Raft round, not two, and not for another
partition's fsync pass in flight (issue 31: the plain producer's wait under an
extension's load is counted in turns of a busy loop)."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from kio.schema.errors import ErrorCode as E

from kcompat.broker.host.broker import Broker
from kcompat.testing import running
from kcompat.wire.records import encode_batch


def test_a_lone_replica_answers_an_acks_all_append_after_the_round_that_synced_it(
        broker: Broker) -> None:
    """The round that makes a lone replica's entry durable commits it (its
    leader's ``advance``): published then, not by the next round's Ready,
    so the producer waits for one round of its partition's group."""

    async def body() -> None:
        await running.create_topic(broker, "plain", 1)
        await broker.cluster.wait_leaders("plain", 5.0)
        group = broker.cluster.group_of("plain", 0)
        assert group is not None and group.lone
        readies = running.record_readies(group)
        for i in range(5):
            code, offset = await broker.calls.append_locally(
                "plain", 0, encode_batch([(None, b"v%d" % i, (), 1)]), 5.0)
            assert code == E.none and offset == i
            assert group.hw == i + 1
        await trio.sleep(0.1)  # the rounds after the last answer
        # no Ready reports a high watermark the round that synced the entries
        # below it has not published already (else the producer waited for
        # that second round)
        assert sum(n for n, _hw, _published in readies) == 5
        assert [hw for _n, hw, _p in readies] == [p for _n, _hw, p in readies], readies

    running.run(broker, body)


class Stuck:
    """A file whose fsync waits for ``released`` (a slow disk under a large write)."""

    def __init__(self, inner: Any, entered: threading.Event, released: threading.Event) -> None:
        self.inner, self.entered, self.released = inner, entered, released

    def sync(self) -> None:
        self.entered.set()
        self.released.wait(20)
        self.inner.sync()


async def _while_a_pass_hangs(broker: Broker, order: list[str],
                              meanwhile: Callable[[], Awaitable[None]]) -> None:
    """``meanwhile()`` runs (5 s at most) while an acks=all append to the topic
    ``slow`` waits for an fsync pass of its log that hangs until then;
    ``order`` gets ``slow <code>`` when that append is answered."""
    entered, released = threading.Event(), threading.Event()
    slow = broker.cluster.group_of("slow", 0)
    assert slow is not None
    plog = slow.storage.plog
    dirty = plog.dirty_files
    plog.dirty_files = lambda: [Stuck(f, entered, released)  # type: ignore
                                for f in dirty()]

    async def slow_append() -> None:
        code, _ = await broker.calls.append_locally(
            "slow", 0, encode_batch([(None, b"s", (), 1)]), 15.0)
        order.append(f"slow {code.name}")

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow_append)
            with trio.fail_after(5):
                while not entered.is_set():  # the slow pass is in flight
                    await trio.sleep(0.001)
            with trio.move_on_after(5):
                await meanwhile()
            released.set()
    finally:
        released.set()


def test_a_lone_partition_commits_beside_another_partitions_fsync_in_flight(
        broker: Broker) -> None:
    """A round waits for a slow fsync of ``slow``; an acks=all append to
    ``quick`` meanwhile goes in a round of its own beside it
    (``ClusterRuntime._overlap``, or the driver's if the slow one is the
    overlap's), answered before the slow pass ends."""
    order: list[str] = []

    async def body() -> None:
        for name in ("slow", "quick"):
            await running.create_topic(broker, name, 1)
            await broker.cluster.wait_leaders(name, 5.0)
        append = broker.calls.append_locally
        assert (await append("quick", 0, encode_batch([(None, b"q0", (), 1)]), 5.0))[0] == E.none

        async def quick() -> None:
            code, offset = await append("quick", 0, encode_batch([(None, b"q1", (), 1)]), 5.0)
            order.append(f"quick {code.name} {offset}")

        await _while_a_pass_hangs(broker, order, quick)

    running.run(broker, body)
    assert order == ["quick none 1", "slow none"]


def test_a_topic_is_created_while_a_partitions_fsync_pass_hangs(broker: Broker) -> None:
    """The metadata log has a lane of its own (``ClusterRuntime._metadata_lane``):
    its record of a new topic is written, synced, committed and applied while
    the fsync pass of a partition's log hangs — the control plane does not
    wait for the data plane's disk (issue 31). Without the lane the topic's
    record waits in the driver's next round, behind the hung pass."""
    order: list[str] = []

    async def body() -> None:
        await running.create_topic(broker, "slow", 1)
        await broker.cluster.wait_leaders("slow", 5.0)

        async def create() -> None:
            await running.create_topic(broker, "made", 3)
            order.append("created")

        await _while_a_pass_hangs(broker, order, create)

    running.run(broker, body)
    assert order == ["created", "slow none"]
    assert broker.state.metadata.image.topics["made"].partitions == 3
