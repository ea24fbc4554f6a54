"""Server-side assignors of KIP-848 consumer groups: ``uniform`` and ``range``.

Theory of operation
-------------------
The group coordinator computes a consumer group's target assignment itself
(KIP-848); the member names the assignor with ``group.remote.assignor``
(ConsumerGroupHeartbeat's ServerAssignor), else the group uses the first one of
the broker's ``group.consumer.assignors`` (Kafka 4.4: ``uniform,range``).

Both take ``{member: subscribed topic names}``, the topics' partition counts and
the previous target assignment, and return ``{member: TopicPartitions}``:

* ``uniform`` (Kafka's UniformAssignor): balance first, then stickiness.
  Homogeneous subscriptions: P partitions over M members, every member gets
  ``P // M`` and the first ``P % M`` (by how much they already hold, then id)
  one more; a member keeps what it had as far as its quota allows, the rest is
  handed to the members still short. Heterogeneous: every partition goes to a
  subscriber; partitions a member had and still subscribes to stay, the others
  go to the least loaded subscriber, then partitions move from the most to the
  least loaded eligible member until no move narrows the gap (a member's load
  differs from another's by at most one where their subscriptions allow it).
* ``range`` (Kafka's RangeAssignor, server side): topic by topic, the
  subscribers sorted by id each get a contiguous quota (``P // M``, the first
  ``P % M`` one more); a member keeps the partitions of its previous target
  that fit its quota, the rest fill the quotas in partition order.

Kafka iterates hash sets; kcompat sorts, so results are deterministic but not
necessarily Kafka's exact pick (its balance and stickiness rules hold).
Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

TopicPartitions = tuple[tuple[str, tuple[int, ...]], ...]  # sorted, no empty topic
Partition = tuple[str, int]
Assignor = Callable[[Mapping[str, Sequence[str]], Mapping[str, int],
                     Mapping[str, TopicPartitions]], dict[str, TopicPartitions]]

UNIFORM = "uniform"
RANGE = "range"


def grouped(partitions: Iterable[Partition]) -> TopicPartitions:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(set(partitions)):
        by_topic.setdefault(topic, []).append(partition)
    return tuple((t, tuple(ps)) for t, ps in by_topic.items())


def flat(assigned: TopicPartitions) -> set[Partition]:
    return {(t, p) for t, ps in assigned for p in ps}


def uniform_assign(subscriptions: Mapping[str, Sequence[str]],
                   partition_counts: Mapping[str, int],
                   current: Mapping[str, TopicPartitions]) -> dict[str, TopicPartitions]:
    members = sorted(subscriptions)
    eligible = {m: {t for t in subscriptions[m] if partition_counts.get(t, 0) > 0}
                for m in members}
    old = {m: {tp for tp in flat(current.get(m, ())) if tp[0] in eligible[m]
               and tp[1] < partition_counts[tp[0]]} for m in members}
    if len({frozenset(s) for s in eligible.values()}) <= 1:
        out = _uniform_homogeneous(members, eligible, partition_counts, old)
    else:
        out = _uniform_general(members, eligible, partition_counts, old)
    return {m: grouped(out[m]) for m in members}


def _uniform_homogeneous(members: list[str], eligible: Mapping[str, set[str]],
                         partition_counts: Mapping[str, int],
                         old: Mapping[str, set[Partition]]) -> dict[str, set[Partition]]:
    out: dict[str, set[Partition]] = {m: set() for m in members}
    if not members:
        return out
    topics = sorted(next(iter(eligible.values())))
    partitions = [(t, p) for t in topics for p in range(partition_counts[t])]
    base, extra = divmod(len(partitions), len(members))
    # the members that already hold more than the base keep the extra slots first
    order = sorted(members, key=lambda m: (-min(len(old[m]), base + 1), m))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(order)}
    taken: set[Partition] = set()
    for m in members:
        for tp in sorted(old[m])[:quota[m]]:
            out[m].add(tp)
            taken.add(tp)
    free = [tp for tp in partitions if tp not in taken]
    for m in members:
        while len(out[m]) < quota[m] and free:
            out[m].add(free.pop(0))
    return out


def _uniform_general(members: list[str], eligible: Mapping[str, set[str]],
                     partition_counts: Mapping[str, int],
                     old: Mapping[str, set[Partition]]) -> dict[str, set[Partition]]:
    out: dict[str, set[Partition]] = {m: set() for m in members}
    owner: dict[Partition, str] = {}
    for m in members:
        for tp in sorted(old[m]):
            if tp not in owner:
                owner[tp] = m
                out[m].add(tp)
    topics = sorted({t for s in eligible.values() for t in s})
    subscribers = {t: [m for m in members if t in eligible[m]] for t in topics}
    # fewest candidates first, so the constrained partitions find room
    for t in sorted(topics, key=lambda t: (len(subscribers[t]), t)):
        for p in range(partition_counts[t]):
            if (t, p) not in owner:
                m = min(subscribers[t], key=lambda m: (len(out[m]), m))
                owner[(t, p)] = m
                out[m].add((t, p))
    moved = True
    while moved:  # move from the most to the least loaded eligible member
        moved = False
        for src in sorted(members, key=lambda m: (-len(out[m]), m)):
            for tp in sorted(out[src]):
                dst = min((m for m in subscribers[tp[0]] if m != src),
                          key=lambda m: (len(out[m]), m), default=None)
                if dst is not None and len(out[src]) - len(out[dst]) > 1:
                    out[src].discard(tp)
                    out[dst].add(tp)
                    moved = True
    return out


def range_assign(subscriptions: Mapping[str, Sequence[str]],
                 partition_counts: Mapping[str, int],
                 current: Mapping[str, TopicPartitions]) -> dict[str, TopicPartitions]:
    members = sorted(subscriptions)
    out: dict[str, set[Partition]] = {m: set() for m in members}
    old = {m: flat(current.get(m, ())) for m in members}
    for topic in sorted({t for m in members for t in subscriptions[m]}):
        count = partition_counts.get(topic, 0)
        subs = [m for m in members if topic in subscriptions[m]]
        if not count or not subs:
            continue
        base, extra = divmod(count, len(subs))
        quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(subs)}
        taken: set[int] = set()
        for m in subs:
            kept = sorted(p for t, p in old[m] if t == topic and p < count)[:quota[m]]
            out[m].update((topic, p) for p in kept)
            taken.update(kept)
        free = [p for p in range(count) if p not in taken]
        for m in subs:
            while sum(1 for t, _ in out[m] if t == topic) < quota[m] and free:
                out[m].add((topic, free.pop(0)))
    return {m: grouped(out[m]) for m in members}


ASSIGNORS: dict[str, Assignor] = {UNIFORM: uniform_assign, RANGE: range_assign}
