"""The catch-up throttle (``leader.replication.throttled.rate``) on a fake
clock: fetches of replicas catching up pass while the bucket holds bytes, are
kept (the newest per group and node) once a response overdrew it, and are
released when the rate has refilled it; unlimited passes everything."""

from __future__ import annotations

from kcompat.broker.replication.throttle import (
    CHUNKS_PER_S,
    MIN_CHUNK,
    UNLIMITED,
    CatchUpThrottle,
    configured_rate,
)
from kcompat.raft import FetchRequest


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def _fetch(group: int, offset: int, src: int = 4) -> FetchRequest:
    return FetchRequest(group, src, 1, 3, offset, 3)


def test_bytes_per_second_hold_over_time() -> None:
    """An observer fetching every 10 ms, each answer 300 bytes, for 10 s."""
    clock = Clock()
    throttle = CatchUpThrottle(lambda: 1000, clock)
    sent, waiting = 0, False
    for step in range(1000):
        clock.now = 100.0 + step / 100
        answered = (len(throttle.release()) if waiting
                    else int(throttle.admit(_fetch(7, step)) is not None))
        waiting = not answered
        if answered:
            throttle.spend(300)
            sent += 300
    # a first second's worth, then the rate: within one response of 11 s * rate
    assert 10_000 <= sent <= 11_000 + 300, sent


def test_kept_fetches_are_the_newest_per_group_and_node_and_released_on_refill() -> None:
    clock = Clock()
    throttle = CatchUpThrottle(lambda: 1000, clock)
    assert throttle.admit(_fetch(7, 0))
    throttle.spend(5000)  # overdrawn by 4 s of the rate
    assert not throttle.admit(_fetch(7, 10))
    assert not throttle.admit(_fetch(7, 20))
    assert not throttle.admit(_fetch(8, 5))
    assert throttle.release() == []
    clock.now += 3.9
    assert throttle.release() == []
    clock.now += 0.2
    assert [(m.group, m.fetch_offset) for m in throttle.release()] == [(7, 20), (8, 5)]
    assert throttle.release() == []


def test_answers_are_sized_to_a_fiftieth_of_the_rate_under_a_throttle() -> None:
    """A leader frames a move in pieces (at least MIN_CHUNK) between the
    requests it serves; unthrottled, the Raft core's own limit applies."""
    clock, rate = Clock(), [10 << 20]
    throttle = CatchUpThrottle(lambda: rate[0], clock)
    admitted = throttle.admit(_fetch(7, 0))
    assert admitted is not None and admitted.max_bytes == (10 << 20) // CHUNKS_PER_S
    throttle.spend(20 << 20)
    assert throttle.admit(_fetch(7, 1)) is None
    clock.now += 1.1
    [released] = throttle.release()
    assert released.max_bytes == admitted.max_bytes and released.fetch_offset == 1
    slow = CatchUpThrottle(lambda: 1000, clock).admit(_fetch(7, 0))
    assert slow is not None and slow.max_bytes == MIN_CHUNK
    rate[0] = UNLIMITED
    unlimited = throttle.admit(_fetch(7, 2))
    assert unlimited is not None and unlimited.max_bytes == 0


def test_unlimited_passes_everything_and_a_rate_set_later_applies() -> None:
    clock, rate = Clock(), [UNLIMITED]
    throttle = CatchUpThrottle(lambda: rate[0], clock)
    for i in range(100):
        assert throttle.admit(_fetch(7, i))
        throttle.spend(1 << 20)
    rate[0] = 1000
    assert throttle.admit(_fetch(7, 100))  # a first second's worth
    throttle.spend(2000)
    assert not throttle.admit(_fetch(7, 101))
    rate[0] = UNLIMITED  # removed: the kept fetch goes at once
    assert throttle.release() == [_fetch(7, 101)]  # unsized: the Raft core's limit


def test_configured_rate_per_broker_over_the_cluster_default() -> None:
    levels = {"": {"leader.replication.throttled.rate": "500"},
              "2": {"leader.replication.throttled.rate": "70"}}
    assert configured_rate(levels, 1) == 500
    assert configured_rate(levels, 2) == 70
    assert configured_rate({}, 1) == UNLIMITED
    assert configured_rate({"": {"leader.replication.throttled.rate": "x"}}, 1) == UNLIMITED
