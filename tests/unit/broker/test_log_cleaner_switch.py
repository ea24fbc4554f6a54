"""The cleaner task lowers the interpreter's switch interval while a pass runs
(``log_cleaner``'s "The GIL"): a pass in a worker thread must not hold the
event loop off the GIL for 5 ms at each hand-over (bench/compaction.py measured produce p50 of
80-600 ms while a pass ran, 2-13 ms with 0.5 ms)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import trio

from kcompat.broker.storage.log_cleaner import SWITCH_INTERVAL_S, LogCleaner
from kcompat.log import cleaner


@pytest.fixture
def default_interval() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(0.005)  # CPython's default
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def test_the_switch_interval_is_short_while_a_pass_runs_and_restored_after(
        default_interval: None, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[float] = []

    def fake_clean(plan: Any) -> None:  # runs in the worker thread, as a pass does
        seen.append(sys.getswitchinterval())
        raise OSError("stop here")  # an abandoned pass: the log is left as it was

    monkeypatch.setattr(cleaner, "clean", fake_clean)
    plan = SimpleNamespace(dirty_bytes=1, total_bytes=2)
    log = SimpleNamespace(config=SimpleNamespace(compact=True, max_compaction_lag_ms=1 << 62),
                          active_first_timestamp_ms=lambda: None,
                          cleaner_plan=lambda hw, now, keys: plan,
                          cleaner_done=lambda result, p: False)
    part = SimpleNamespace(topic="t", index=0, log=log, high_watermark=0)
    state: Any = SimpleNamespace(partitions={("t", 0): part}, config={
        "log.cleaner.enable": True, "log.cleaner.backoff.ms": 10,
        "log.cleaner.dedupe.buffer.size": 1 << 20})
    trio.run(LogCleaner(state).clean_all)
    assert seen == [pytest.approx(SWITCH_INTERVAL_S)] and SWITCH_INTERVAL_S <= 0.001
    assert sys.getswitchinterval() == pytest.approx(0.005)
