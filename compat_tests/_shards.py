"""A node of two shards (``kcompat broker --cores 2``) for the client suites (issue 35).

``start_node`` starts one ``kcompat broker --cores 2`` process — the supervisor —
whose shards are brokers 1 (the node's port) and 1001 (the port after it), and
returns once its ready line is out and both shards are in Metadata.
``start_machines`` starts a cluster of three such nodes (machines 1-3, each
a voter of the metadata quorum with a second shard 1001-1003) and returns once
the controller counts all six brokers. ``shard_pids`` reads each shard's
current pid from the supervisor's log (a restarted shard logs its new one), so
a test can kill -9 one shard.
"""

from __future__ import annotations

import contextlib
import re
import socket
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from ._broker import Broker, free_port
from ._deployment import CLUSTER_BROKER_ARGS
from ._groups import wait_for

SHARDS = 2
SHARD_IDS = (1, 1001)
_STARTED = re.compile(rb"shard (\d+) \(node \d+\) started, pid (\d+)")


def free_run(n: int) -> int:
    """The first of ``n`` consecutive free ports (shard k listens on port + k)."""
    while True:
        first = free_port()
        ports = [first] + [free_port() for _ in range(n - 1)]
        if ports == list(range(first, first + n)):
            return first


def node_brokers(bootstrap: str) -> set[int]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers)


def start_node(workdir: Path, *extra: str) -> Broker:
    node = Broker(workdir, port=free_run(SHARDS),
                  extra_args=("--cores", str(SHARDS), "--admin-port", "-1",
                              *CLUSTER_BROKER_ARGS, *extra))
    node.start()
    try:
        wait_for(lambda: node_brokers(node.bootstrap) == set(SHARD_IDS), 30,
                 lambda: f"Metadata lists {node_brokers(node.bootstrap)}, not {SHARD_IDS}")
    except BaseException:
        node.kill()
        raise
    return node


@contextlib.contextmanager
def running_node(workdir: Path) -> Iterator[Broker]:
    """``start_node`` for a ``with`` block, closed after it."""
    node = start_node(workdir)
    try:
        yield node
    finally:
        node.close()


def shard_pids(node: Broker) -> dict[int, int]:
    """Shard index -> pid of its process now (the last start the supervisor logged)."""
    pids: dict[int, int] = {}
    for shard, pid in _STARTED.findall(node.log_path.read_bytes()):
        pids[int(shard)] = int(pid)
    return pids


def serves(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def start_machines(root: Path, count: int = 3, *extra: str) -> list[Broker]:
    """``count`` nodes of two shards in one cluster (topics at replication factor 3)."""
    ports = [free_run(SHARDS) for _ in range(count)]
    voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(ports))
    machines = [Broker(root / f"machine-{i + 1}", port=p, extra_args=(
        "--node-id", str(i + 1), "--set", f"controller.quorum.voters={voters}",
        "--cores", str(SHARDS), "--admin-port", "-1",
        "--set", "default.replication.factor=3", *CLUSTER_BROKER_ARGS, *extra))
        for i, p in enumerate(ports)]
    try:
        for m in machines:
            m.start(wait=False)
        for m in machines:
            m.wait_ready()
        bootstrap = machines[0].bootstrap
        wait_for(lambda: len(node_brokers(bootstrap)) == count * SHARDS, 60,
                 lambda: f"Metadata lists {node_brokers(bootstrap)}")
        probe = NewTopic("kcompat-machines-ready-probe", 1, count)

        def accepted() -> bool:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            try:
                admin.create_topics([probe], validate_only=True)[probe.topic].result(10)
                return True
            except Exception:  # noqa: BLE001 - not every machine registered yet
                return False
        wait_for(accepted, 60, f"the controller never counted {count} machines")
    except BaseException:
        for m in machines:
            if m.running:
                m.kill()
        raise
    return machines
