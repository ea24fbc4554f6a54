"""The cleaner task lowers the interpreter's switch interval (``log_cleaner``'s
"The GIL"): a pass in a worker thread must not hold the event loop off the GIL
for 5 ms at each hand-over (bench/compaction.py measured produce p50 of
80-600 ms while a pass ran, 2-13 ms with 0.5 ms)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import trio

from kcompat.broker.log_cleaner import SWITCH_INTERVAL_S, LogCleaner


@pytest.fixture
def default_interval() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(0.005)  # CPython's default
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def _run_briefly(enable: bool) -> None:
    state: Any = SimpleNamespace(partitions={}, config={
        "log.cleaner.enable": enable, "log.cleaner.backoff.ms": 10,
        "log.cleaner.dedupe.buffer.size": 1 << 20})

    async def main() -> None:
        with trio.move_on_after(0.05):
            await LogCleaner(state).run()

    trio.run(main)


def test_a_running_cleaner_lowers_the_switch_interval(default_interval: None) -> None:
    _run_briefly(enable=True)
    assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S)
    assert SWITCH_INTERVAL_S <= 0.001


def test_a_disabled_cleaner_leaves_it(default_interval: None) -> None:
    _run_briefly(enable=False)
    assert sys.getswitchinterval() == pytest.approx(0.005)
