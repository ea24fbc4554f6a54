"""Connection limits (``broker.connection_quotas``), Kafka's ConnectionQuotas rules:
the per-IP limit and its overrides refuse at once, the broker-wide and listener
limits make a connection wait for a free slot (the inter-broker listener
exempt from the broker-wide one), an IP over its creation rate is refused for
at most one quota window and not counted. (Against Apache Kafka:
compat_tests/java/test_connection_limits_differential.py.)"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

from kcompat.broker.controller.client_quotas import IP
from kcompat.broker.net.connection_quotas import (
    ConnectionQuotas,
    ConnectionRefused,
    parse_overrides,
)
from kcompat.broker.net.quotas import Quotas
from kcompat.security.hosts import host_address

MAX = 2147483647


class Config(dict[str, Any]):
    def for_listener(self, listener: str, key: str) -> Any:
        return self.get(f"listener.name.{listener.lower()}.{key}", self[key])


def config(**overrides: Any) -> Config:
    c = Config({"max.connections": MAX, "max.connections.per.ip": MAX,
                "max.connection.creation.rate": MAX,
                "max.connections.per.ip.overrides": "", "quota.window.num": 11,
                "quota.window.size.seconds": 1})
    c.update({k.replace("_", "."): v for k, v in overrides.items()})
    return c


class Clock:
    now_ms = 0

    def __call__(self) -> int:
        return self.now_ms


def trio_test(fn: Callable[[], Awaitable[None]]) -> Callable[[], None]:
    @functools.wraps(fn)
    def run() -> None:
        trio.run(fn)
    return run


def limits(cfg: Config, quotas: Quotas | None = None, listeners: int = 2,
           clock: Clock | None = None) -> ConnectionQuotas:
    return ConnectionQuotas(cfg, "INTERNAL", lambda: quotas or {}, listeners,
                            clock or Clock())


@trio_test
async def test_the_per_ip_limit_and_its_overrides_refuse_at_once() -> None:
    cfg = config(max_connections_per_ip=2)
    cfg["max.connections.per.ip.overrides"] = "127.0.0.9:1, localhost:3"
    q = limits(cfg)
    for _ in range(2):
        await q.admit("PLAINTEXT", "10.0.0.1")
    with pytest.raises(ConnectionRefused, match=r"too many connections from 10.0.0.1 \(maximum = 2\)"):
        await q.admit("PLAINTEXT", "10.0.0.1")
    assert q.per_ip == {"10.0.0.1": 2} and q.total == 2  # the refused one is not counted
    await q.admit("PLAINTEXT", "127.0.0.9")
    with pytest.raises(ConnectionRefused):
        await q.admit("PLAINTEXT", "127.0.0.9")
    for _ in range(3):  # a host name override: its address's limit
        await q.admit("PLAINTEXT", "127.0.0.1")
    with pytest.raises(ConnectionRefused):
        await q.admit("PLAINTEXT", "127.0.0.1")
    q.release("PLAINTEXT", "10.0.0.1")
    await q.admit("PLAINTEXT", "10.0.0.1")  # room again


@trio_test
async def test_max_connections_waits_for_a_free_slot() -> None:
    cfg = config(max_connections=2)
    q = limits(cfg)
    await q.admit("PLAINTEXT", "10.0.0.1")
    await q.admit("PLAINTEXT", "10.0.0.2")
    admitted = trio.Event()

    async def third() -> None:
        await q.admit("PLAINTEXT", "10.0.0.3")
        admitted.set()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(third)
        await trio.testing.wait_all_tasks_blocked()
        assert not admitted.is_set() and q.total == 2
        await q.admit("INTERNAL", "10.0.0.4")  # the inter-broker listener: not held back
        assert q.total == 3
        q.release("PLAINTEXT", "10.0.0.1")
        q.release("INTERNAL", "10.0.0.4")
        await admitted.wait()
    assert q.per_ip == {"10.0.0.2": 1, "10.0.0.3": 1}


@trio_test
async def test_a_listener_limit_holds_for_its_listener_only() -> None:
    cfg = config()
    cfg["listener.name.plaintext.max.connections"] = 1
    q = limits(cfg, listeners=1)
    await q.admit("PLAINTEXT", "10.0.0.1")
    await q.admit("SSL", "10.0.0.1")
    with trio.move_on_after(0.05) as waited:
        await q.admit("PLAINTEXT", "10.0.0.2")
    assert waited.cancelled_caught and q.total == 2


@trio_test
async def test_an_ip_over_its_creation_rate_is_refused_for_at_most_a_window() -> None:
    clock = Clock()
    quotas: Quotas = {((IP, "10.0.0.1"),): {"connection_creation_rate": 2.0},
                      ((IP, None),): {"connection_creation_rate": 100.0}}
    q = limits(config(), quotas, clock=clock)
    for _ in range(20):  # 20 over a new IP's padded 10 s window: 2 a second
        await q.admit("PLAINTEXT", "10.0.0.1")
    with pytest.raises(ConnectionRefused) as refused:
        await q.admit("PLAINTEXT", "10.0.0.1")
    assert 0 < refused.value.close_after_s <= 1.0  # capped at one window
    assert q.per_ip["10.0.0.1"] == 20  # not counted
    for _ in range(40):  # another IP has the <default> ip entity's rate
        await q.admit("PLAINTEXT", "10.0.0.2")
    clock.now_ms += 3000  # the window is still padded to 10 s: still over
    with pytest.raises(ConnectionRefused):
        await q.admit("PLAINTEXT", "10.0.0.1")
    clock.now_ms += 8000  # 11 windows on, the first sample is dropped
    await q.admit("PLAINTEXT", "10.0.0.1")


def test_overrides_are_host_count_pairs() -> None:
    assert parse_overrides("") == {}
    # IPv6 as Java writes it, as connections are named (``session.host_address``)
    assert parse_overrides("10.0.0.1:5,[::1]:2") == {"10.0.0.1": 5, "0:0:0:0:0:0:0:1": 2}


def test_peer_addresses_are_written_as_java_writes_them() -> None:
    assert host_address("127.0.0.1") == "127.0.0.1"
    assert host_address("::1") == "0:0:0:0:0:0:0:1"
    assert host_address("::ffff:10.1.2.3") == "10.1.2.3"  # a dual-stack socket's IPv4 peer
    assert host_address("2001:db8::ab:1") == "2001:db8:0:0:0:0:ab:1"
    assert host_address("fe80::1%eth0") == "fe80:0:0:0:0:0:0:1%eth0"


async def _ipv6_quota_by_any_spelling() -> None:
    quotas: Quotas = {((IP, "::1"),): {"connection_creation_rate": 0.0}}
    q = limits(config(), quotas)
    with pytest.raises(ConnectionRefused):
        await q.admit("PLAINTEXT", "0:0:0:0:0:0:0:1")


def test_an_ip_quota_names_an_ipv6_address_in_any_spelling() -> None:
    trio.run(_ipv6_quota_by_any_spelling)
    with pytest.raises(ValueError):
        parse_overrides("10.0.0.1")


def test_the_broker_creation_rate_holds_a_connection_for_its_throttle() -> None:
    """max.connection.creation.rate 2: twenty new connections over a new rate's
    padded 10 s go at once; the 21st is counted, then held for its throttle
    (at most a window); the inter-broker listener is exempt."""
    clock = Clock()

    async def main() -> None:
        q = limits(config(max_connection_creation_rate=2), clock=clock)
        for i in range(20):
            await q.admit("PLAINTEXT", f"10.0.0.{i}")
        start = trio.current_time()
        await q.admit("PLAINTEXT", "10.0.1.1")
        held = trio.current_time() - start
        assert 0 < held <= 1.0, held
        assert q.total == 21  # held, not refused
        start = trio.current_time()
        await q.admit("INTERNAL", "10.0.2.1")  # the inter-broker listener: not held
        assert trio.current_time() == start
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_listener_creation_rate_holds_its_own_listener_only() -> None:
    clock = Clock()

    async def main() -> None:
        cfg = config()
        cfg["listener.name.plaintext.max.connection.creation.rate"] = 1
        q = limits(cfg, listeners=1, clock=clock)
        for i in range(10):
            await q.admit("PLAINTEXT", f"10.0.0.{i}")
        start = trio.current_time()
        for i in range(30):
            await q.admit("SSL", f"10.0.3.{i}")
        assert trio.current_time() == start  # SSL has no rate of its own
        await q.admit("PLAINTEXT", "10.0.4.1")
        assert trio.current_time() > start
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
