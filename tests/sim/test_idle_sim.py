"""What a quiet broker does (issue 35: the idle cost of a shard), on the broker
simulator's clock.

Between two brokers, once everything is quiet, a frame still goes each way at
least every pair-heartbeat period (``heartbeat_ticks``: peer liveness, which
quiesced groups rely on), and not much more often than that; and on one
broker, a tick that finds nothing to do costs no round of the Raft driver:
the ticker runs it while the driver waits, and wakes the driver only for a
round with work in it. The metadata log's followers wait half an election
timeout in a fetch the leader has nothing new for (KRaft's 500 ms), and a new
record still reaches every broker at once; their fetches are that far apart,
so the leader's check quorum also counts the frames it hears from their
brokers."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable
from random import Random

import pytest
import trio

from kcompat.broker.controller import admin
from kcompat.broker.replication import codec
from kcompat.broker.replication import runtime as runtime_module
from kcompat.broker.replication.group import METADATA_GROUP
from kcompat.broker.replication.runtime import ClusterRuntime
from kcompat.raft.types import FetchRequest
from kcompat.testing.broker_sim import BrokerSimulation, SimNode
from kcompat.testing.memory_store import MemoryFileStore

SETTLE_S = 15.0  # the groups quiesce after the topics are made
WINDOW_S = 10.0


def _quiet_cluster(size: int) -> BrokerSimulation:
    """``size`` brokers on a perfect network, no nemesis (``run(scenario)``)."""
    sim = BrokerSimulation(1)
    sim.size = size
    sim.nodes = {i: SimNode(i, MemoryFileStore(f"/sim/n{i}")) for i in range(1, size + 1)}
    sim.loss = sim.lost_replies = sim.crash_rate = 0.0
    sim.rng = Random(7)
    return sim


def _runtime(sim: BrokerSimulation, node_id: int) -> ClusterRuntime:
    broker = sim.nodes[node_id].broker
    assert broker is not None
    return broker.cluster


class _QuietWindow:
    """The frames between brokers in a quiet window: each decoded frame goes
    to ``seen(src, dst, frame)`` while ``watch`` runs (after ``SETTLE_S``,
    for ``WINDOW_S``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch,
                 seen: Callable[[int, int, codec.RaftFrame], None]) -> None:
        self.watching = False
        deliver = BrokerSimulation.deliver

        def counted(sim: BrokerSimulation, src: int, dst: int, frame: bytes) -> None:
            if self.watching:
                seen(src, dst, codec.decode(frame[4:]))
            deliver(sim, src, dst, frame)

        monkeypatch.setattr(BrokerSimulation, "deliver", counted)

    async def watch(self) -> tuple[float, float]:
        """(start, end) of the window, on the simulator's clock."""
        await trio.sleep(SETTLE_S)
        self.watching = True
        started = trio.current_time()
        await trio.sleep(WINDOW_S)
        self.watching = False
        return started, trio.current_time()


def test_quiet_brokers_exchange_a_frame_every_heartbeat_period_and_few_more(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sim = _quiet_cluster(3)
    sent: dict[tuple[int, int], list[tuple[float, bool]]] = defaultdict(list)
    window = _QuietWindow(monkeypatch, lambda src, dst, f: sent[(src, dst)].append(
        (trio.current_time(), not (f.messages or f.announcements or f.markers))))
    seen: dict[str, float] = {}

    async def scenario(sim: BrokerSimulation) -> None:
        started, ended = await window.watch()
        rt = _runtime(sim, 1)
        seen.update(started=started, ended=ended, tick_s=rt.tick_s,
                    election_ticks=rt.election_ticks)

    sim.run(scenario)
    # five heartbeats per election timeout of silence (2 ticks of 100 ms here)
    period = seen["election_ticks"] // 5 * seen["tick_s"]
    for a in sim.nodes:
        for b in sim.nodes:
            if a == b:
                continue
            times = [seen["started"], *(t for t, _empty in sent[(a, b)]), seen["ended"]]
            gap = max(y - x for x, y in zip(times, times[1:], strict=False))
            # liveness: never a silence near what marks a peer down
            assert gap <= period + seen["tick_s"] + 0.01, (a, b, gap)
            beats = sum(empty for _t, empty in sent[(a, b)])
            # and no heartbeat more often than the period (it went every tick)
            assert beats <= WINDOW_S / period + 1, (a, b, beats)


def test_an_idle_tick_wakes_no_round_of_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    sim = BrokerSimulation.lone()
    rounds = 0
    watching = False
    original = ClusterRuntime._round

    async def counted(self: ClusterRuntime, *lane: bool, **which: bool) -> bool:
        nonlocal rounds  # the driver's, and the lanes beside it (the metadata log's)
        rounds += watching
        return await original(self, *lane, **which)

    monkeypatch.setattr(ClusterRuntime, "_round", counted)
    seen: dict[str, float] = {}

    async def scenario(sim: BrokerSimulation) -> None:
        nonlocal watching
        await trio.sleep(SETTLE_S)
        rt = _runtime(sim, 1)
        before = rt.ticks
        watching = True
        await trio.sleep(WINDOW_S)
        watching = False
        seen.update(ticks=rt.ticks - before, tick_s=rt.tick_s)

    sim.run(scenario)
    assert seen["ticks"] >= WINDOW_S / seen["tick_s"] - 2  # the ticks go on
    assert rounds <= WINDOW_S, rounds  # not one per tick (100 here)


def test_the_metadata_logs_followers_fetch_twice_an_election_timeout_when_idle(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each follower's metadata fetches in a quiet window: about one per half
    election timeout (it fetched every 3 ticks, 33 times in 10 s here, and the
    leader answered each), never fewer than its liveness needs; then a new
    topic reaches every broker within a few ticks, not a fetch wait."""
    sim = _quiet_cluster(3)
    fetches: dict[int, int] = defaultdict(int)

    def count(src: int, _dst: int, frame: codec.RaftFrame) -> None:
        fetches[src] += sum(isinstance(m, FetchRequest) and m.group == METADATA_GROUP
                            for m in frame.messages)

    window = _QuietWindow(monkeypatch, count)
    seen: dict[str, float] = {}

    async def scenario(sim: BrokerSimulation) -> None:
        await window.watch()
        runtimes = [_runtime(sim, n) for n in sim.nodes]
        controller = next(rt for rt in runtimes if rt.is_controller)
        seen.update(leader=controller.node_id, tick_s=controller.tick_s,
                    half_election=controller.election_ticks * controller.tick_s / 2,
                    wait=controller.metadata_fetch_wait_ticks * controller.tick_s)
        broker = sim.nodes[controller.node_id].broker
        assert broker is not None
        started = trio.current_time()
        await admin.create_topic(broker.controller, "after-the-calm", 1, 3, {})
        while not all("after-the-calm" in rt.image.topics for rt in runtimes):
            await trio.sleep(seen["tick_s"] / 10)
        seen["spread"] = trio.current_time() - started

    sim.run(scenario)
    followers = [n for n in sim.nodes if n != seen["leader"]]
    for node in followers:
        # one fetch a wait (and its answer's turn, at most a tick behind), and
        # no more than one each half election timeout
        assert WINDOW_S / (seen["wait"] + seen["tick_s"]) - 2 <= fetches[node] \
            <= WINDOW_S / seen["half_election"] + 2, (node, fetches)
    assert fetches[seen["leader"]] == 0, fetches
    assert seen["spread"] < seen["wait"], seen  # a new record answers the parked fetches


def test_the_metadata_leader_counts_its_followers_heard_without_a_fetch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Check quorum on the metadata log counts a voter whose broker the
    leader hears (its pair heartbeats), not only its fetches, which come only
    every half election timeout when idle: with every metadata fetch to the
    controller lost for three election timeouts while the rest of the
    followers' frames arrive, it leads on in its term (counting fetches alone
    it stepped down within one), and a topic made afterwards reaches every
    broker."""
    sim = _quiet_cluster(3)
    lost = {"to": 0, "fetches": 0}
    deliver = BrokerSimulation.deliver

    def lossy(sim: BrokerSimulation, src: int, dst: int, frame: bytes) -> None:
        if dst == lost["to"]:
            decoded = codec.decode(frame[4:])
            kept = tuple(m for m in decoded.messages
                         if not (isinstance(m, FetchRequest) and m.group == METADATA_GROUP))
            if len(kept) < len(decoded.messages):
                lost["fetches"] += len(decoded.messages) - len(kept)
                frame = codec.encode(dataclasses.replace(decoded, messages=kept))
        deliver(sim, src, dst, frame)

    monkeypatch.setattr(BrokerSimulation, "deliver", lossy)
    seen: dict[str, object] = {}

    async def scenario(sim: BrokerSimulation) -> None:
        await trio.sleep(SETTLE_S)
        runtimes = [_runtime(sim, n) for n in sim.nodes]
        controller = next(rt for rt in runtimes if rt.is_controller)
        raft = controller.meta.raft
        before = (raft.term, raft.role)
        lost["to"] = controller.node_id
        await trio.sleep(3 * controller.election_ticks * controller.tick_s)
        lost["to"] = 0
        seen.update(before=before, during=(raft.term, raft.role))
        broker = sim.nodes[controller.node_id].broker
        assert broker is not None
        await admin.create_topic(broker.controller, "after-the-loss", 1, 3, {})
        with trio.move_on_after(5):
            while not all("after-the-loss" in rt.image.topics for rt in runtimes):
                await trio.sleep(controller.tick_s)
        seen["everywhere"] = all("after-the-loss" in rt.image.topics for rt in runtimes)

    sim.run(scenario)
    assert lost["fetches"] > 0, lost
    assert seen["during"] == seen["before"], seen  # same term, still the leader
    assert seen["everywhere"], seen


def test_a_late_ticker_does_not_stretch_the_metadata_leaders_fetch_wait(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every broker's ticker wakes late, past the next tick (a busy loop, a
    process waiting for a core), so each of its turns skips a tick. The
    metadata leader's ticks catch up on the ones a late wake skipped
    (``ClusterRuntime._tick_metadata``): its followers' parked fetches are
    answered after their wait in wall time, and no follower goes without word
    from the leader for anything near an election timeout (with the skipped
    ticks lost, every fetch waited twice as long: gaps of a whole election
    timeout, as seen in the 3-broker soak)."""
    sim = _quiet_cluster(3)
    on_time = runtime_module.sleep_on_grid

    async def late(period: float) -> float:
        at = await on_time(period)
        await trio.sleep(period * 1.1)  # woken after the next multiple: it is skipped
        return at

    monkeypatch.setattr(runtime_module, "sleep_on_grid", late)
    seen: dict[str, float] = {}

    async def scenario(sim: BrokerSimulation) -> None:
        await trio.sleep(SETTLE_S)
        runtimes = [_runtime(sim, n) for n in sim.nodes]
        for rt in runtimes:
            rt.leader_gaps.longest_s = 0.0
        await trio.sleep(WINDOW_S)
        leader = next(rt for rt in runtimes if rt.is_controller)
        followers = [rt for rt in runtimes if rt is not leader]
        seen.update(longest=max(rt.leader_gaps.longest_s for rt in followers),
                    gaps=min(rt.leader_gaps.count for rt in followers),
                    wait=leader.metadata_fetch_wait_ticks * leader.tick_s,
                    election=leader.election_ticks * leader.tick_s,
                    term=leader.meta.raft.term)

    sim.run(scenario)
    assert seen["term"] == 1, seen  # no election
    assert seen["gaps"] >= WINDOW_S / (2 * seen["wait"]), seen
    # the wait, its late wake and the follower's turn: 0.82 s here, against 1.21 s
    # (past the election timeout) with the skipped ticks lost
    assert seen["longest"] < seen["election"], seen
