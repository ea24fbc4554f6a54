"""What a broker process sets up as it starts: the GIL switch interval that
keeps its event loop from waiting 5 ms per socket call beside a busy worker
thread, and the collector's thresholds that space its full collections
(``server``'s theory of operation)."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import trio

from kcompat.broker.config import broker_config
from kcompat.broker.node import server


def test_the_broker_shortens_the_gil_switch_interval_and_spaces_full_collections(
        tmp_path: Path) -> None:
    cfg = broker_config.load(None, {"log.dirs": str(tmp_path), "port": 0, "admin.port": -1},
                             {})
    before, thresholds = sys.getswitchinterval(), gc.get_threshold()
    seen: list[object] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(server.run_broker, cfg)
            seen.extend((sys.getswitchinterval(), gc.get_threshold()))
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        sys.setswitchinterval(before)
        gc.set_threshold(*thresholds)
    assert seen == [server.GIL_SWITCH_INTERVAL_S, server.GC_THRESHOLDS]
    assert server.GC_THRESHOLDS[2] > 10  # CPython's default: a full collection every 10 middle ones
    assert server.GIL_SWITCH_INTERVAL_S <= 0.001
