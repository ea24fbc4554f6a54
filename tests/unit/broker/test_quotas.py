"""Client byte-rate quotas (``kcompat.broker.net.quotas``) against numbers worked
out by hand from Kafka's formulas:

- ``Rate.windowSize``: now − start of the oldest sample, plus the missing
  windows while fewer than ``samples − 1`` have passed, at least 1 ms;
  ``Rate.measure`` = sum of the samples / window size in seconds;
- ``SampledStat.purgeObsoleteSamples``: a sample whose last record is
  ``samples × window`` old is reset;
- ``QuotaUtils.throttleTime``: X = (O − T) / T × W, ``Math.round``-ed;
- ``ClientQuotaManager.maxValueInQuotaWindow``: T × (samples − 1) × window s;
- the ``DefaultQuotaCallback`` precedence and metric tags.

Defaults throughout: ``quota.window.num`` = 11, ``quota.window.size.seconds`` = 1.
"""

from __future__ import annotations

import math

import pytest

from kcompat.broker.net.quotas import (
    FETCH,
    MUTATION,
    PRODUCE,
    ClientQuotaManager,
    ControllerMutationQuotaManager,
    QuotaConfig,
    Quotas,
    Rate,
    metric_tags,
    quota_limit,
    throttle_time_ms,
    user_of,
)

MiB = 1 << 20
CLIENT, USER = "client-id", "user"


class Clock:
    def __init__(self) -> None:
        self.now_ms = 0

    def __call__(self) -> int:
        return self.now_ms


def manager(key: str = PRODUCE) -> tuple[ClientQuotaManager, Clock]:
    clock = Clock()
    return ClientQuotaManager(key, QuotaConfig(11, 1), clock), clock


SLOW: Quotas = {((CLIENT, "slow"),): {PRODUCE: float(MiB)}}


# -- the rate -----------------------------------------------------------------------------


def test_a_new_rate_is_measured_over_ten_padded_windows() -> None:
    rate = Rate(11, 1000)
    rate.record(20 * MiB, 0)
    # 0 ms elapsed, 0 full windows < 10: + 10 windows -> W = 10 000 ms
    assert rate.window_size_ms(0) == 10_000
    assert rate.measure(0) == 2 * MiB  # 20 MiB / 10 s
    # 2 500 ms elapsed, 2 full windows: + 8 -> W = 10 500 ms
    assert rate.window_size_ms(2_500) == 10_500


def test_past_ten_windows_the_window_is_the_elapsed_time() -> None:
    rate = Rate(11, 1000)
    for t in range(0, 10_001, 1000):  # 11 samples of 1 MiB, one per window
        rate.record(MiB, t)
    # oldest sample started at 0; 10 full windows is not fewer than 10: no padding
    assert rate.window_size_ms(10_000) == 10_000
    assert rate.measure(10_000) == pytest.approx(11 * MiB / 10)


def test_a_sample_is_dropped_eleven_windows_after_its_last_record() -> None:
    rate = Rate(11, 1000)
    rate.record(10 * MiB, 0)
    assert rate.measure(10_999) == pytest.approx(10 * MiB / 10.999)  # 10 999 ms, unpadded
    assert rate.measure(11_000) == 0.0  # 11 × 1000 ms after its last record: reset


def test_samples_keep_one_more_than_the_window_count() -> None:
    rate = Rate(2, 1000)
    rate.record(1, 0)
    rate.record(2, 1000)
    rate.record(4, 2000)  # a third sample: the ring holds samples + 1 = 3
    # at 2000 ms: sample 0 (last record at 0) is 2 × 1000 old -> reset to 2000;
    # oldest start is then 1000: W = 1000 ms (1 full window, not fewer than 1)
    assert rate.measure(2000) == pytest.approx(6 / 1.0)


def test_throttle_time_is_rounded_as_java_math_round() -> None:
    # (O − T)/T × W: (1.5 − 1)/1 × 3 = 1.5 -> 2; (1.25 − 1)/1 × 10 = 2.5 -> 3
    assert throttle_time_ms(1.5, 1.0, 3) == 2
    assert throttle_time_ms(1.25, 1.0, 10) == 3
    assert throttle_time_ms(1.2, 1.0, 10) == 2  # 1.999... rounds to 2


# -- the manager: record, throttle, take back ---------------------------------------------


def test_first_burst_over_the_padded_window_is_throttled_by_kafkas_formula() -> None:
    quotas, clock = manager()
    # 20 MiB at once: O = 2 MiB/s over W = 10 s, T = 1 MiB/s: X = (2−1)/1 × 10 000
    assert quotas.record(SLOW, "User:ANONYMOUS", "slow", 20 * MiB) == 10_000
    assert clock.now_ms == 0


def test_a_burst_up_to_quota_times_ten_windows_is_not_throttled() -> None:
    quotas, _clock = manager()
    # 10 MiB over W = 10 s is exactly 1 MiB/s: within quota (<=)
    assert quotas.record(SLOW, "User:ANONYMOUS", "slow", 10 * MiB) == 0
    # 1 byte more: over, but X = (1/10 s)/2^20 × 10 000 ms = 0.00095 ms rounds to 0
    assert quotas.record(SLOW, "User:ANONYMOUS", "slow", 1) == 0
    # 100 KiB more: X = (102 401/10 s)/2^20 × 10 000 ms = 97.66 -> 98 ms
    assert quotas.record(SLOW, "User:ANONYMOUS", "slow", 100 * 1024) == 98


def test_throttle_after_a_second_record_half_a_window_later() -> None:
    quotas, clock = manager()
    assert quotas.record(SLOW, "User:x", "slow", 5 * MiB) == 0
    clock.now_ms = 500
    # 11 MiB over W = 10 500 ms: O = 11/10.5 MiB/s; X = (11/10.5 − 1) × 10 500 = 500
    assert quotas.record(SLOW, "User:x", "slow", 6 * MiB) == 500


def test_unrecord_takes_the_bytes_back() -> None:
    quotas, _clock = manager(FETCH)
    limits: Quotas = {((CLIENT, "c"),): {FETCH: float(MiB)}}
    assert quotas.record(limits, "User:u", "c", 20 * MiB) == 10_000
    quotas.unrecord(limits, "User:u", "c", 20 * MiB)
    assert quotas.record(limits, "User:u", "c", 10 * MiB) == 0


def test_nothing_is_recorded_without_any_quota_of_the_key() -> None:
    quotas, _clock = manager()
    fetch_only: Quotas = {((CLIENT, "slow"),): {FETCH: 1.0}}
    assert quotas.record(fetch_only, "User:u", "slow", 10**12) == 0
    assert quotas.rates == {}
    assert quotas.max_value_in_quota_window(fetch_only, "User:u", "slow") == math.inf


def test_max_value_in_quota_window_is_quota_times_nine_or_ten_windows() -> None:
    quotas, _clock = manager(FETCH)
    limits: Quotas = {((CLIENT, None),): {FETCH: 3000.0}}
    assert quotas.max_value_in_quota_window(limits, "User:u", "any") == 3000 * 10 * 1
    other = ClientQuotaManager(FETCH, QuotaConfig(5, 2), Clock())
    assert other.max_value_in_quota_window(limits, "User:u", "any") == 3000 * 4 * 2


def test_rates_unrecorded_for_an_hour_are_dropped() -> None:
    quotas, clock = manager()
    quotas.record(SLOW, "User:u", "slow", 1)
    clock.now_ms = 3600 * 1000
    quotas.record(SLOW, "User:u", "other", 1)
    assert set(quotas.rates) == {("", "other")}


def test_a_greedy_client_muted_by_its_throttle_averages_the_quota() -> None:
    """Closed loop: a client sending 16 KiB as soon as it may (the broker
    serving 50 MiB/s), waiting out each throttle. Kafka's windows let the
    first ~11 MiB through at once and refill in bursts, so short spans run
    over; 300 s average the quota."""
    quotas, clock = manager()
    sent = 0
    while clock.now_ms < 300_000:
        clock.now_ms += 1  # 16 KiB at 50 MiB/s: 0.3 ms, counted as 1
        throttle = quotas.record(SLOW, "User:ANONYMOUS", "slow", 16384)
        sent += 16384
        clock.now_ms += throttle
    assert sent / (clock.now_ms / 1000) == pytest.approx(MiB, rel=0.01)


# -- which quota, which rate (precedence) ---------------------------------------------------


def _all_levels() -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    levels: list[tuple[tuple[str, str | None], ...]] = [
        ((CLIENT, "c"), (USER, "u")),  # 1 /users/u/clients/c
        ((CLIENT, None), (USER, "u")),  # 2 /users/u/clients/<default>
        ((USER, "u"),),  # 3 /users/u
        ((CLIENT, "c"), (USER, None)),  # 4 /users/<default>/clients/c
        ((CLIENT, None), (USER, None)),  # 5 /users/<default>/clients/<default>
        ((USER, None),),  # 6 /users/<default>
        ((CLIENT, "c"),),  # 7 /clients/c
        ((CLIENT, None),),  # 8 /clients/<default>
    ]
    return {entity: {PRODUCE: float(i)} for i, entity in enumerate(levels, start=1)}


def test_the_most_specific_of_the_eight_levels_applies() -> None:
    quotas = _all_levels()
    # tags per level: user+client levels keep (u, c), user levels (u, ""), client ("", c)
    expected_tags = {1: ("u", "c"), 2: ("u", "c"), 3: ("u", ""), 4: ("u", "c"),
                     5: ("u", "c"), 6: ("u", ""), 7: ("", "c"), 8: ("", "c")}
    for level in range(1, 9):
        tags = metric_tags(quotas, PRODUCE, "u", "c")
        assert (tags, quota_limit(quotas, PRODUCE, tags)) == (expected_tags[level], level)
        del quotas[next(e for e, v in quotas.items() if v[PRODUCE] == level)]
    assert quota_limit(quotas, PRODUCE, metric_tags(quotas, PRODUCE, "u", "c")) is None


def test_other_users_and_clients_fall_to_the_defaults() -> None:
    quotas = _all_levels()
    assert quota_limit(quotas, PRODUCE, metric_tags(quotas, PRODUCE, "v", "c")) == 4
    assert quota_limit(quotas, PRODUCE, metric_tags(quotas, PRODUCE, "v", "d")) == 5


def test_a_default_client_quota_limits_each_client_id_on_its_own() -> None:
    quotas, _clock = manager()
    limits: Quotas = {((CLIENT, None),): {PRODUCE: float(MiB)}}
    assert quotas.record(limits, "User:u", "a", 10 * MiB) == 0
    assert quotas.record(limits, "User:u", "b", 10 * MiB) == 0  # its own rate
    assert quotas.record(limits, "User:v", "a", MiB) == 1000  # users share a client's
    assert set(quotas.rates) == {("", "a"), ("", "b")}


def test_a_user_quota_is_shared_by_the_users_clients() -> None:
    quotas, _clock = manager()
    limits: Quotas = {((USER, "alice"),): {PRODUCE: float(MiB)}}
    assert quotas.record(limits, "User:alice", "a", 10 * MiB) == 0
    assert quotas.record(limits, "User:alice", "b", MiB) == 1000  # 11 MiB / 10 s
    assert quotas.record(limits, "User:bob", "b", 20 * MiB) == 0  # no quota for bob


def test_ip_entities_and_other_keys_do_not_count() -> None:
    quotas: Quotas = {(("ip", None),): {"connection_creation_rate": 5.0},
              ((CLIENT, "c"),): {FETCH: 7.0}}
    assert metric_tags(quotas, PRODUCE, "u", "c") == ("", "c")
    assert quota_limit(quotas, PRODUCE, ("", "c")) is None
    assert quota_limit(quotas, FETCH, ("", "c")) == 7.0


def test_the_user_is_the_principals_name() -> None:
    assert user_of("User:alice") == "alice"
    assert user_of("User:CN=a:b") == "CN=a:b"
    assert user_of("ANONYMOUS") == "ANONYMOUS"


# -- controller mutations (KIP-599) ------------------------------------------------------------
# Kafka's StrictControllerMutationQuotaTest and PermissiveControllerMutationQuotaTest
# walk through the same numbers: quota 10 a second, 10 windows of 1 s (burst 100).

MUTATING: Quotas = {((CLIENT, "admin"),): {MUTATION: 10.0}}


def mutations() -> tuple[ControllerMutationQuotaManager, Clock]:
    clock = Clock()
    clock.now_ms = 1_000_000
    return ControllerMutationQuotaManager(QuotaConfig(10, 1), clock), clock


def test_a_strict_quota_refuses_only_once_the_bucket_is_below_zero() -> None:
    manager, clock = mutations()
    quota = manager.quota_for(MUTATING, "User:ANONYMOUS", "admin", strict=True)
    assert quota is not None
    assert quota.record(90) and quota.throttle_time_ms() == 0  # 100 -> 10
    assert quota.record(90) and quota.throttle_time_ms() == 0  # 10 -> -80: still accepted
    assert not quota.record(30)  # below zero: refused, nothing taken
    assert quota.throttle_time_ms() == 8000  # -80 tokens at 10 a second
    clock.now_ms += 3000
    assert quota.throttle_time_ms() == 5000  # the throttle found, less the time since
    again = manager.quota_for(MUTATING, "User:ANONYMOUS", "admin", strict=True)
    assert again is not None and not again.record(1)  # -50: the same bucket, refused
    assert again.throttle_time_ms() == 5000
    clock.now_ms += 5000
    assert again.record(1)  # back at zero


def test_a_permissive_quota_accepts_everything_and_throttles() -> None:
    manager, clock = mutations()
    quota = manager.quota_for(MUTATING, "User:ANONYMOUS", "admin", strict=False)
    assert quota is not None
    assert quota.record(90) and quota.throttle_time_ms() == 0
    assert quota.record(90) and quota.throttle_time_ms() == 8000
    assert quota.record(30) and quota.throttle_time_ms() == 11000
    clock.now_ms += 10_000
    assert quota.throttle_time_ms() == 1000


def test_no_mutation_quota_without_one_for_this_client() -> None:
    manager, _ = mutations()
    assert manager.quota_for({}, "User:ANONYMOUS", "admin", strict=True) is None
    assert manager.quota_for(MUTATING, "User:ANONYMOUS", "other", strict=True) is None
    bytes_only: Quotas = {((CLIENT, "admin"),): {PRODUCE: 1.0}}
    assert manager.quota_for(bytes_only, "User:ANONYMOUS", "admin", strict=True) is None
