"""``replication.leader_gaps``: the gaps between a metadata follower's contacts
with its leader, counted per leader, the long ones logged."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from kcompat.broker.replication.leader_gaps import LeaderGaps


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_gaps_are_counted_between_contacts_of_one_leader(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    gaps = LeaderGaps(1.5, clock)  # a gap of 1.125 s or more is logged
    registry = CollectorRegistry()
    gaps.export(registry)
    caplog.set_level(logging.INFO, "kcompat.cluster")
    gaps.heard(3)  # the first contact starts the count
    clock.now += 0.5
    gaps.heard(3)
    clock.now += 1.2
    gaps.heard(3)
    clock.now += 5.0
    gaps.heard(2)  # a new leader: no gap across the change
    clock.now += 0.4
    gaps.heard(2)
    gaps.left()  # led here meanwhile
    clock.now += 9.0
    gaps.heard(2)
    assert gaps.count == 3
    assert gaps.longest_s == pytest.approx(1.2)
    assert registry.get_sample_value("kcompat_metadata_leader_gap_seconds_count") == 3
    assert registry.get_sample_value("kcompat_metadata_leader_gap_seconds_bucket",
                                     {"le": "0.75"}) == 2
    assert registry.get_sample_value("kcompat_metadata_leader_gap_longest_seconds") \
        == pytest.approx(1.2)
    said = [r.getMessage() for r in caplog.records if "no word" in r.getMessage()]
    assert said == ["no word from the metadata leader 3 for 1.20 s (fetch timeout 1.50 s)"]
