"""The kafka-python suite harness's own pieces that need no broker: the JUnit
report read per test, the table's marks, a rerun merged over earlier results."""

from __future__ import annotations

from pathlib import Path

import pytest

from compat_tests.kafka_python_suite import run

REPORT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="test.integration.test_admin_integration" name="test_create_partitions"/>
<testcase classname="test.integration.test_consumer_integration" name="test_group">
<failure message="AssertionError: timeout waiting for stable group&#10;more">tb</failure>
</testcase>
<testcase classname="test.integration.test_consumer_integration" name="test_old">
<skipped message="Requires KAFKA_VERSION &lt; 0.10.1"/></testcase>
<testcase classname="test.integration.test_producer_integration" name="test_end_to_end[gzip]">
<error message="fixture failed"/></testcase>
</testsuite></testsuites>"""


def test_report_read_per_test(tmp_path: Path) -> None:
    path = tmp_path / "r.xml"
    path.write_text(REPORT)
    assert run.parse_report(path) == {
        "test_admin_integration::test_create_partitions": {"outcome": "passed", "detail": ""},
        "test_consumer_integration::test_group": {
            "outcome": "failed", "detail": "AssertionError: timeout waiting for stable group"},
        "test_consumer_integration::test_old": {
            "outcome": "skipped", "detail": "Requires KAFKA_VERSION < 0.10.1"},
        "test_producer_integration::test_end_to_end[gzip]": {
            "outcome": "error", "detail": "fixture failed"},
    }


def test_a_rerun_replaces_only_its_tests_and_the_table_marks_differences(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run, "RESULTS", tmp_path / "results.json")
    ok, bad = {"outcome": "passed", "detail": ""}, {"outcome": "failed", "detail": "x"}
    run.merged({"single": {"a": ok, "b": bad}, "kafka": {"a": ok, "b": ok}})
    results = run.merged({"single": {"b": ok}})
    assert results["single"] == {"a": ok, "b": ok}
    results = run.merged({"single": {"a": bad}})
    text = run.table(results)
    assert "| `a` **differs** | failed | passed |" in text
    assert "| `b` | passed | passed |" in text
    assert "single: 1 passed, 1 failed, 0 error, 0 skipped" in text
