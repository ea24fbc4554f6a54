"""The trio runtime: listener, connection tasks, background loops, shutdown.

Theory of operation
-------------------
``run_broker`` learns the metadata quorum's voters from
``controller.quorum.bootstrap.servers`` when the config names no voters
(``quorum_bootstrap``: it waits until a node answers), opens the state (which
recovers every log), binds the listener
and then logs exactly one ``kcompat broker ready on HOST:PORT`` line. Each
accepted socket gets its own task (``serve_connection``). Background tasks run
the group-commit flusher, retention, the Multi-Raft driver (a single
broker is a quorum of one; it is ready once it has replayed its logs) and
the event-loop monitor (``loop_monitor``: lag and the longest task steps),
and, once, the codec's warm-up in a worker thread (``codec.warm``: the schema
imports the first requests after a start would make on the loop), after the
replays of a restart and its catch-up (``_warm_codec``).

The loop shares the GIL with the worker threads (log opens, the cleaner,
large delayed-produce splits, view filtering, the /metrics text). A socket
call releases the GIL; getting it back while a worker runs Python waits for
the switch interval, so a step of many sends or receives beside a busy worker
waited 5 ms per call (CPython's default): 20 pipe writes and reads took
70-150 ms instead of 0.02 ms (a convoy), the soak's 100-230 ms steps of
PeerLink.run, Fetch and Produce sampled at a socket call. The broker sets the
interval to ``GIL_SWITCH_INTERVAL_S`` (1 ms: 10-20 ms for the same 20 calls);
a worker then gives the GIL up more often, which costs it little.

The garbage collector's full collections walk every object it tracks, and
most of a broker's are there from the start and never freed: modules,
classes, functions, the codec's schemas the warm-up made — about 150,000.
A full collection of them held the loop 100-170 ms, some forty times in a
1M delayed soak, each finding nothing to free. Once the warm-up is done the
broker moves what exists then to the collector's permanent generation
(``gc.freeze``): full collections walk only what came after. With fewer
objects in the oldest generation, CPython's rule (a full collection once
the objects that survived since the last one reach a quarter of it) would
fire more often: the broker also sets the oldest generation's own threshold
to ``GC_THRESHOLDS`` (a full collection after 100 collections of the middle
one, not 10) — after a 1M delayed soak's restart the defaults gave 20 full
collections a minute of 40 ms each (``kcompat_gc_pause_seconds``). Young
and middle collections run between the loop's turns (``loop.collector``:
not in the middle of a request's burst of objects); the automatic
collector's young threshold, 20,000, is only a net for a step that keeps
that many objects on its own.
SIGTERM or SIGINT drains: first a controlled shutdown (leaderships handed over, see
``BrokerLifecycle.controlled_shutdown``), then stop accepting, give in-flight requests a moment to finish, then close every log
cleanly (snapshots and the clean-shutdown marker), so the next start needs no
recovery scan.
"""

from __future__ import annotations

import gc
import logging
import os
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable
from functools import partial

import trio

from kcompat.broker.config.broker_config import PURE_PYTHON_ENV, READY_FILE_ENV, BrokerConfig
from kcompat.broker.host.broker import Broker
from kcompat.broker.http.admin_port import open_admin_sockets
from kcompat.broker.http.calls import serve_envelope
from kcompat.broker.loop import loop_monitor, offload
from kcompat.broker.loop.collector import TurnCollector
from kcompat.broker.loop.loop_monitor import LoopMonitor
from kcompat.broker.net.listeners import Listener
from kcompat.broker.node import quorum_bootstrap
from kcompat.broker.node.connection import serve_connection
from kcompat.broker.replication.group import OfflineMachines
from kcompat.broker.storage.log_cleaner import LogCleaner
from kcompat.ext import native
from kcompat.log.store import FD_CACHE
from kcompat.wire import codec
from kcompat.wire.versions import API_RANGES

log = logging.getLogger("kcompat.broker")

DRAIN_SECONDS = 1.0
WARM_PAUSE_S = 0.002  # after each version warmed: the GIL back to the loop
WARM_PAUSE_RATIO = 3.0  # and at least 3 times what the version took: a quarter of the GIL
WARM_AFTER_MAX_S = 30.0  # the warm-up waits for the replays this long at most
WARM_POLL_S = 0.25  # how often the warm-up looks whether the start is over
# how long a thread that wants the GIL waits before the holder must give it up
# (CPython's default: 5 ms; see the module)
GIL_SWITCH_INTERVAL_S = 0.001
# gc.set_threshold: young, middle, full (see above); young collections run at the
# loop's turns from ``collector.YOUNG_AT`` on, the automatic ones are the net
GC_THRESHOLDS = (20_000, 10, 100)


async def _retention_loop(broker: Broker) -> None:
    """Retention checks ``log.initial.task.delay.ms`` after start, then every
    ``log.retention.check.interval.ms``, as Kafka's LogManager schedules them."""
    state = broker.state
    interval = state.config["log.retention.check.interval.ms"] / 1000
    await trio.sleep(state.config["log.initial.task.delay.ms"] / 1000)
    while True:
        deleted = state.enforce_retention()
        if deleted:
            log.info("retention deleted %d segments", deleted)
            broker.cluster.log_starts_moved()
        await trio.sleep(interval)


async def _wait_for_signal(broker: Broker, cancel: trio.CancelScope,
                           task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()  # handlers are installed: a SIGTERM from now on drains
        async for signum in signals:
            log.info("received %s, draining", signal.Signals(signum).name)
            if broker.config["controlled.shutdown.enable"]:
                await broker.controller.lifecycle.controlled_shutdown()  # still serving
            cancel.cancel()
            return


def _tell_ready(port: int) -> None:
    """Write the file ``KCOMPAT_READY_FILE`` names, if any (a shard's
    supervisor waits for it: ``shards``)."""
    path = os.environ.get(READY_FILE_ENV)
    if path:
        with open(path + ".tmp", "w") as f:
            f.write(f"{port}\n")
        os.replace(path + ".tmp", path)


def _raise_fd_limit() -> None:
    """Every partition keeps its segments' ``.log`` files open: take the hard
    descriptor limit (as Kafka's start scripts advise), and give index files
    a quarter of it (``store.FD_CACHE``)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (OSError, ValueError) as e:
            log.warning("could not raise the open-file limit to %s: %s", hard, e)
    if soft != resource.RLIM_INFINITY:
        FD_CACHE.limit = max(64, soft // 4)


async def _bind_listeners(broker: Broker) -> list[tuple[Listener, list[trio.SocketListener]]]:
    """Bind every listener (port 0: a free one, recorded in ``broker.bound_ports``)."""
    bound = []
    for listener in broker.listeners:
        sockets = await trio.open_tcp_listeners(listener.port, host=listener.host or None)
        broker.bound_ports[listener.name] = sockets[0].socket.getsockname()[1]
        bound.append((listener, sockets))
    return bound


def paced(stop: threading.Event) -> Callable[[], bool]:
    """``codec.warm``'s go-on: after each version, a pause of ``WARM_PAUSE_S``
    or, if longer, ``WARM_PAUSE_RATIO`` times the wall time the version took
    — so the warm-up holds the GIL a quarter of the time at most, and less
    while the loop wants it (a version then waits for the GIL longer, and so
    does its pause); False once ``stop`` is set."""
    last = time.perf_counter()

    def go_on() -> bool:
        nonlocal last
        took = time.perf_counter() - last
        if stop.wait(max(WARM_PAUSE_S, WARM_PAUSE_RATIO * took)):
            return False
        last = time.perf_counter()
        return True

    return go_on


async def _warm_codec(broker: Broker) -> None:
    """Every served version's classes, readers and writers made in a worker
    thread (``codec.warm``; 1-2 s of imports that the first requests after a
    start made on the loop, 60-150 ms steps of Fetch and Produce) — once the
    broker serves and its logs are replayed (``WARM_AFTER_MAX_S`` at most):
    the imports hold the GIL about a second, which they took from the replays
    a restart makes before its leaders serve (a schedule with a million
    records pending delivered a second later) — and once no service is
    behind (``Backpressure.behind``: after a restart with a delayed backlog,
    delivery catches up on what came due while the broker was down, and the
    warm-up took a fifth of the GIL from it), and then paced (``paced``: a
    quarter of the GIL at most, on time delivery of a drain went 0.8 s late
    beside it at three quarters). A request meanwhile loads
    only its own version's classes. A service reports its lag only for
    the partitions it has taken up, so the warm-up first waits until every
    Raft group here knows its leader and each one led here has applied its
    earlier entries (``settling``)."""
    with trio.move_on_after(WARM_AFTER_MAX_S):
        await broker.controller.lifecycle.wait_serving(WARM_AFTER_MAX_S)
        while broker.cluster.replaying or broker.cluster.settling or \
                broker.backpressure.behind():  # a restart's catch-up: delivery overdue
            await trio.sleep(WARM_POLL_S)
    if broker.state.config["kcompat.codec.warm"]:  # off: each version loads on first use
        ranges = {key: (r.parse_min, r.max_version) for key, r in API_RANGES.items()}
        started = time.monotonic()
        done = await offload.run_stoppable(lambda stop: codec.warm(ranges, paced(stop)))
        if done is not None:  # said, so that a benchmark can start once it is over
            log.info("codec warm-up: %d API versions loaded in %.1f s", done,
                     time.monotonic() - started)
    loop_monitor.freeze()  # what exists now lives as long as the process: never walked again


async def run_broker(config: BrokerConfig, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    _raise_fd_limit()
    if os.environ.get(PURE_PYTHON_ENV):
        native.leave_out()
    log.info("C module kcompat.ext._native: %s", native.describe())
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    gc.set_threshold(*GC_THRESHOLDS)
    # KIP-853: the voters from controller.quorum.bootstrap.servers, before anything opens
    broker = Broker(config, voters=await quorum_bootstrap.find_voters(config))
    state = broker.state
    try:
        bound = await _bind_listeners(broker)
        port = broker.bound_ports[broker.listeners[0].name]
        state.advertised_port = port
        state.endpoints = tuple(
            (item.name, item.advertised_host, item.advertised_port or broker.bound_ports[item.name])
            for item in broker.listeners)
        admin_sockets = open_admin_sockets(broker)
        if admin_sockets:  # the HTTP stack (~85 ms) loads only to serve, before a task runs
            from kcompat.broker.http.serve import run_admin_http
        broker.calls.envelope_server = partial(serve_envelope, broker)
        async with trio.open_nursery() as background:
            registry = broker.metrics.registry
            trace_ms = state.config["kcompat.loop.trace.ms"]  # 0: no step trace
            background.start_soon(LoopMonitor(registry, trace_ms).run)  # lag, longest steps
            background.start_soon(TurnCollector(registry).run)  # collections between turns
            background.start_soon(offload.keep_threads_ready)  # no thread started on the loop
            background.start_soon(_warm_codec, broker)  # schemas imported ahead, off the loop
            registry.register(OfflineMachines(broker.cluster.groups))
            if admin_sockets:
                background.start_soon(run_admin_http, broker, admin_sockets)
            background.start_soon(state.flusher.run)
            background.start_soon(_retention_loop, broker)
            cleaner = LogCleaner(state)
            cleaner.export(broker.metrics.registry)
            background.start_soon(cleaner.run)
            broker.start_services(background)
            await background.start(broker.cluster.run)  # the Multi-Raft driver
            await broker.controller.wait_started(timeout_s=30.0)
            serve_scope = trio.CancelScope()
            await background.start(_wait_for_signal, broker, serve_scope)
            shard = config["kcompat.shard"]
            if shard < 0:
                log.info("kcompat broker ready on %s:%d (data in %s)", config["host"], port,
                         config.data_dir)
            else:  # its supervisor logs the node's ready line (``shards``)
                log.info("kcompat shard %d (node %d) ready on %s:%d (data in %s)", shard,
                         state.node_id, config["host"], port, config.data_dir)
            _tell_ready(port)
            for item in broker.listeners:
                log.info("listener %s (%s) on %s:%d", item.name, item.protocol,
                         item.host or "*", broker.bound_ports[item.name])
            broker.metrics.ready = True
            task_status.started(port)
            async with trio.open_nursery() as connections:
                with serve_scope:
                    async with trio.open_nursery() as serving:
                        for listener, sockets in bound:
                            serving.start_soon(partial(
                                trio.serve_listeners,
                                partial(serve_connection, broker=broker, listener=listener),
                                sockets, handler_nursery=connections))
                broker.metrics.ready = False
                for _, sockets in bound:
                    for socket_listener in sockets:
                        await socket_listener.aclose()
                broker.close_idle_connections()
                connections.cancel_scope.deadline = trio.current_time() + DRAIN_SECONDS
            background.cancel_scope.cancel()
    finally:
        broker.close()
        log.info("kcompat broker stopped")
