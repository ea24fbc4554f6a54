"""Where new replicas go (``storage.placement``): the shards of one machine
(``kcompat.cores``) never hold two replicas of one partition."""

from __future__ import annotations

import itertools

import pytest

from kcompat.broker.storage.placement import ring, spread


def machines_of(shards: dict[str, int]) -> list[tuple[int, str]]:
    """Brokers of the machines ``shards`` names, with ``shards[m]`` shards
    each: shard k of the i-th machine is node i + 1000 k, as ``node.shards``
    numbers them."""
    return [(i + 1 + 1000 * k, m) for i, (m, n) in enumerate(shards.items()) for k in range(n)]


def test_the_ring_alternates_machines_then_shards() -> None:
    assert ring(machines_of({"1": 2, "2": 2, "3": 1})) == [
        (1, "1"), (2, "2"), (3, "3"), (1001, "1"), (1002, "2")]


def test_one_broker_per_machine_is_the_plain_round_robin() -> None:
    order = ring((n, str(n)) for n in (3, 1, 2, 4))
    for start, replication in itertools.product(range(4), range(1, 5)):
        assert spread(order, start, 4, replication) == [
            [[1, 2, 3, 4][(start + p + k) % 4] for k in range(replication)] for p in range(4)]


@pytest.mark.parametrize("shards", [{"1": 2, "2": 2, "3": 2}, {"1": 4, "2": 1, "3": 2},
                                    {"1": 3, "2": 3}, {"a": 1, "b": 5, "c": 1, "d": 2}])
def test_no_partition_has_two_replicas_on_one_machine(shards: dict[str, int]) -> None:
    brokers = machines_of(shards)
    machine = dict(brokers)
    order = ring(brokers)
    for replication in range(1, len(shards) + 1):
        for start in range(len(order)):
            for replicas in spread(order, start, 12, replication):
                assert len(replicas) == replication
                assert len({machine[r] for r in replicas}) == replication, (replicas, shards)


def test_leaders_spread_over_every_shard() -> None:
    order = ring(machines_of({"1": 2, "2": 2, "3": 2}))
    leaders = [replicas[0] for replicas in spread(order, 0, 6, 3)]
    assert sorted(leaders) == [1, 2, 3, 1001, 1002, 1003]


def test_more_replicas_than_machines_is_refused() -> None:
    with pytest.raises(ValueError, match="2 replicas need 2 machines"):
        spread(ring(machines_of({"1": 2})), 0, 1, 2)
