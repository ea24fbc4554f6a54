from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests._broker import Broker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path / "broker").start()
    try:
        yield b
    finally:
        b.stop() if b.running else None
