"""The rebalance planner (``kcompat.cli._balance``): counts within one of each
other after the fewest moves, drained brokers emptied, leaders spread, the
cheapest partitions moved first, nothing planned for a balanced layout."""

from __future__ import annotations

import random

import pytest

from kcompat.cli._balance import plan, spread

Layout = dict[tuple[str, int], list[int]]


def _apply(layout: Layout, moves: Layout) -> Layout:
    return {**layout, **moves}


def test_a_new_broker_gets_its_share_with_the_fewest_moves() -> None:
    layout = {("t", i): [1 + i % 3, 1 + (i + 1) % 3, 1 + (i + 2) % 3] for i in range(12)}
    moves = plan(layout, [1, 2, 3, 4], {})
    after = spread(_apply(layout, moves), [1, 2, 3, 4], {})
    assert after.replicas == {1: 9, 2: 9, 3: 9, 4: 9}
    moved = sum(len(set(r) - set(layout[k])) for k, r in moves.items())
    assert moved == 9  # exactly broker 4's share, nothing shuffled between the others
    assert max(after.leaders.values()) - min(after.leaders.values()) <= 1
    for key, replicas in moves.items():
        assert len(set(replicas)) == len(replicas) == 3, (key, replicas)


def test_a_drained_broker_is_emptied_and_the_rest_stay_even() -> None:
    layout = {("t", i): [1 + i % 4, 1 + (i + 1) % 4] for i in range(10)}
    after = _apply(layout, plan(layout, [1, 2, 3, 4], {}, drain=[2]))
    counts = spread(after, [1, 2, 3, 4], {}).replicas
    assert counts[2] == 0 and sum(counts.values()) == 20
    assert max(counts[b] for b in (1, 3, 4)) - min(counts[b] for b in (1, 3, 4)) <= 1
    assert all(2 not in r and len(set(r)) == 2 for r in after.values())


def test_leaders_spread_where_only_some_partitions_reach_the_new_brokers() -> None:
    """50 partitions on 1-3 spread over 1-5: only the 30 partitions that
    moved hold 4 or 5, and leaders still end 10 each (a greedy pass in
    partition order left 4 and 5 six each)."""
    layout = {("t", i): [1 + (i + k) % 3 for k in range(3)] for i in range(50)}
    after = _apply(layout, plan(layout, [1, 2, 3, 4, 5], {}))
    assert spread(after, [1, 2, 3, 4, 5], {}).leaders == dict.fromkeys(range(1, 6), 10)


def test_the_smallest_partitions_move_first() -> None:
    layout = {("big", 0): [1], ("small", 0): [1], ("mid", 0): [1], ("x", 0): [2]}
    sizes = {("big", 0): 10**9, ("small", 0): 10, ("mid", 0): 10**6, ("x", 0): 5}
    moves = plan(layout, [1, 2, 3], sizes)
    assert set(moves) == {("small", 0)} and moves[("small", 0)] == [3]


def test_balanced_already_plans_nothing() -> None:
    layout = {("t", i): [1 + i % 3, 1 + (i + 1) % 3] for i in range(6)}
    assert plan(layout, [1, 2, 3], {}) == {}


def test_leaders_spread_by_reordering_only() -> None:
    layout = {("t", i): [1, 2] for i in range(4)}
    moves = plan(layout, [1, 2], {})
    assert all(sorted(r) == [1, 2] for r in moves.values())
    after = spread(_apply(layout, moves), [1, 2], {})
    assert after.leaders == {1: 2, 2: 2}


def test_impossible_plans_are_refused() -> None:
    with pytest.raises(ValueError, match="no broker is left"):
        plan({("t", 0): [1]}, [1], {}, drain=[1])
    with pytest.raises(ValueError, match="more than the 2 brokers left"):
        plan({("t", 0): [1, 2, 3]}, [1, 2, 3], {}, drain=[3])


@pytest.mark.parametrize("seed", range(20))
def test_random_layouts_end_within_one(seed: int) -> None:
    rng = random.Random(seed)
    brokers = list(range(1, rng.randint(3, 7)))
    rf = rng.randint(1, min(3, len(brokers) - 1))
    layout = {("t", i): rng.sample(brokers[:-1], rf) for i in range(rng.randint(1, 40))}
    drain = [brokers[0]] if seed % 3 == 0 and len(brokers) - 1 > rf else []
    after = _apply(layout, plan(layout, brokers, {}, drain))
    kept = [b for b in brokers if b not in drain]
    counts = spread(after, brokers, {}).replicas
    assert all(counts[b] == 0 for b in drain)
    assert max(counts[b] for b in kept) - min(counts[b] for b in kept) <= 1, (layout, after)
    assert all(len(set(r)) == rf and set(r) <= set(kept) for r in after.values())


def test_a_new_machine_of_two_shards_takes_replicas_never_two_of_one_partition() -> None:
    """Machines 1-3 of one broker each, then machine 4 of two shards (4 and
    1004): each partition keeps its replicas on three distinct machines."""
    layout = {("t", i): [1 + i % 3, 1 + (i + 1) % 3, 1 + (i + 2) % 3] for i in range(12)}
    machines = {1004: "4"}
    after = _apply(layout, plan(layout, [1, 2, 3, 4, 1004], {}, machines=machines))
    counts = spread(after, [1, 2, 3, 4, 1004], {}).replicas
    assert counts[4] + counts[1004] >= 7, counts  # the new machine took its share
    for key, replicas in after.items():
        assert len({machines.get(b, str(b)) for b in replicas}) == 3, (key, replicas)


def test_draining_a_machine_s_shard_never_puts_its_replica_beside_its_sibling() -> None:
    layout = {("t", i): [[1, 2], [1001, 2], [2, 1]][i % 3] for i in range(6)}
    machines = {1: "1", 1001: "1", 2: "2", 3: "3"}
    after = _apply(layout, plan(layout, [1, 1001, 2, 3], {}, drain=[1], machines=machines))
    for key, replicas in after.items():
        assert 1 not in replicas and len({machines[b] for b in replicas}) == 2, (key, replicas)
