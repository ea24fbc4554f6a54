"""A node of two shards (``kcompat broker --cores 2``) for the client suites (issue 35).

``start_node`` starts one ``kcompat broker --cores 2`` process — the supervisor —
whose shards are brokers 1 (the node's port) and 1001 (the port after it), and
returns once its ready line is out and both shards are in Metadata.
``shard_pids`` reads each shard's current pid from the supervisor's log (a
restarted shard logs its new one), so a test can kill -9 one shard.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

from confluent_kafka.admin import AdminClient

from ._broker import Broker, free_port
from ._deployment import CLUSTER_BROKER_ARGS
from ._groups import wait_for

SHARDS = 2
SHARD_IDS = (1, 1001)
_STARTED = re.compile(rb"shard (\d+) \(node \d+\) started, pid (\d+)")


def _free_run(n: int) -> int:
    """The first of ``n`` consecutive free ports (shard k listens on port + k)."""
    while True:
        first = free_port()
        ports = [first] + [free_port() for _ in range(n - 1)]
        if ports == list(range(first, first + n)):
            return first


def node_brokers(bootstrap: str) -> set[int]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers)


def start_node(workdir: Path, *extra: str) -> Broker:
    node = Broker(workdir, port=_free_run(SHARDS),
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
