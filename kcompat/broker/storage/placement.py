"""Where a new partition's replicas go: live brokers, never two on one machine.

Theory of operation
-------------------
A broker registers with the machine it runs on (``kcompat.machine.id``; a
broker that names none is a machine of its own, its node id). A node of
several shards (``kcompat.cores``, ``node.shards``) is several brokers on one machine, and two
replicas of a partition there would die together, so a partition's replicas
go to distinct machines, and a replication factor above the number of
machines is refused as one above the number of brokers is.

``spread`` keeps the round-robin Kafka's non-rack-aware assignment uses and
kcompat used before machines: the brokers in one ring, partition ``p`` of a
topic led by the ring's ``start + p``-th broker and followed by the next ones.
The ring alternates machines (the first shard of every machine, then the
second of every machine, ...), so leaders and replicas spread over machines
first and over shards second; a replica whose machine already holds one of
the partition's replicas is skipped for the next broker in the ring. With one
broker per machine this is exactly the plain ring.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def ring(brokers: Iterable[tuple[int, str]]) -> list[tuple[int, str]]:
    """(node id, machine) of ``brokers`` ordered so that machines alternate:
    each machine's brokers by node id, machines by their first node id."""
    by_machine: dict[str, list[int]] = {}
    for node, machine in sorted(brokers):
        by_machine.setdefault(machine, []).append(node)
    columns = list(by_machine.items())
    depth = max((len(nodes) for _, nodes in columns), default=0)
    return [(nodes[level], machine) for level in range(depth)
            for machine, nodes in columns if level < len(nodes)]


def machine_count(brokers: Iterable[tuple[int, str]]) -> int:
    return len({machine for _, machine in brokers})


def spread(order: Sequence[tuple[int, str]], start: int, count: int,
           replication: int) -> list[list[int]]:
    """The replicas of ``count`` partitions, the first led by ``order[start]``:
    ``replication`` brokers each, on distinct machines. ValueError if the
    ring has fewer machines than that."""
    if replication > machine_count(order):
        raise ValueError(f"{replication} replicas need {replication} machines, "
                         f"the brokers are on {machine_count(order)}")
    out: list[list[int]] = []
    size = len(order)
    for p in range(count):
        replicas: list[int] = []
        machines: set[str] = set()
        at = (start + p) % size
        while len(replicas) < replication:
            node, machine = order[at]
            if machine not in machines:
                replicas.append(node)
                machines.add(machine)
            at = (at + 1) % size
        out.append(replicas)
    return out
