"""The background lane: one chunk of catch-up work per turn of the event loop.

Theory of operation
-------------------
trio runs every runnable task once per turn of its loop, in no order of
importance. Services that work through a backlog cut their work into chunks
of a few milliseconds (``delays``: reading a delivery's records, framing its
batch, promoting a slot of the schedule), each a turn. But when six schedule
partitions catch up at once, six chunks are runnable at every turn, and a
request — whose answer takes several turns: read, handle, append, commit,
answer — waits behind all six at each of them. In the 1M delayed soak a
plain acks=all produce took 150 ms at p99 while the broker caught up after
a restart (2 ms idle), with or without fsync: the loop, not the disk.

So catch-up chunks run in one lane (``background_turn``): a fair
``trio.Lock`` held for the chunk. Its release hands it to the next waiting
chunk, which runs at the next turn; a task that wants another chunk queues
behind the others. Whatever the backlog, a turn holds one background chunk
at most, and requests take the rest of it. With nothing else runnable the
chunks follow one another turn after turn: what is lost is the turn's own
overhead, a few microseconds.

Only work that can wait goes in the lane: never the Raft driver, heartbeats,
request handlers or anything a request waits for (a produce's own append),
which would put the control plane behind the backlog it must outrun.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
from trio.lowlevel import RunVar

_LANE: RunVar[trio.Lock] = RunVar("kcompat_background_lane")


def _lane() -> trio.Lock:
    try:
        return _LANE.get()
    except LookupError:
        lane = trio.Lock()
        _LANE.set(lane)
        return lane


@asynccontextmanager
async def background_turn() -> AsyncIterator[None]:
    """Hold the lane for one chunk of background work (no ``await`` inside
    but this one: a chunk is one step of the loop). Entering is a turn of
    the loop, whether or not another chunk waits."""
    async with _lane():
        yield
