"""Lateness observed per batch is what one observation per record gives."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram

from kcompat.broker.ext.delays import LATENESS_BUCKETS_S
from kcompat.broker.ext.lateness import BatchLateness


def _samples(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    return {(s.name, s.labels.get("le", "")): s.value for m in registry.collect()
            for s in m.samples if not s.name.endswith("_created")}


@given(st.lists(st.tuples(st.integers(0, 100_000),
                          st.lists(st.integers(-5_000, 200_000), max_size=60)), max_size=8))
def test_a_batch_observes_as_its_records_one_by_one(batches: list[tuple[int, list[int]]]
                                                    ) -> None:
    per_record, per_batch = CollectorRegistry(), CollectorRegistry()
    one_by_one = Histogram("late_seconds", "d", buckets=LATENESS_BUCKETS_S,
                           registry=per_record)
    batched = BatchLateness("late_seconds", "d", LATENESS_BUCKETS_S)
    per_batch.register(batched)
    for now, dues in batches:
        for due in dues:
            one_by_one.observe(max(now - due, 0) / 1000)
        batched.observe_dues(now, dues)
    expected, got = _samples(per_record), _samples(per_batch)
    assert expected.keys() == got.keys()
    for key, value in expected.items():
        assert abs(got[key] - value) <= 1e-6 * max(1.0, abs(value)), key
