"""Connection limits, as Kafka's ``ConnectionQuotas`` applies them.

Theory of operation
-------------------
Every accepted connection is admitted here before its first byte is read
(``admit``) and let go when it closes (``release``); the limits are read at
each admission, so a dynamic change (AlterConfigs on the cluster default or a
broker, of a key or of a listener's ``listener.name.<l>.`` value of it) applies
to the next connection.

* ``max.connection.creation.rate`` (broker-wide) and its
  ``listener.name.<l>.`` value (which defaults to it): a connection that takes
  the rate of new connections over it is counted and then held, unread, for
  the throttle time, at most one ``quota.window.size.seconds`` window — Kafka's
  acceptor delays the same way.
* ``max.connections`` (broker-wide) and ``listener.name.<l>.max.connections``:
  a connection beyond them waits, unread, until another closes — Kafka's
  acceptor blocks the same way. While other listeners exist the inter-broker
  listener is exempt from both broker-wide limits (its listener's hold).
* ``connection_creation_rate`` of an ``ip`` quota entity (AlterClientQuotas;
  the ``<default>`` ip entity for the others): a connection that takes its IP
  over the rate is refused and closed after the throttle time, capped at one
  ``quota.window.size.seconds`` window, and not counted
  (``ConnectionThrottledException``). The rate is the byte quotas' ``Rate``.
* ``max.connections.per.ip`` and ``max.connections.per.ip.overrides``
  (``host:count`` pairs): a connection from an IP already holding its limit is
  closed at once (``TooManyConnectionsException``).

Not done: Kafka's closing of the least recently used connection when
``max.connections`` is lowered below the connections open.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Callable
from typing import Any

import trio

from kcompat.broker.controller.client_quotas import IP
from kcompat.broker.net.quotas import QuotaConfig, Quotas, Rate, monotonic_ms, throttle_time_ms
from kcompat.security.hosts import host_address

log = logging.getLogger("kcompat.conn")

RATE = "connection_creation_rate"
_IDLE_MS = 3600 * 1000
_UNLIMITED = 2147483647
_SWEEP_ABOVE = 10_000


class ConnectionRefused(Exception):
    """Close this connection (after ``close_after_s``): the reason is logged."""

    def __init__(self, reason: str, close_after_s: float = 0.0) -> None:
        super().__init__(reason)
        self.close_after_s = close_after_s


def _address(host: str) -> str:
    """An IP as connections name it (``session.host_address``); a host name
    resolved (Kafka's InetAddress.getByName)."""
    try:
        ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        host = socket.gethostbyname(host)
    return host_address(host)


def parse_overrides(text: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count`` pairs, comma-separated."""
    out: dict[str, int] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(f"{item!r} is not host:count")
        out[_address(host.strip().strip("[]"))] = int(count)
    return out


class ConnectionQuotas:
    """The connections open per IP, per listener and in all, and each IP's rate."""

    def __init__(self, config: Any, inter_broker: str, quotas: Callable[[], Quotas],
                 listeners: int = 1, clock_ms: Callable[[], int] = monotonic_ms) -> None:
        self.config = config
        self.inter_broker = inter_broker
        self.quotas = quotas
        self.listeners = listeners
        self.clock_ms = clock_ms
        self.per_ip: dict[str, int] = {}
        self.per_listener: dict[str, int] = {}
        self.total = 0
        self.rates: dict[str, tuple[Rate, int]] = {}  # ip -> (rate, last record ms)
        self.creations: dict[str, Rate] = {}  # "" (the broker) or a listener -> its rate
        self._freed = trio.Event()
        self._overrides: tuple[str, dict[str, int]] = ("", {})

    # -- the limits as configured now -------------------------------------------------

    async def _max_for(self, ip: str) -> int:
        text = str(self.config["max.connections.per.ip.overrides"])
        if text != self._overrides[0]:  # parsed once per value; a host name is a DNS lookup
            self._overrides = (text, await trio.to_thread.run_sync(parse_overrides, text))
        return self._overrides[1].get(ip, int(self.config["max.connections.per.ip"]))

    def _protected(self, listener: str) -> bool:
        """The inter-broker listener, while there are others: exempt from the
        broker-wide limits."""
        return listener == self.inter_broker and self.listeners > 1

    def _slot(self, listener: str) -> bool:
        own = int(self.config.for_listener(listener, "max.connections"))
        if self.per_listener.get(listener, 0) >= own:
            return False
        if self._protected(listener):
            return True
        return self.total < int(self.config["max.connections"])

    def _creation_throttle_ms(self, listener: str) -> int:
        """Record a new connection in the broker's and the listener's rates;
        how long it must wait (Kafka's ``recordConnectionAndGetThrottleTimeMs``)."""
        now_ms = self.clock_ms()
        key = "max.connection.creation.rate"
        throttle = 0
        if not self._protected(listener):
            throttle = self._creation("", int(self.config[key]), now_ms)
        return max(throttle, self._creation(f"listener:{listener}",
                                            int(self.config.for_listener(listener, key)), now_ms))

    def _rate(self) -> Rate:
        qc = QuotaConfig.of(self.config)
        return Rate(qc.window_num, qc.window_size_s * 1000)

    def _creation(self, name: str, bound: int, now_ms: int) -> int:
        """Record a connection in the rate ``name`` (made on first use); its throttle."""
        if bound >= _UNLIMITED:
            return 0
        rate = self.creations.get(name)
        if rate is None:
            rate = self.creations[name] = self._rate()
        rate.record(1.0, now_ms)
        observed = rate.measure(now_ms)
        if observed <= bound:
            return 0
        return self._bounded_throttle_ms(rate, observed, bound, now_ms)

    def _bounded_throttle_ms(self, rate: Rate, observed: float, bound: float,
                             now_ms: int) -> int:
        """Kafka's ``QuotaUtils.boundedThrottleTime``: at most one window."""
        window_ms = QuotaConfig.of(self.config).window_size_s * 1000
        if bound <= 0:
            return window_ms
        return min(throttle_time_ms(observed, bound, rate.window_size_ms(now_ms)), window_ms)

    def _rate_limit(self, ip: str) -> float | None:
        """The ip entity's rate (its name in any spelling of the address), else
        the ``<default>`` ip entity's."""
        default = None
        for entity, values in self.quotas().items():
            if len(entity) != 1 or entity[0][0] != IP or RATE not in values:
                continue
            name = entity[0][1]
            if name is None:
                default = float(values[RATE])
            elif host_address(name) == ip:
                return float(values[RATE])
        return default

    # -- admission ----------------------------------------------------------------------

    async def admit(self, listener: str, ip: str) -> None:
        """Count a new connection from ``ip`` on ``listener``, once there is
        room for it; ConnectionRefused if it must be closed instead."""
        throttle_ms = self._creation_throttle_ms(listener)
        if throttle_ms > 0:
            await trio.sleep(throttle_ms / 1000)
        limit = await self._max_for(ip)  # may await: before anything is counted
        while not self._slot(listener):
            await self._freed.wait()
        self._record_rate(ip)
        count = self.per_ip.get(ip, 0)
        if count >= limit:
            raise ConnectionRefused(f"too many connections from {ip} (maximum = {limit})")
        self.per_ip[ip] = count + 1
        self.per_listener[listener] = self.per_listener.get(listener, 0) + 1
        self.total += 1

    def release(self, listener: str, ip: str) -> None:
        left = self.per_ip.get(ip, 0) - 1
        if left > 0:
            self.per_ip[ip] = left
        else:
            self.per_ip.pop(ip, None)
        self.per_listener[listener] = max(0, self.per_listener.get(listener, 0) - 1)
        self.total = max(0, self.total - 1)
        self._freed.set()
        self._freed = trio.Event()

    def _record_rate(self, ip: str) -> None:
        bound = self._rate_limit(ip)
        if bound is None:
            return
        now_ms = self.clock_ms()
        if len(self.rates) > _SWEEP_ABOVE:  # IPs quiet for an hour are forgotten, as Kafka's
            self.rates = {k: v for k, v in self.rates.items() if now_ms - v[1] < _IDLE_MS}
        found = self.rates.get(ip)
        rate = found[0] if found else self._rate()
        self.rates[ip] = (rate, now_ms)
        rate.record(1.0, now_ms)
        observed = rate.measure(now_ms)
        if observed <= bound:
            return
        rate.record(-1.0, now_ms)  # not accepted: not counted
        throttle_ms = self._bounded_throttle_ms(rate, observed, bound, now_ms)
        raise ConnectionRefused(f"{ip} throttled for {throttle_ms} ms "
                                f"({RATE} {bound:g})", throttle_ms / 1000)
