"""The background lane: catch-up chunks of several tasks run one per turn of
the loop, so a request's steps wait behind one chunk at most, not one per
task catching up."""

from __future__ import annotations

import trio

from kcompat.broker.loop.lane import background_turn


async def _background(name: str, chunks: int, trace: list[str]) -> None:
    for _ in range(chunks):
        async with background_turn():
            trace.append(name)


async def _request(steps: int, trace: list[str]) -> None:
    for _ in range(steps):
        trace.append("R")
        await trio.lowlevel.checkpoint()


def test_one_background_chunk_between_a_requests_steps() -> None:
    trace: list[str] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for name in "ABCDEF":  # six schedule partitions catching up at once
                nursery.start_soon(_background, name, 20, trace)
            nursery.start_soon(_request, 30, trace)

    trio.run(main)
    assert sorted(trace.count(n) for n in "ABCDEF") == [20] * 6
    first, last = trace.index("R"), len(trace) - 1 - trace[::-1].index("R")
    between = "".join(trace[first:last + 1]).split("R")[1:-1]
    # a turn holds one chunk at most; trio shuffles the order of a turn's
    # tasks, so two steps of the request may have the chunk of the turn
    # before and of the turn after between them, never more (without the
    # lane: six to twelve, every catching-up task running at every turn)
    assert max(map(len, between)) <= 2, between
    # and the chunks take turns: no task runs twice while another waits
    chunks = [c for c in trace if c != "R"]
    assert all(len(set(chunks[i:i + 6])) == 6 for i in range(0, 60, 6)), chunks[:60]


def test_chunks_follow_one_another_when_nothing_else_runs() -> None:
    trace: list[str] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_background, "A", 50, trace)
            nursery.start_soon(_background, "B", 50, trace)

    trio.run(main)
    assert trace.count("A") == trace.count("B") == 50
