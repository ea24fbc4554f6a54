"""The garbage collector runs between the loop's turns, not inside a step.

Theory of operation
-------------------
CPython starts a collection from whatever allocation crosses its young
threshold: in the middle of a step, in the middle of a request's burst of
objects. A produce of delayed records makes some ten thousand short-lived
objects; a young collection in its middle finds them all alive, walks them,
keeps them, and the middle generation walks them again later. Under such a
load the collector took about a tenth of the loop (bench/RESULTS.md, "Two
ideas for the plain producer's wait"), and each collection held whichever
step it landed in.

``TurnCollector`` is a trio instrument. Its ``before_io_wait`` runs once per
turn of the loop, after a batch of task steps and before the loop polls for
I/O: no step is under way, and whatever a finished request made is mostly
freed already (a tracked object's release takes it back off the young
count). There it collects when the young generation's count reached
``YOUNG_AT`` (CPython's young threshold, 700 by default, counts the same
thing), choosing the generation as CPython does: the middle one once
``middle_at`` young collections happened since its last (``gc.get_count``),
the whole heap once ``full_at`` middle ones did *and* the heap grew by a
quarter since the last full collection. CPython's own guard for that last
step (a full collection only once a quarter of the long-lived objects are
new) reads counters Python cannot see; the allocator's count of blocks in
use (``sys.getallocatedblocks``, a walk of its arenas' headers) stands in,
measured from its lowest point since the last full collection, so a heap
that shrank does not hide growth. Memory held by cycles is bounded the same
way: by a quarter of the heap.

The automatic collector stays on, with a young threshold of
``server.GC_THRESHOLDS[0]`` — ten times ``YOUNG_AT`` — as a net: a single
step (or a worker thread while the loop sleeps) that keeps that many new
objects alive still gets a collection where it is, as before, with
CPython's rules. 2M delayed records produced on one node cost the
collector 3.0-3.4 s when it ran where the allocations fell and each record's
move was a named tuple; 2.1-2.2 s collected at the turns; 0.6 s once the
moves were held in columns (``ext.moves``) and a split no longer kept a
tuple per record of the batch (bench/RESULTS.md, "The garbage collector
between the loop's turns").

Each collection, wherever it starts, is timed by ``loop_monitor``'s
``kcompat_gc_pause_seconds``; the turn collector's are also counted in
``kcompat_gc_turn_collections_total{generation}``.
"""

from __future__ import annotations

import gc
import sys

import trio
from prometheus_client import CollectorRegistry, Counter

YOUNG_AT = 2_000  # tracked objects kept since the last collection: collect at the turn's end
FULL_GROWTH = 1.25  # a full collection once the heap is this much its low since the last one


class TurnCollector(trio.abc.Instrument):
    """Collects at the end of a turn of the loop (see the module)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        _, self.middle_at, self.full_at = gc.get_threshold()
        self.low_blocks = sys.getallocatedblocks()
        self.collections = Counter("kcompat_gc_turn_collections",
                                   "Collections the broker ran between two turns of its event "
                                   "loop, per generation", ["generation"], registry=registry)
        self._counts = [self.collections.labels(str(generation)) for generation in range(3)]

    def before_io_wait(self, timeout: float) -> None:
        young, middle, full = gc.get_count()
        if young < YOUNG_AT:
            return
        generation = self.generation(middle, full)
        gc.collect(generation)
        self._counts[generation].inc()
        if generation == 2:
            self.low_blocks = sys.getallocatedblocks()

    def generation(self, middle: int, full: int) -> int:
        """Which generation a collection due now takes (see the module)."""
        if middle <= self.middle_at:  # CPython's test: more than the threshold
            return 0
        if full <= self.full_at:
            return 1
        blocks = sys.getallocatedblocks()
        if blocks >= self.low_blocks * FULL_GROWTH:
            return 2
        self.low_blocks = min(self.low_blocks, blocks)
        return 1

    async def run(self) -> None:
        """Collect at the turns' ends while this task runs."""
        trio.lowlevel.add_instrument(self)
        try:
            await trio.sleep_forever()
        finally:
            trio.lowlevel.remove_instrument(self)
