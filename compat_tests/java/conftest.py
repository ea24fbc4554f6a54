"""Fixtures for the Java suites: cached classpaths, JVM program runner, reference Kafka.

The jars come from Maven Central through ``mvn`` (``make java-deps`` resolves them
before pytest; the fixtures resolve them too if that was skipped). A missing ``mvn``
or ``java`` is an error, not a skip: ``make tools`` installs both.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from compat_tests.java._jvm import (
    CLIENT_JVM_OPTIONS,
    build_class_archive,
    class_archive,
    clients_classpath,
    java_bin,
    reference_classpath,
)

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


class JsonLineProcess:
    """A client program in its own process whose JSON stdout lines (``{...}``)
    a thread puts on a queue as they come; its stderr is kept for failures."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.stderr = ""
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=self._pump_err, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.events.put(json.loads(line))

    def _pump_err(self) -> None:
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()

    def new_events(self) -> Iterator[dict[str, Any]]:
        """The events that arrived since the last call."""
        while True:
            try:
                yield self.events.get_nowait()
            except queue.Empty:
                return


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
    archive = class_archive(classpath)  # the classes mapped, not parsed: _jvm.py
    shared = [f"-XX:SharedArchiveFile={archive}"] if archive.exists() else []
    return [java_bin(), f"-Xmx{heap}", *CLIENT_JVM_OPTIONS, *shared,
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
    classpath = clients_classpath()
    build_class_archive(classpath)  # written once (make java-deps does it ahead)
    return classpath


@pytest.fixture(scope="session")
def reference_cp() -> str:
    return reference_classpath()
