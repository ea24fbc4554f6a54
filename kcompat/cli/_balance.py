"""A balanced replica placement: the plan behind ``kcompat cluster rebalance``
and ``kcompat cluster decommission``.

Theory of operation
-------------------
The simple, safe core of what Cruise Control does, as a pure function of the
current layout: every replica on a broker being drained moves first; then,
while some broker holds more than its share of replicas (the total divided
by the brokers, rounded up) and another holds less than its share rounded
down, the cheapest replica — the smallest partition by bytes — moves from
the most loaded broker to the least loaded one that does not hold that
partition yet, nor shares a machine with one of its other replicas (the
shards of a node, ``kcompat.cores``), fewest replicas first, then fewest bytes; no move makes the
spread worse, so the plan moves as little data as it can while counts end
within one of each other. Last, leaders spread too: a partition's preferred leader (its first
replica, which kcompat's leader balancing elects) moves to another of its
replicas while that brings the most-led and least-led brokers closer — a
reorder, no data moves. Only partitions whose replica list changed are in the plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

Key = tuple[str, int]


@dataclass
class Spread:
    """Per broker: replicas, preferred leaders and bytes held."""

    replicas: dict[int, int] = field(default_factory=dict)
    leaders: dict[int, int] = field(default_factory=dict)
    bytes: dict[int, int] = field(default_factory=dict)

    def text(self) -> str:
        return ", ".join(f"{b}: {self.replicas[b]} replicas / {self.leaders[b]} leaders / "
                         f"{self.bytes[b] / 2**20:.1f} MiB" for b in sorted(self.replicas))


def spread(layout: Mapping[Key, list[int]], brokers: Iterable[int],
           sizes: Mapping[Key, int]) -> Spread:
    out = Spread()
    for b in brokers:
        out.replicas[b] = out.leaders[b] = out.bytes[b] = 0
    for key, replicas in layout.items():
        for i, b in enumerate(replicas):
            if b in out.replicas:
                out.replicas[b] += 1
                out.bytes[b] += sizes.get(key, 0)
                out.leaders[b] += i == 0
    return out


def plan(layout: Mapping[Key, list[int]], brokers: Iterable[int], sizes: Mapping[Key, int],
         drain: Iterable[int] = (), machines: Mapping[int, str] | None = None
         ) -> dict[Key, list[int]]:
    """The new replica lists of the partitions that change (see the module
    docstring). ``brokers``: where replicas may live (``drain`` excluded).
    ``machines``: each broker's machine (a broker not named is one of its
    own); no move puts a second replica of a partition on a machine."""
    drained = set(drain)
    targets = sorted(set(brokers) - drained)
    if not targets:
        raise ValueError("no broker is left to hold the replicas")
    new = {key: list(replicas) for key, replicas in sorted(layout.items())}
    count = dict.fromkeys(targets, 0)
    held = dict.fromkeys(targets, 0)
    for key, replicas in new.items():
        for b in replicas:
            if b in count:
                count[b] += 1
                held[b] += sizes.get(key, 0)

    where = dict(machines or {})

    def least(key: Key, src: int) -> int | None:
        """The least loaded broker that may take ``src``'s replica of ``key``."""
        taken = {where.get(b, str(b)) for b in new[key] if b != src}
        free = [b for b in targets if b not in new[key] and where.get(b, str(b)) not in taken]
        return min(free, key=lambda b: (count[b], held[b], b)) if free else None

    def move(key: Key, src: int, dst: int) -> None:
        replicas = new[key]
        replicas[replicas.index(src)] = dst
        size = sizes.get(key, 0)
        count[dst] += 1
        held[dst] += size
        if src in count:
            count[src] -= 1
            held[src] -= size

    for key in new:
        for src in [b for b in new[key] if b not in count]:  # drained or unknown brokers
            dst = least(key, src)
            if dst is None:
                raise ValueError(f"{key[0]}-{key[1]} has {len(new[key])} replicas: more than "
                                 f"the {len(targets)} brokers left, or than their machines")
            move(key, src, dst)
    total = sum(count.values())
    ceil, floor = -(-total // len(targets)), total // len(targets)
    while True:
        src = max(targets, key=lambda b: (count[b], held[b], -b))
        dst_min = min(count.values())
        if count[src] <= ceil and dst_min >= floor:
            break
        candidates = sorted((sizes.get(k, 0), k) for k, r in new.items() if src in r)
        moved = False
        for _size, key in candidates:
            dst = least(key, src)
            if dst is not None and count[dst] + 1 < count[src]:
                move(key, src, dst)
                moved = True
                break
        if not moved:
            break
    _spread_leaders(new)
    return {key: replicas for key, replicas in new.items() if replicas != layout[key]}


def _spread_leaders(new: dict[Key, list[int]]) -> None:
    """Move a partition's preferred leadership to another of its replicas
    while that makes the most-led and least-led brokers closer (each swap
    lowers the sum of squares, so it ends), starting from the current first
    replicas: no reorder that does not help."""
    leads: dict[int, int] = {}
    for replicas in new.values():
        leads[replicas[0]] = leads.get(replicas[0], 0) + 1
    improved = True
    while improved:
        improved = False
        for replicas in new.values():
            first = replicas[0]
            alt = min(replicas[1:], key=lambda b: (leads.get(b, 0), b), default=None)
            if alt is not None and leads.get(alt, 0) + 1 < leads[first]:
                replicas.remove(alt)
                replicas.insert(0, alt)
                leads[first] -= 1
                leads[alt] = leads.get(alt, 0) + 1
                improved = True
