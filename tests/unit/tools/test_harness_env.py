"""The broker reads every ``KCOMPAT_*`` environment variable as configuration
(``kcompat.broker.config.broker_config.from_env``) and refuses unknown keys, and test brokers
inherit the harness's environment. So no variable the test harness, benchmarks
or demos read may live in that namespace unless it is a broker key or one of
``NOT_CONFIG_ENV`` (``KCOMPAT_KAFKA_VERSION`` and ``KCOMPAT_CACHE`` once made
every kcompat broker refuse to start: ``kafka.version: unknown broker config``)."""

from __future__ import annotations

import re
from pathlib import Path

from kcompat.broker.config.broker_config import BROKER_CONFIGS, NOT_CONFIG_ENV, from_env

ROOT = Path(__file__).resolve().parents[3]
# os.environ["X"], os.environ.get("X"), .setdefault / .pop, os.getenv("X")
ENV_READ = re.compile(r"""(?:environ(?:\.get|\.setdefault|\.pop)?\s*[\[(]|getenv\()\s*["'](KCOMPAT_\w+)""")
DIRS = ("kcompat", "compat_tests", "tests", "bench", "spark_demo", "examples", "tools")


def _sources() -> list[Path]:
    here = Path(__file__).resolve()
    return [p for d in DIRS for p in (ROOT / d).rglob("*.py") if p != here]


def test_environment_variables_read_in_the_repo_are_broker_configs() -> None:
    read: dict[str, set[str]] = {}
    for path in _sources():
        for name in ENV_READ.findall(path.read_text(errors="replace")):
            read.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    colliding = {name: sorted(where) for name, where in read.items()
                 if name not in NOT_CONFIG_ENV
                 and not set(from_env({name: ""})) <= set(BROKER_CONFIGS)}
    assert not colliding, (
        "these KCOMPAT_* variables are not broker configs, so a broker that inherits "
        f"them refuses to start; rename them outside KCOMPAT_*: {colliding}")


def test_the_scan_finds_environment_reads() -> None:
    assert ENV_READ.findall('os.environ.get("KCOMPAT_CACHE", x); os.environ["KCOMPAT_A"]') == [
        "KCOMPAT_CACHE", "KCOMPAT_A"]
