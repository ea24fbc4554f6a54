"""``connections.max.idle.ms`` (Kafka's key, default 10 min): a connection that
sends nothing for that long is closed by the broker, with a logged reason; one
that keeps sending is not. Without it, connections opened and left idle were
held forever (file descriptors, sessions)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests._broker import Broker, running
from compat_tests.java.test_connection_limits_differential import _served

IDLE_MS = 500


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    yield from running(Broker(tmp_path, extra_args=(
        "--set", f"connections.max.idle.ms={IDLE_MS}",)))


def _connect(broker: Broker) -> socket.socket:
    return socket.create_connection((broker.host, broker.port), timeout=10)


def test_an_idle_connection_is_closed_and_a_busy_one_is_not(broker: Broker) -> None:
    idle, busy = _connect(broker), _connect(broker)
    try:
        assert _served(idle) and _served(busy)
        # the busy one asks every fifth of the idle time, for three idle times
        until = time.monotonic() + 3 * IDLE_MS / 1000
        while time.monotonic() < until:
            assert _served(busy), "a connection in use was closed"
            time.sleep(IDLE_MS / 5000)
        idle.settimeout(10)  # the rest of its one answer, then the end of the stream
        while chunk := idle.recv(65536):
            assert len(chunk) < 65536, "more than one answer's bytes"
    finally:
        idle.close()
        busy.close()
    assert f"idle for {IDLE_MS} ms" in broker.tail(50)
