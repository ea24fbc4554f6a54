"""What a broker process sets up as it starts: the GIL switch interval that
keeps its event loop from waiting 5 ms per socket call beside a busy worker
thread (``server``'s theory of operation)."""

from __future__ import annotations

import sys
from pathlib import Path

import trio

from kcompat.broker import config as broker_config
from kcompat.broker import server


def test_the_broker_shortens_the_gil_switch_interval(tmp_path: Path) -> None:
    cfg = broker_config.load(None, {"log.dirs": str(tmp_path), "port": 0, "admin.port": -1},
                             {})
    before = sys.getswitchinterval()
    seen: list[float] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(server.run_broker, cfg)
            seen.append(sys.getswitchinterval())
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        sys.setswitchinterval(before)
    assert seen == [server.GIL_SWITCH_INTERVAL_S]
    assert server.GIL_SWITCH_INTERVAL_S <= 0.001
