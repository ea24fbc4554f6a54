"""This broker's side of registration, heartbeats, fencing and controlled shutdown.

Theory of operation
-------------------
``liveness.Membership`` decides (on the controller) which records heartbeats
and silence produce; this module drives it inside the running broker:

* every tick ``heartbeat`` sends the controller a ``Heartbeat`` when the
  interval is due by the clock (a busy loop ticks late: counted in ticks, the
  interval stretched past the session and a broker fenced itself), at once
  when the controller, its term or our catch-up state changes, and every few
  ticks' worth of time until our registration is live (a first heartbeat can
  be dropped while the connection is dialled); the controller delivers its
  own heartbeat locally;
* on the controller, ``on_heartbeat`` and ``expire_sessions`` propose the
  records ``Membership`` returns (a new controller restarts every session);
* ``serving`` is what Kafka waits for before a broker answers clients: its
  metadata is caught up and its registration (this incarnation) is unfenced
  (and, here, two leadership-announcement periods have passed); until this
  process first serves (``served``), ``connection`` holds every client
  request but the handshake's and the quorum's (bounded), as Kafka opens
  its listeners only then; Metadata, DescribeCluster and a few more hold
  their answers whenever it does not serve (bounded);
* ``controlled_shutdown`` (SIGTERM): heartbeat "shutting down" (the
  controller fences us at once) and hand each leadership to a caught-up
  replica that is still fetching, with a Raft leadership transfer, so clients
  move on without an election timeout (when the last brokers of a cluster
  stop, there is nobody to hand to and it stops at once);
* unregistered (UnregisterBroker, ``kcompat cluster decommission``): this
  process stays fenced until it restarts, and hands each partition
  leadership it holds (or wins later) to a caught-up replica, as in a
  controlled shutdown — clients are not told of a fenced leader;
* ``broker_endpoints`` and ``live_broker_ids`` answer where clients and new
  replicas may go; ``advertised_controller`` is the ``controller_id`` clients
  are told: as from a Kafka 4 broker (KIP-590), a random live broker, not the
  metadata leader (clients send admin requests there and every broker
  forwards them to the controller), so it is never -1 while a broker lives.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import trio

from kcompat.broker.controller.liveness import Membership
from kcompat.broker.replication.codec import Heartbeat
from kcompat.broker.replication.group import NotLeaderError
from kcompat.raft import NO_NODE

if TYPE_CHECKING:
    from kcompat.broker.replication.group import Group
    from kcompat.broker.replication.runtime import ClusterRuntime

log = logging.getLogger("kcompat.cluster")

UNREGISTERED_RETRY_TICKS = 5
ANNOUNCE_ROUNDS = 2  # announcement periods a starting broker waits to learn leaders


class BrokerLifecycle:
    def __init__(self, runtime: ClusterRuntime) -> None:
        self.rt = runtime
        config = runtime.state.config
        self.incarnation = uuid.uuid4().hex  # this process, as registered with the controller
        self.membership = Membership(config["broker.session.timeout.ms"])
        self.heartbeat_ticks = max(1, config["broker.heartbeat.interval.ms"]
                                   // config["kcompat.raft.tick.ms"])
        self.heartbeat_ms = config["broker.heartbeat.interval.ms"]
        self.retry_ms = UNREGISTERED_RETRY_TICKS * config["kcompat.raft.tick.ms"]
        self.shutting_down = False
        self.served = False  # ``serving`` was once true (logged then, once)
        self._sent_key: tuple[int, int, bool] | None = None
        self._sent_ms = 0.0  # when the last heartbeat went (monotonic ms)
        self._was_controller = False

    # -- this broker ------------------------------------------------------------------

    @property
    def serving(self) -> bool:
        """Caught up and registered unfenced (or stopping, or unregistered: it
        still answers clients, as Kafka's does), and running long enough to
        have heard every peer's leadership announcements (partitions this
        broker does not replicate have no other source of leaders)."""
        rt = self.rt
        me = rt.image.brokers.get(rt.node_id)
        registered = me is not None and me.incarnation == self.incarnation and not me.fenced
        heard = not rt.peers or rt.ticks >= ANNOUNCE_ROUNDS * rt.announce_ticks
        return rt.caught_up and heard and (registered or self.shutting_down
                                           or self.unregistered)

    async def wait_serving(self, timeout_s: float) -> None:
        """Like a Kafka broker that has not replayed the metadata log yet, hold
        Metadata answers briefly rather than describe a stale cluster."""
        rt = self.rt
        with trio.move_on_after(timeout_s):
            while not self.serving:
                with trio.move_on_after(rt.tick_s * 2):
                    await rt.meta.changed.wait()

    @property
    def unregistered(self) -> bool:
        """The controller unregistered this process (``unregister_broker``)."""
        me = self.rt.image.brokers.get(self.rt.node_id)
        return me is not None and me.retired and me.incarnation == self.incarnation

    def heartbeat(self, ticks: int, force: bool = False) -> None:
        rt = self.rt
        if not self.served and self.serving:
            self.served = True
            log.info("broker %d serving clients: metadata caught up, registered, "
                     "leaders heard", rt.node_id)
        if ticks % self.heartbeat_ticks == 0 and self.unregistered:
            self._hand_off_leaderships()
        controller = rt.controller_id
        if controller == NO_NODE:
            return
        caught_up = rt.caught_up
        key = (controller, rt.meta.raft.term, caught_up)
        # by the clock, not by ticks: a busy loop ticks late, and a heartbeat
        # every so many ticks could come later than the session allows
        every_ms = self.heartbeat_ms if self.serving else min(self.heartbeat_ms, self.retry_ms)
        now = _clock_ms()
        if not force and key == self._sent_key and now - self._sent_ms < every_ms:
            return
        self._sent_key, self._sent_ms = key, now
        config = rt.state.config
        host = rt.voters[rt.node_id][0] if rt.node_id in rt.voters else config["host"]
        port = rt.state.advertised_port  # the bound port (``--port 0`` picks one)
        hb = Heartbeat(rt.node_id, self.incarnation, config["advertised.host"] or host, port,
                       config["broker.rack"] or None, caught_up, self.shutting_down,
                       "broker" not in config["process.roles"], rt.state.endpoints,
                       config["kcompat.machine.id"])
        if controller == rt.node_id:
            self.on_heartbeat(hb)
        else:
            rt.send_internal(controller, hb)

    async def controlled_shutdown(self, timeout_s: float = 5.0) -> None:
        rt = self.rt
        self.shutting_down = True
        deadline = trio.current_time() + timeout_s
        while trio.current_time() < deadline:
            self.heartbeat(0, force=True)
            if not self._hand_off_leaderships(metadata=True):
                return  # nothing led, or no live caught-up replica to take it
            await trio.sleep(rt.tick_s * 2)
        log.info("controlled shutdown: still leading some groups after %.1f s", timeout_s)

    def _hand_off_leaderships(self, metadata: bool = False) -> int:
        """Begin handing every group this broker leads (the metadata quorum's
        only if ``metadata``) to a caught-up live replica; how many."""
        rt = self.rt
        handing = 0
        for group in [g for g in rt.groups.values() if g.is_leader and not g.removed]:
            if group is rt.meta and not metadata:
                continue
            target = self._successor(group)
            if target != NO_NODE:
                rt.transfer_leadership(group, target)
                handing += 1
        if handing:
            rt.kick()
        return handing

    def _successor(self, group: Group) -> int:
        """A caught-up replica that fetched within the last election timeout."""
        idle = group.raft.status().idle_ticks
        for node in self.rt.isr(group):
            if node != self.rt.node_id and idle.get(node, 1 << 30) < self.rt.election_ticks:
                return node
        return NO_NODE

    # -- the controller -----------------------------------------------------------------

    def on_heartbeat(self, hb: Heartbeat) -> None:
        rt = self.rt
        if rt.is_controller and rt.caught_up:
            self._propose(self.membership.heartbeat(hb, rt.image.brokers, _clock_ms()))

    def expire_sessions(self) -> None:
        rt = self.rt
        is_controller = rt.is_controller and rt.caught_up
        if is_controller and not self._was_controller:
            self.membership.restart_sessions(rt.image.brokers, _clock_ms())
        self._was_controller = is_controller
        if is_controller:
            self._propose(self.membership.expire(rt.image.brokers, _clock_ms()))

    def _propose(self, records: list[dict[str, Any]]) -> None:
        for rec in records:
            try:
                self.rt.propose_metadata_nowait(rec)
            except NotLeaderError:
                return
            log.info("broker %d: %s (%s)", rec["id"], rec["type"], rec.get("reason", "heartbeat"))

    async def wait_first_registrations(self, timeout_s: float) -> None:
        """Before placing replicas, give a moment to voters that never
        registered (a brand-new cluster: their first heartbeat follows the
        first controller election; not once this broker has been up for a
        session, a voter that never started is not waited for) or that
        heartbeat but are not unfenced yet (still catching up); a broker that
        went silent is not waited for."""
        rt = self.rt
        young = bool(rt.ticks * rt.tick_s * 1000 < self.membership.session_timeout_ms)

        def pending(node: int) -> bool:
            broker = rt.image.brokers.get(node)
            if broker is None:  # only while this broker has been up for less than a session
                return young
            return (broker.fenced and not broker.retired
                    and self.membership.alive(node, _clock_ms()))

        with trio.move_on_after(timeout_s):
            while any(pending(n) for n in rt.voters):
                with trio.move_on_after(rt.tick_s * 2):
                    await rt.meta.changed.wait()

    # -- where clients and replicas go --------------------------------------------------

    def live_broker_ids(self) -> list[int]:
        """Registered, unfenced brokers: where new replicas go."""
        return [b.node_id for b in self.rt.image.live_brokers()]

    def live_machines(self) -> int:
        """How many machines the live brokers are on (``placement``): the
        most replicas a new partition can have."""
        return len({b.machine_id for b in self.rt.image.live_brokers()})

    def advertised_controller(self, listed: Iterable[int]) -> int:
        """A random registered, unfenced broker (Kafka's
        ``getRandomAliveBrokerId``), leaving out the peers this broker has not
        heard from for an election timeout (a killed broker stays unfenced
        until its session expires; Kafka would name it meanwhile and the
        client's request would time out); before any registered, one of the
        ``listed`` brokers; -1 with none."""
        live = self.live_broker_ids()
        pool = [n for n in live if n not in self.rt.down] or live or sorted(listed)
        return random.choice(pool) if pool else NO_NODE

    def broker_endpoints(self, leaders: Iterable[int] = (), listener: str = ""
                         ) -> list[tuple[int, str, int, str | None]]:
        """(node, host, port, rack) of the live brokers for Metadata and
        DescribeCluster, plus any partition leader named in the same answer, so
        clients can reach every node they are told to use (a leader the
        controller fenced while its followers still hear it). Before any broker
        registered (a brand-new cluster), every voter. Never the metadata
        leader for its own sake: the answers name a live broker as their
        controller (``advertised_controller``), and a controller-only leader
        whose registration has not committed yet was listed so, and a client
        then sent it a Metadata it does not serve (librdkafka: "Required
        feature not supported by broker"). With ``listener``, the endpoints of
        that listener (the one the client came in on), leaving out brokers
        that have none."""
        rt = self.rt
        known = {b.node_id: (*where, b.rack) for b in rt.image.brokers.values()
                 if (where := b.address(listener)) is not None}
        live = {b.node_id: (*where, b.rack) for b in rt.image.live_brokers()
                if (where := b.address(listener)) is not None}
        unlisted = {n for n, b in rt.image.brokers.items() if b.hidden}
        if not live:
            live = {n: (h, p, None) for n, (h, p) in rt.voters.items()
                    if n not in unlisted}
        for node in leaders:
            if node not in live and node in rt.voters and node not in unlisted:
                h, p = rt.voters[node]
                live[node] = known.get(node, (h, p, None))
        return [(n, *live[n]) for n in sorted(live)]


def _clock_ms() -> float:
    """Monotonic milliseconds, for broker sessions."""
    return time.monotonic() * 1000
