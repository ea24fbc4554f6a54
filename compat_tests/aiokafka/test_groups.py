"""aiokafka 0.14 consumer groups against a real kcompat broker: 3 members in one
asyncio loop under live production, kill -9 and clean leave of a member process.

Every test also runs in a 3-broker cluster at replication factor 1 (conftest.py,
``GROUP_KINDS``), except two timed scenarios: clean leave runs at replication factor
3 instead, kill -9 of a member (session expiry, the coordinator's alone) on a single
node only.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from .._broker import unique_topic
from .._deployment import SINGLE_ONLY, Deployment
from .._groups import (
    HEARTBEAT_MS,
    SESSION_MS,
    BackgroundProducer,
    Ledger,
    assignment_covers,
    check_exactly_once,
    clean_leave_scenario,
    committed_offsets,
    create_topic,
    end_offsets,
    kill_member_scenario,
    unique_group,
)

pytestmark = pytest.mark.timeout(120)

CLIENT = "aiokafka"



class Member:
    """getmany -> process -> commit, under a lock that the revoke callback also takes:
    aiokafka rebalances in a background task, so the JoinGroup waits until the batch in
    hand is committed. A batch fetched across a revocation is not processed: the
    member seeks back to it (if still assigned) instead."""

    def __init__(self, name: str, bootstrap: str, topic: str, group: str,
                 ledger: Ledger) -> None:
        self.name, self.topic, self.ledger = name, topic, ledger
        self.lock = asyncio.Lock()
        self.assigned: frozenset[int] = frozenset()
        self.commit_errors: list[str] = []
        self.stop = asyncio.Event()
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
            enable_auto_commit=False, session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS, request_timeout_ms=30_000,
        )
        self.task: asyncio.Task[None] | None = None
        self.revokes = 0

    async def run(self) -> None:
        member = self

        class Listener(ConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked: Any) -> None:
                async with member.lock:
                    member.revokes += 1

            async def on_partitions_assigned(self, assigned: Any) -> None:
                pass

        c = self.consumer
        await c.start()
        c.subscribe([self.topic], listener=Listener())
        try:
            while not self.stop.is_set():
                seen_revokes = self.revokes
                batch = await c.getmany(timeout_ms=200, max_records=100)
                async with self.lock:
                    self.assigned = frozenset(tp.partition for tp in c.assignment())
                    if self.revokes != seen_revokes:
                        for tp, msgs in batch.items():
                            if msgs and tp in c.assignment():
                                c.seek(tp, msgs[0].offset)
                        continue
                    offsets = {}
                    for tp, msgs in batch.items():
                        for m in msgs:
                            self.ledger.add(self.name, m.partition, m.offset, m.value)
                            offsets[TopicPartition(tp.topic, tp.partition)] = m.offset + 1
                    if offsets:
                        try:
                            await c.commit(offsets)
                        except Exception as exc:  # noqa: BLE001 - reported by the test
                            self.commit_errors.append(f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(0)
        finally:
            await c.stop()

    def start(self) -> None:
        self.task = asyncio.create_task(self.run(), name=self.name)

    async def halt(self) -> None:
        self.stop.set()
        if self.task is not None:
            await asyncio.wait_for(self.task, 30)


async def wait_until(pred: Any, timeout: float, what: Any, members: list[Member]) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        for m in members:
            if m.task is not None and m.task.done() and m.task.exception() is not None:
                raise AssertionError(f"{CLIENT}: member {m.name} failed: {m.task.exception()!r}")
        if time.monotonic() > deadline:
            raise AssertionError(f"after {timeout}s: {what()}")
        await asyncio.sleep(0.05)


def test_three_members_consume_exactly_once(gbroker: Deployment) -> None:
    bs = gbroker.bootstrap
    topic, group = unique_topic("aio-group3"), unique_group("aio-group3")
    create_topic(bs, topic, 6, gbroker.replication)
    # 300 of them once the third member has joined, so that each member gets records
    # however long the joins took on a loaded machine
    joined = threading.Event()
    prod = BackgroundProducer(bs, topic, 6, 2200, rate=500, held=joined, held_count=300)
    ledger = Ledger()

    def describe(members: list[Member]) -> str:
        return "; ".join(f"{m.name}: {sorted(m.assigned)} errors={m.commit_errors[:2]}"
                         for m in members)

    async def scenario() -> tuple[list[frozenset[int]], list[Member]]:
        members: list[Member] = []
        try:
            for i in range(3):  # staggered joins in one loop
                m = Member(f"aio-{i}", bs, topic, group, ledger)
                m.start()
                members.append(m)
                await wait_until(lambda: assignment_covers([x.assigned for x in members], 6),
                                 30, lambda: f"{CLIENT}: {len(members)} members never shared all "
                                             f"6 partitions: {describe(members)}", members)
            joined.set()
            while prod.is_alive():
                await asyncio.sleep(0.1)
            acked = set(prod.acked)
            await wait_until(lambda: ledger.has_all(acked), 30,
                             lambda: f"{CLIENT}: consumed {ledger.distinct()} of {len(acked)}; "
                                     f"{describe(members)}", members)
            return [m.assigned for m in members], members
        finally:
            joined.set()
            for m in members:
                m.stop.set()
            for m in members:
                await m.halt()

    prod.start()
    final, members = asyncio.run(asyncio.wait_for(scenario(), 100))
    acked = prod.finish()
    assert all(len(a) == 2 for a in final) and assignment_covers(final, 6), (
        f"{CLIENT}: final assignment {[sorted(a) for a in final]}, expected 2 partitions each")
    check_exactly_once(acked, ledger.snapshot(), CLIENT)
    assert not [e for m in members for e in m.commit_errors], (
        f"{CLIENT}: commits failed: {[m.commit_errors for m in members]}")
    assert len(ledger.per_member()) == 3, f"{CLIENT}: per member {ledger.per_member()}"
    ends = prod.end_offsets()
    assert end_offsets(bs, topic, 6) == ends
    got = committed_offsets(bs, group, topic, 6)
    assert got == ends, f"{CLIENT}: committed {got} != end offsets {ends}"


@pytest.mark.parametrize("gbroker", SINGLE_ONLY, indirect=True)
def test_kill9_member_partitions_taken_over(gbroker: Deployment, tmp_path: Path) -> None:
    kill_member_scenario("aiokafka", gbroker, tmp_path)


@pytest.mark.parametrize("gbroker", ("rf1",), indirect=True)  # the other clients' runs cover the other kinds (suite time)
def test_clean_leave_rebalances_immediately(gbroker: Deployment, tmp_path: Path) -> None:
    clean_leave_scenario("aiokafka", gbroker, tmp_path)
