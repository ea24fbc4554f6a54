"""Connection limits over IPv6, on a real broker process: a peer's address is
named as Java writes it (``0:0:0:0:0:0:0:1``, ``session.host_address``), so a
``max.connections.per.ip.overrides`` entry in the usual ``::1`` spelling
limits it (the differential against Kafka, over IPv4, is
``compat_tests/java/test_connection_limits_differential.py``)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests._broker import Broker, free_port, running
from compat_tests.java.test_connection_limits_differential import _served


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def _free_ipv6_port() -> int:
    """A port from this worker's slice (``free_port`` checks it on IPv4) that is
    free on ::1 too: something else here once held one there (EADDRINUSE)."""
    for _ in range(100):
        port = free_port()
        with socket.socket(socket.AF_INET6) as s:
            try:
                s.bind(("::1", port))
            except OSError:
                continue
        return port
    raise AssertionError("no port of this worker's slice is free on ::1")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    if not _ipv6_loopback():
        pytest.skip("this machine has no IPv6 loopback (::1) to listen on")
    yield from running(Broker(tmp_path, host="::1", port=_free_ipv6_port(), extra_args=(
        "--set", "max.connections.per.ip.overrides=::1:1")))


def _served_connection(port: int) -> socket.socket:
    """A connection from ::1 that is served, once the broker has noticed the
    earlier ones closed (a close is seen a moment later: until then the one
    connection the override allows is still taken)."""
    deadline = time.monotonic() + 10
    while True:
        sock = socket.create_connection(("::1", port), timeout=5)
        if _served(sock):
            return sock
        sock.close()
        assert time.monotonic() < deadline, "no connection from ::1 was served"
        time.sleep(0.05)


def test_an_ipv6_peer_is_limited_by_its_override(broker: Broker) -> None:
    first = _served_connection(broker.port)
    second = socket.create_connection(("::1", broker.port), timeout=5)
    try:
        assert not _served(second)  # closed at once: the override's one connection is taken
    finally:
        first.close()
        second.close()
    _served_connection(broker.port).close()  # the first one closed: room again
    assert "too many connections from 0:0:0:0:0:0:0:1 (maximum = 1)" in broker.tail(50)
