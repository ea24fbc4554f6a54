"""Configuration layering (defaults < YAML < flags < KCOMPAT_* env) and validation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kcompat.broker.config import broker_config as config
from kcompat.broker.config.configdef import ConfigError


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


def test_admin_port_layers_and_limits(tmp_path: Path) -> None:
    assert config.load(None, {}, {})["admin.port"] == 9644
    assert config.load(None, {}, {})["admin.host"] == ""
    f = tmp_path / "broker.yaml"
    f.write_text("admin:\n  port: 9000\n  host: 0.0.0.0\n")
    assert config.load(f, {}, {})["admin.port"] == 9000
    assert config.load(f, {"admin.port": "9001"}, {})["admin.port"] == 9001
    cfg = config.load(f, {"admin.port": "9001"}, {"KCOMPAT_ADMIN_PORT": "-1"})
    assert cfg["admin.port"] == -1 and cfg["admin.host"] == "0.0.0.0"
    with pytest.raises(ConfigError, match="admin.port: -2 is below the minimum -1"):
        config.load(None, {"admin.port": "-2"}, {})


def test_logging_env_vars_are_not_config_keys() -> None:
    cfg = config.load(None, {}, {"KCOMPAT_LOG_LEVEL": "DEBUG", "KCOMPAT_LOG_FORMAT": "json"})
    assert cfg.explicit == set()


def _kcompat(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kcompat", *args], capture_output=True,
                          text=True, timeout=30, env={"PATH": "/usr/bin:/bin", **(env or {})})


def test_cli_flag_and_env_precedence(tmp_path: Path) -> None:
    f = tmp_path / "broker.yaml"
    f.write_text("admin.port: 9000\nnum.partitions: 2\n")
    proc = _kcompat("broker", "--config", str(f), "--admin-port", "9001", "--print-config",
                    env={"KCOMPAT_NUM_PARTITIONS": "7"})
    lines = proc.stdout.splitlines()
    assert "admin.port=9001" in lines and "num.partitions=7" in lines, proc.stderr
    proc = _kcompat("broker", "--config", str(f), "--admin-port", "9001", "--print-config",
                    env={"KCOMPAT_ADMIN_PORT": "9002"})
    assert "admin.port=9002" in proc.stdout.splitlines()


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (("--log-format", "xml"), {}, "--log-format: 'xml' is not one of text, json"),
        ((), {"KCOMPAT_LOG_LEVEL": "LOUD"}, "--log-level: 'LOUD' is not one of DEBUG"),
        (("--admin-port", "http"), {}, "admin.port: 'http' is not a valid int"),
        (("--set", "admin.prot=1"), {}, "admin.prot: unknown broker config"),
        (("--set", "listener.name.plaintext.broker.id=5"), {},
         "listener.name.plaintext.broker.id: broker.id cannot be set per listener"),
        (("--set", "listener.name.plaintext.log.retention.ms=5"), {},
         "log.retention.ms cannot be set per listener: a listener.name.<listener>. prefix "
         "takes the ssl.* and sasl.* keys"),
    ],
)
def test_cli_bad_settings_are_one_line(args: tuple[str, ...], env: dict[str, str],
                                       message: str) -> None:
    proc = _kcompat("broker", *args, "--print-config", env=env)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr


def test_example_config_files_load() -> None:
    examples = sorted((Path(__file__).resolve().parents[3] / "config").glob("*.yaml"))
    assert examples
    for path in examples:
        cfg = config.load(path, {}, {})
        if path.name.startswith("cluster-"):  # make cluster: one broker of three each
            node = cfg["node.id"]
            assert path.name == f"cluster-{node}.yaml", path
            assert cfg["port"] == 19091 + node and cfg["admin.port"] == 19643 + node, path
            assert f"{node}@127.0.0.1:{cfg['port']}" in cfg["controller.quorum.voters"], path
            continue
        assert cfg["admin.port"] == 9644 and cfg["port"] == 9092, path
