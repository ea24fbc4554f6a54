"""A node of several shards: one broker process per core (``kcompat.cores``).

Theory of operation
-------------------
A kcompat broker is one event loop in one Python process: it uses one core
however many the machine has. ``kcompat.cores`` (``kcompat broker --cores
N``) makes a node of N *shards*, each a broker process of its own with its
own partitions, its own share of the group and transaction coordinators and
its own event loop, as Redpanda runs a shard per core; ``kcompat broker``
then only supervises them.

Each shard is advertised as a broker of its own. A client bootstraps from
the node's address (shard 0's), learns every shard from Metadata, and sends
each partition's requests straight to the shard that leads it: the Kafka
protocol's own routing, with no forwarding hop and no process that every
byte crosses. The cost is on the client's side: a connection per shard it
uses, and Metadata lists N brokers per machine. The failure of one shard is
the failure of one broker: its partitions fail over to their replicas on
other machines (or wait for its restart at replication factor 1), the other
shards serve on. Kafka's tools (``kafka-broker-api-versions.sh``,
``kafka-topics.sh --describe``) show the shards as brokers. A front process
forwarding between shards would keep one address and one connection per
client, but would copy every record once more between processes, which is
the work the shards are there to spread.

``plan`` derives each shard's configuration from the node's:

* shard 0 is the node as configured: its node id, ports, data directory and
  roles, so a node started with ``--cores 1`` and later ``--cores 2`` keeps
  its data and its place in the metadata quorum;
* shard k (k >= 1) is a broker-only node (``process.roles=broker``: the
  metadata quorum keeps at most one voter per machine) with node id
  ``node.id + 1000 * k``, Kafka and admin ports ``+ k``, its data in
  ``<log.dirs>-shard<k>``; it finds the quorum through the voters the node
  names, or else through shard 0 (``controller.quorum.bootstrap.servers``);
* every shard carries ``kcompat.machine.id`` (the node's own, or shard 0's
  node id): the controller never places two replicas of a partition on one
  machine (``storage.placement``), and ``kcompat cluster info`` groups
  brokers by it;
* a port of 0 (any free port) is picked once, here, so shard k knows where
  shard 0 is and a restarted shard comes back where clients look for it.

``supervise`` writes each shard's configuration to a private temporary file
(its whole effective config: keys the node took from the environment are
written in, the ``KCOMPAT_*`` variables are not passed on), starts every
shard at once (shard k asks shard 0 for the quorum until it answers), and
logs one ``kcompat broker ready on HOST:PORT`` line once every shard is ready
(each writes the file ``KCOMPAT_READY_FILE`` names once it serves). A shard that exits while the
node runs is restarted — after ``RESTART_DELAY_S``, doubling up to
``RESTART_DELAY_MAX_S`` while it keeps dying young — and catches up as a
broker does after a kill -9. A shard that exits before its first ready
(a bad config, a port in use) stops the node with its exit code. SIGTERM or
SIGINT is passed to every shard (each shuts down as a broker does) and the
supervisor returns once all have exited. The shards die with the supervisor
(``PR_SET_PDEATHSIG`` on Linux), so a killed supervisor leaves none behind.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kcompat._embedded import _die_with_parent
from kcompat.broker.config.broker_config import (
    NOT_CONFIG_ENV,
    QUORUM_BOOTSTRAP_SERVERS,
    READY_FILE_ENV,
    BrokerConfig,
    definition_of,
)
from kcompat.broker.config.configdef import ConfigError

log = logging.getLogger("kcompat.broker")

NODE_ID_STEP = 1000  # shard k of node N is node N + 1000 k
RESTART_DELAY_S = 0.5
RESTART_DELAY_MAX_S = 30.0
STAYED_UP_S = 60.0  # a shard up this long starts its restart delay afresh
POLL_S = 0.05
_PORT = re.compile(r":(\d+)$")


def shard_count(config: BrokerConfig) -> int:
    """How many shards ``kcompat.cores`` asks for (0: one per usable core)."""
    cores = int(config["kcompat.cores"])
    if cores == 0:
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
            else os.cpu_count() or 1
    return cores


def supervises(config: BrokerConfig) -> bool:
    """Is this ``kcompat broker`` a supervisor of shards (not a shard itself)?"""
    return config["kcompat.shard"] < 0 and shard_count(config) > 1


@dataclass
class Shard:
    index: int
    node_id: int
    host: str  # where the supervisor and shard k reach it
    port: int
    values: dict[str, str]  # its configuration file
    proc: subprocess.Popen[bytes] | None = None
    ready_file: Path = field(default_factory=Path)
    started_at: float = 0.0
    ready: bool = False
    delay_s: float = RESTART_DELAY_S
    restart_at: float | None = None


def _connect_host(host: str) -> str:
    return "127.0.0.1" if host in ("", "0.0.0.0") else "::1" if host == "::" else host


def _free_run(host: str, count: int) -> int:
    """The first of ``count`` consecutive ports nothing listens on."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    while True:
        with socket.socket(family) as s:
            s.bind((host, 0))
            first = int(s.getsockname()[1])
        if first + count > 65536:
            continue
        try:
            for port in range(first + 1, first + count):
                with socket.socket(family) as s:
                    s.bind((host, port))
        except OSError:
            continue
        return first


def _shift_listeners(items: list[str], k: int) -> str:
    """``NAME://host:port,...`` with each non-zero port moved up by ``k``."""
    def shifted(item: str) -> str:
        found = _PORT.search(item)
        if found is None or int(found[1]) == 0:
            return item
        return item[:found.start()] + f":{int(found[1]) + k}"
    return ",".join(shifted(item) for item in items)


def plan(config: BrokerConfig, count: int) -> list[Shard]:
    """Each shard's configuration (see the module): the node's explicit keys
    as text, with the shard's own over them."""
    base = {key: definition_of(key).render(config.values[key])  # type: ignore[union-attr]
            for key in config.explicit}
    node = int(config["node.id"])
    host = config["host"]
    port = int(config["port"])
    if "listeners" in config.explicit:  # the first listener is the inter-broker one
        first = config.values["listeners"][0]
        found = _PORT.search(first)
        port = int(found[1]) if found else 0
        host = first.partition("://")[2].rpartition(":")[0]
        if port == 0:
            raise ConfigError("listeners", "a node of several shards needs fixed listener "
                              "ports (shard k takes each port + k)")
    elif port == 0:
        port = _free_run(_connect_host(host), count)
    machine = config["kcompat.machine.id"] or str(node)
    connect = _connect_host(config["advertised.host"] or host)
    admin = int(config["admin.port"])
    data = str(config.data_dir).rstrip("/") or "/"
    shards = []
    for k in range(count):
        values = {**base, "kcompat.shard": str(k), "kcompat.cores": str(count),
                  "kcompat.machine.id": machine}
        if "listeners" not in config.explicit:
            values["port"] = str(port + k)
        if k:
            values.update({"node.id": str(node + NODE_ID_STEP * k), "process.roles": "broker",
                           "log.dirs": f"{data}-shard{k}"})
            if admin > 0:
                values["admin.port"] = str(admin + k)
            for key in ("listeners", "advertised.listeners"):
                if key in config.explicit:
                    values[key] = _shift_listeners(config.values[key], k)
            if not config["controller.quorum.voters"] and not config[QUORUM_BOOTSTRAP_SERVERS]:
                values[QUORUM_BOOTSTRAP_SERVERS] = f"{connect}:{port}"
        shards.append(Shard(k, int(values.get("node.id", node)), connect, port + k, values))
    return shards


def _child_env(ready_file: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("KCOMPAT_") or k in NOT_CONFIG_ENV}
    env[READY_FILE_ENV] = str(ready_file)
    return env


class Supervisor:
    """Starts the shards, restarts the ones that die, stops them all on a signal."""

    def __init__(self, shards: list[Shard], workdir: Path, log_args: list[str]) -> None:
        self.shards = shards
        self.workdir = workdir
        self.log_args = log_args
        self.stopping = False

    def _start(self, shard: Shard) -> None:
        import yaml  # a supervisor's only: a broker of one shard never loads it

        conf = self.workdir / f"shard-{shard.index}.yaml"
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            yaml.safe_dump(shard.values, f, default_flow_style=False)
        shard.ready_file = self.workdir / f"shard-{shard.index}.ready"
        shard.ready_file.unlink(missing_ok=True)
        parent = os.getpid()
        shard.proc = subprocess.Popen(
            [sys.executable, "-m", "kcompat", "broker", "--config", str(conf), *self.log_args],
            stdin=subprocess.DEVNULL, env=_child_env(shard.ready_file),
            start_new_session=True,  # a ^C reaches the supervisor, which passes it on
            preexec_fn=lambda: _die_with_parent(parent))
        shard.started_at = time.monotonic()
        shard.ready = False
        shard.restart_at = None
        log.info("shard %d (node %d) started, pid %d", shard.index, shard.node_id,
                 shard.proc.pid)

    def _wait_ready(self, shard: Shard) -> int | None:
        """None once ``shard`` is ready; its exit code if it died first."""
        assert shard.proc is not None
        while not self.stopping:
            if shard.ready_file.exists():
                shard.ready = True
                return None
            code = shard.proc.poll()
            if code is not None:
                return code
            time.sleep(POLL_S)
        return 0

    def start_all(self) -> int | None:
        """Start every shard (shard k waits for shard 0's quorum itself); None
        once all are ready, else an exit code."""
        for shard in self.shards:
            self._start(shard)
        for shard in self.shards:
            code = self._wait_ready(shard)
            if code is not None:
                if self.stopping:  # a signal while starting: a clean stop
                    return 0
                log.error("shard %d (node %d) exited with code %d before it was "
                          "ready: stopping the node", shard.index, shard.node_id, code)
                return code or 1
        return None

    def watch(self) -> None:
        """Until a signal: restart each shard that exits."""
        while not self.stopping:
            now = time.monotonic()
            for shard in self.shards:
                assert shard.proc is not None
                if shard.restart_at is not None:
                    if now >= shard.restart_at:
                        self._start(shard)
                    continue
                if not shard.ready and shard.ready_file.exists():
                    shard.ready = True
                    log.info("shard %d (node %d) ready again", shard.index, shard.node_id)
                code = shard.proc.poll()
                if code is None:
                    continue
                if now - shard.started_at >= STAYED_UP_S:
                    shard.delay_s = RESTART_DELAY_S
                log.warning("shard %d (node %d) exited with code %d; restarting it in %.1f s",
                            shard.index, shard.node_id, code, shard.delay_s)
                shard.restart_at = now + shard.delay_s
                shard.delay_s = min(shard.delay_s * 2, RESTART_DELAY_MAX_S)
            time.sleep(POLL_S)

    def stop(self, signum: int = signal.SIGTERM) -> None:
        self.stopping = True
        for shard in self.shards:
            if shard.proc is not None and shard.proc.poll() is None:
                shard.proc.send_signal(signum)

    def reap(self) -> None:
        for shard in self.shards:
            if shard.proc is not None:
                shard.proc.wait()


def supervise(config: BrokerConfig, log_args: list[str]) -> int:
    """Run the node's shards until SIGTERM or SIGINT (see the module)."""
    shards = plan(config, shard_count(config))
    workdir = Path(tempfile.mkdtemp(prefix="kcompat-shards-"))
    supervisor = Supervisor(shards, workdir, log_args)

    def on_signal(signum: int, _frame: Any) -> None:
        supervisor.stop(signal.SIGTERM if signum == signal.SIGINT else signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        code = supervisor.start_all()
        if code is None:
            first = shards[0]
            log.info("kcompat broker ready on %s:%d (data in %s; %d shards: nodes %s)",
                     config["host"], first.port, config.data_dir, len(shards),
                     ", ".join(str(s.node_id) for s in shards))
            supervisor.watch()
            code = 0
        else:
            supervisor.stop()
        supervisor.reap()
        return code
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        shutil.rmtree(workdir, ignore_errors=True)
