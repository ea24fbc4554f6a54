"""Fixtures for the Java suites: cached classpaths, JVM program runner, reference Kafka.

The jars come from Maven Central through ``mvn`` (``make java-deps`` resolves them
before pytest; the fixtures resolve them too if that was skipped). A missing ``mvn``
or ``java`` is an error, not a skip: ``make tools`` installs both.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from typing import Any

import pytest

from compat_tests.java._jvm import clients_classpath, java_bin, reference_classpath

PKG = "io.kcompat.compat"


def json_lines(text: str) -> list[dict[str, Any]]:
    """The JSON objects a program printed one a line (other lines, and a line cut
    short by a kill, passed over)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


@dataclass
class JavaRun:
    cmd: list[str]
    returncode: int
    stdout: str
    stderr: str

    def json_lines(self) -> list[dict[str, Any]]:
        return json_lines(self.stdout)

    def explain(self) -> str:
        return (f"$ {' '.join(self.cmd)}\nexit {self.returncode}\n--- stdout (tail) ---\n"
                f"{self.stdout[-3000:]}\n--- stderr (tail) ---\n{self.stderr[-3000:]}")


def java_cmd(classpath: str, main: str, *args: str, heap: str = "256m") -> list[str]:
    return [java_bin(), f"-Xmx{heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-Dlog4j2.rootLogger.level=WARN",
            "-cp", classpath, main, *args]


def run_java(classpath: str, main: str, *args: str, timeout: float = 120.0,
             heap: str = "256m") -> JavaRun:
    cmd = java_cmd(classpath, main, *args, heap=heap)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    return JavaRun(cmd, p.returncode, p.stdout, p.stderr)


@pytest.fixture(scope="session")
def clients_cp() -> str:
    return clients_classpath()


@pytest.fixture(scope="session")
def reference_cp() -> str:
    return reference_classpath()
