"""The librdkafka suite harness's own pieces that need no build or broker: the
runner's summary parsed, the test selection, FINDINGS.md's section replaced in place."""

from __future__ import annotations

from pathlib import Path

import pytest

from compat_tests.rdkafka_suite import _selection, run

SUMMARY = (
    "TEST 20261130011500 (bare, scenario default) SUMMARY\n"
    "#==================================================================#\n"
    "|\x1b[32m <MAIN>                                   |     PASSED |   9.120s \x1b[0m|\n"
    "|\x1b[32m 0012_produce_consume                     |     PASSED |   8.001s \x1b[0m|\n"
    "|\x1b[31m 0013_null_msgs                           |     FAILED |   3.500s \x1b[0m|"
    "\x1b[31m Test failed: 0013-null_msgs.c:90: consume: timed out\x1b[0m\n"
    "|\x1b[36m 0115_producer_auth                       |    SKIPPED |   0.000s \x1b[0m|"
    "\x1b[36m Cluster authentication required\x1b[0m\n"
    "#==================================================================#\n")


def test_summary_rows_parsed_with_state_and_reason() -> None:
    rows = run.parse_summary(SUMMARY)
    assert rows == {
        "0012_produce_consume": ("PASSED", ""),
        "0013_null_msgs": ("FAILED", "Test failed: 0013-null_msgs.c:90: consume: timed out"),
        "0115_producer_auth": ("SKIPPED", "Cluster authentication required"),
    }


def test_selection() -> None:
    assert _selection.select("first")[0] == "0001"
    assert all(n <= "0030" for n in _selection.select("first"))
    everything = _selection.select("all")
    assert not set(everything) & _selection.NOT_RUN
    assert _selection.select("12,0013") == ["0012", "0013"]
    with pytest.raises(SystemExit):
        _selection.select("0004")  # broker-less: not one of the broker tests


def test_findings_section_replaced_in_place(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    findings = tmp_path / "FINDINGS.md"
    findings.write_text("# Findings\n\n## Before\n\ntext\n")
    monkeypatch.setattr(run, "FINDINGS", findings)
    run.write_findings({"0012_produce_consume": {"single": ["PASSED", ""]}})
    run.write_findings({"0012_produce_consume": {"single": ["FAILED", "x"],
                                                 "kafka": ["PASSED", ""]}})
    text = findings.read_text()
    assert text.count(run._BEGIN) == 1 and text.count(run._END) == 1
    assert text.startswith("# Findings\n\n## Before\n\ntext\n")
    assert "| 0012_produce_consume | FAIL | - | pass | - |" in text
