"""Configuration layering (defaults < YAML < flags < KCOMPAT_* env) and validation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kcompat.broker import config
from kcompat.broker.configdef import ConfigError


def test_precedence_file_then_flags_then_env(tmp_path: Path) -> None:
    f = tmp_path / "broker.yaml"
    f.write_text("num.partitions: 3\nlog:\n  retention.ms: 1000\nport: 9999\n")
    cfg = config.load(f, {"num.partitions": "4"}, {"KCOMPAT_LOG_RETENTION_MS": "2000"})
    assert cfg["num.partitions"] == 4          # flag beats file
    assert cfg["log.retention.ms"] == 2000     # env beats file (nested YAML flattened)
    assert cfg["port"] == 9999                 # file beats default
    assert cfg["auto.create.topics.enable"] is True
    assert cfg.explicit == {"num.partitions", "log.retention.ms", "port"}


@pytest.mark.parametrize(
    ("layer", "message"),
    [
        ({"num.partitons": "3"}, "num.partitons: unknown broker config"),
        ({"num.partitions": "many"}, "num.partitions: 'many' is not a valid int"),
        ({"num.partitions": "0"}, "num.partitions: 0 is below the minimum 1"),
        ({"kcompat.flush.mode": "sometimes"}, "is not one of acks_all, always, never"),
        ({"auto.create.topics.enable": "yes"}, "is not a valid boolean"),
    ],
)
def test_bad_values_name_the_key(layer: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        config.load(None, layer, {})
    assert message in str(err.value)


def test_cli_reports_bad_config_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("log.retention.ms: soon\n")
    proc = subprocess.run(
        [sys.executable, "-m", "kcompat", "broker", "--config", str(bad), "--print-config"],
        capture_output=True, text=True, timeout=30,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "log.retention.ms" in lines[0] and "Traceback" not in proc.stderr


def test_cli_print_config_shows_effective_values(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "kcompat", "broker", "--port", "1234", "--print-config"],
        capture_output=True, text=True, timeout=30, env={"KCOMPAT_NUM_PARTITIONS": "5",
                                                          "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "port=1234" in proc.stdout.splitlines()
    assert "num.partitions=5" in proc.stdout.splitlines()
