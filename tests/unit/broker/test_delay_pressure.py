"""The throttle of a late schedule partition: Kafka's quota formula, delivery as the quota."""

from __future__ import annotations

from kcompat.broker.ext.delay_pressure import FROM_S, THROTTLE_MAX_MS, Backpressure


def test_on_time_nothing_is_throttled() -> None:
    bp = Backpressure()
    bp.scheduled(0, 1_000_000, 10.0)
    assert bp.throttle_ms(0, FROM_S, 10.0) == 0


def test_intake_beyond_delivery_waits_until_it_does_not_outpace_it() -> None:
    bp = Backpressure()
    for k in range(4):  # over 2 s: 20,000 records delivered, 60,000 scheduled
        bp.delivered(0, 5_000, 10.0 + k * 0.5)
        bp.scheduled(0, 15_000, 10.0 + k * 0.5)
    # the window covers 1.5 s: 20,000 delivered in it is 13,333 records/s, at
    # which 60,000 scheduled take 4.5 s — 3 s more than the window
    assert bp.throttle_ms(0, 0.6, 11.5) == 3_000
    # intake at the delivery rate: only the lateness beyond FROM_S
    other = Backpressure()
    for k in range(4):
        other.delivered(1, 5_000, 10.0 + k * 0.5)
        other.scheduled(1, 5_000, 10.0 + k * 0.5)
    assert other.throttle_ms(1, 0.8, 11.5) == 300


def test_the_throttle_is_capped_and_old_samples_leave_the_window() -> None:
    bp = Backpressure()
    bp.scheduled(0, 10_000_000, 10.0)
    assert bp.throttle_ms(0, 30.0, 10.0) == THROTTLE_MAX_MS
    assert bp.throttle_ms(0, 0.7, 20.0) == 200  # the burst is 10 s old: forgotten


def test_lateness_alone_earns_at_most_a_second() -> None:
    bp = Backpressure()
    bp.scheduled(0, 10, 10.0)  # a trickle: the rates ask for nothing
    assert bp.throttle_ms(0, 100.0, 10.0) == 1_000
