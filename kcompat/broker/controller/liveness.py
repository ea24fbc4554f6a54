"""Broker registration, heartbeats and fencing (KRaft's broker lifecycle).

Theory of operation
-------------------
Every broker, the controller included, sends the controller a ``Heartbeat``
every ``broker.heartbeat.interval.ms`` (and at once when the controller
changes or its metadata catches up): its node id, the *incarnation* (a random
id drawn when the process starts), the endpoint clients should use, its rack and machine,
whether its metadata image has caught up with the log, and whether it is
shutting down. The controller turns heartbeats into metadata records, so every
broker learns the same membership from the log:

* ``register_broker`` — a new incarnation (a first start or a restart) or a
  changed endpoint; registered fenced unless already caught up, as Kafka does;
* ``unfence_broker`` — a fenced broker whose metadata has caught up;
* ``fence_broker`` — a broker that asked to shut down (controlled shutdown),
  or whose last heartbeat is older than ``broker.session.timeout.ms``.

An unregistered broker (UnregisterBroker, ``unregister_broker``) stays
fenced: its heartbeats change nothing until it restarts as a new incarnation,
which registers afresh — as a Kafka broker keeps failing its heartbeats after
an unregistration until it is restarted.

Only unfenced brokers are *live*: Metadata and DescribeCluster list them, and
new replicas (CreateTopics, CreatePartitions) are placed on them, so a
replication factor above the live count is INVALID_REPLICATION_FACTOR.
Partition leadership does not depend on fencing — each partition's Raft group
elects its own leader — so fencing changes what clients are told and where
new data goes, never which acknowledged data survives.

``Membership`` is the controller's side and does no I/O: ``heartbeat`` and
``expire`` return the records to propose. It remembers what it has proposed
so a heartbeat arriving before the record commits does not propose it twice;
a new controller starts afresh with every registered broker's session just
begun (it cannot know when they last heartbeated), as Kafka's does.

A session counts only the time the controller was there to hear: when two
``expire`` checks (one a tick apart normally) lie further apart than
``STALL_GRACE_MS``, the controller itself was not running — its process was
stopped or its event loop held — and heartbeats sent in that time may be
waiting unread; that time is added to every session before any is judged.
So a controller that stalls never fences the brokers it could not hear,
itself included (issue 31: a broker fenced itself five times under load).
"""

from __future__ import annotations

from typing import Any

from kcompat.broker.replication.codec import Heartbeat
from kcompat.broker.storage.metadata import BrokerInfo

STALL_GRACE_MS = 1000.0  # a gap between expire checks beyond this: the controller stalled


class Membership:
    """The controller's view of broker sessions; pure (time is passed in)."""

    def __init__(self, session_timeout_ms: int) -> None:
        self.session_timeout_ms = session_timeout_ms
        self._last_seen: dict[int, float] = {}  # node id -> ms of its last heartbeat
        self._shutting_down: set[str] = set()  # incarnations that asked to stop
        self._proposed: dict[int, tuple[Any, ...]] = {}  # node -> the last change proposed
        self._checked: float | None = None  # ms of the last expire check
        self.stalled_ms = 0.0  # controller stall time credited to sessions, in all

    def restart_sessions(self, brokers: dict[int, BrokerInfo], now: float) -> None:
        """This node just became controller: every live broker's session
        starts now (a fenced one needs a heartbeat anyway)."""
        self._last_seen = {node: now for node, b in brokers.items() if not b.fenced}
        self._proposed.clear()
        self._checked = now

    def heartbeat(self, hb: Heartbeat, brokers: dict[int, BrokerInfo],
                  now: float) -> list[dict[str, Any]]:
        self._last_seen[hb.node_id] = now
        current = brokers.get(hb.node_id)
        if current is not None and current.retired and current.incarnation == hb.incarnation:
            return []
        if hb.shutting_down:
            self._shutting_down.add(hb.incarnation)
        if hb.incarnation in self._shutting_down:
            if current is not None and current.incarnation == hb.incarnation:
                return self._set_fenced(current, True, "controlled shutdown")
            return []
        if (current is None or current.incarnation != hb.incarnation
                or (current.host, current.port, current.rack, current.controller_only,
                    current.endpoints, current.machine)
                != (hb.host, hb.port, hb.rack, hb.controller_only, hb.endpoints, hb.machine)):
            fenced = not hb.caught_up
            want = ("register", hb.incarnation, hb.host, hb.port, hb.rack, fenced,
                    hb.controller_only, hb.endpoints, hb.machine)
            if self._proposed.get(hb.node_id) == want:
                return []
            self._proposed[hb.node_id] = want
            rec = {"type": "register_broker", "id": hb.node_id, "incarnation": hb.incarnation,
                   "host": hb.host, "port": hb.port, "rack": hb.rack, "fenced": fenced}
            if hb.controller_only:
                rec["controller_only"] = True
            if hb.endpoints:
                rec["endpoints"] = [list(e) for e in hb.endpoints]
            if hb.machine:
                rec["machine"] = hb.machine
            return [rec]
        if current.fenced and hb.caught_up:
            return self._set_fenced(current, False, "caught up")
        return []

    def alive(self, node: int, now: float) -> bool:
        """Has ``node`` heartbeated within the session (as far as we know)?"""
        seen = self._last_seen.get(node)
        return seen is not None and now - seen <= self.session_timeout_ms

    def expire(self, brokers: dict[int, BrokerInfo], now: float) -> list[dict[str, Any]]:
        """Fence every unfenced broker whose session has run out."""
        self._credit_stall(now)
        records: list[dict[str, Any]] = []
        for node, broker in sorted(brokers.items()):
            if broker.fenced:
                continue
            seen = self._last_seen.setdefault(node, now)
            if now - seen > self.session_timeout_ms:
                records += self._set_fenced(broker, True, "session expired")
        return records

    def _credit_stall(self, now: float) -> None:
        """Time the controller could not hear (see the module) is added to
        every session."""
        before, self._checked = self._checked, now
        if before is None or now - before <= STALL_GRACE_MS:
            return
        stalled = now - before - STALL_GRACE_MS
        self.stalled_ms += stalled
        for node, seen in self._last_seen.items():
            self._last_seen[node] = seen + stalled

    def _set_fenced(self, broker: BrokerInfo, fenced: bool, reason: str) -> list[dict[str, Any]]:
        want = ("fenced", broker.incarnation, fenced)
        if broker.fenced == fenced or self._proposed.get(broker.node_id) == want:
            return []
        self._proposed[broker.node_id] = want
        kind = "fence_broker" if fenced else "unfence_broker"
        return [{"type": kind, "id": broker.node_id, "incarnation": broker.incarnation,
                 "reason": reason}]
