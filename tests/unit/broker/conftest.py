"""A fresh one-node broker over a test's own directory (a module may define
its own ``broker`` fixture instead)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kcompat.broker.config import broker_config
from kcompat.broker.host.broker import Broker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    cfg = broker_config.load(None, {"log.dirs": str(tmp_path)}, {})
    b = Broker(cfg)
    yield b
    b.close()
