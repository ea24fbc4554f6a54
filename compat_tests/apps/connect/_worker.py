"""An unmodified Apache Kafka Connect distributed worker in its own JVM.

The worker's classpath comes from Maven Central: ``pom.xml`` beside this file lists
``connect-runtime`` 4.4.0 and the FileStream connectors (``connect-file``), resolved
once with ``mvn dependency:copy-dependencies`` into ``$COMPAT_CACHE`` through the
same locked, hash-keyed cache as the reference broker (``compat_tests/java/_jvm.py``).

``ConnectWorker`` writes a worker properties file and runs
``org.apache.kafka.connect.cli.ConnectDistributed`` on it: ``start()`` waits until
the REST API's ``/health`` answers 200 (the worker joined its group and read its
config topic), ``stop()`` sends SIGTERM (Connect's shutdown hook stops tasks,
commits their offsets and leaves the group), ``kill()`` sends SIGKILL. The REST
helpers (``put_connector``, ``status``, ...) talk JSON to ``/connectors``.

``python -m compat_tests.apps.connect._worker`` resolves the classpath only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from compat_tests._broker import free_port, kill_process, terminate_process
from compat_tests.java._jvm import (
    KAFKA_VERSION,
    JvmSetupError,
    copied_dependencies,
    java_bin,
    log4j2_properties,
)

HERE = Path(__file__).resolve().parent
POM = HERE / "pom.xml"
BRIDGE = HERE / "bridge" / "org" / "apache" / "kafka" / "common" / "utils" / "AppInfoParser.java"
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0

_LOG4J2 = log4j2_properties({"org.apache.kafka.connect": "INFO", "org.reflections": "ERROR"})


def connect_libs(version: str = KAFKA_VERSION) -> Path:
    """Directory with every runtime jar of the worker and its connectors (resolved once)."""
    key = hashlib.sha256(version.encode() + POM.read_bytes()
                         + BRIDGE.read_bytes()).hexdigest()[:12]
    return copied_dependencies("connect", version, key, HERE,
                               (f"connect-runtime-{version}.jar", "connect-file-*.jar"),
                               lock="connect", finish=_build_bridge)


def _build_bridge(libs: Path, build: Path) -> None:
    """``bridge/``'s one class (see its comment) compiled (in ``build``) into ``libs``."""
    classes = build / "bridge-classes"
    shutil.rmtree(classes, ignore_errors=True)
    javac = Path(java_bin()).resolve().parent / "javac"
    jar = javac.parent / "jar"
    for tool, args in ((javac, ["--release", "17", "-cp", str(libs / "*"), "-d", str(classes),
                                str(BRIDGE)]),
                       (jar, ["cf", str(libs / "kcompat-connect-file-bridge.jar"),
                              "-C", str(classes), "."])):
        out = subprocess.run([str(tool), *args], capture_output=True, text=True)
        if out.returncode != 0:
            raise JvmSetupError(f"{tool} failed: {out.stdout}{out.stderr}")


class ConnectError(RuntimeError):
    """The worker did not start or stop, or its REST API refused a request."""


class ConnectWorker:
    """One Connect distributed worker process; a new process for every ``start()``."""

    def __init__(self, workdir: Path, bootstrap: str, group_id: str, replication: int,
                 overrides: dict[str, str] | None = None, heap: str = "512m") -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.bootstrap = bootstrap
        self.group_id = group_id
        self.rest_port = free_port()
        self.replication = replication
        self.heap = heap
        self.config_path = self.workdir / "worker.properties"
        self.log_path = self.workdir / "worker.log"
        self.overrides = dict(overrides or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def properties(self) -> dict[str, str]:
        rf = str(self.replication)
        props = {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group_id,
            "listeners": f"http://127.0.0.1:{self.rest_port}",
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "config.storage.topic": f"{self.group_id}-configs",
            "offset.storage.topic": f"{self.group_id}-offsets",
            "status.storage.topic": f"{self.group_id}-status",
            "config.storage.replication.factor": rf,
            "offset.storage.replication.factor": rf,
            "status.storage.replication.factor": rf,
            # the connectors are on the classpath with ServiceLoader manifests
            "plugin.discovery": "service_load",
        }
        props.update(self.overrides)
        return props

    def command(self) -> list[str]:
        return [java_bin(), f"-Xmx{self.heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
                "-cp", str(connect_libs() / "*"),
                "org.apache.kafka.connect.cli.ConnectDistributed", str(self.config_path)]

    def start(self, timeout: float = START_TIMEOUT_S) -> ConnectWorker:
        self.launch()
        return self.wait_healthy(timeout)

    def launch(self) -> None:
        """Spawn the JVM without waiting (workers of one group start side by side)."""
        if self.running:
            raise ConnectError(f"worker on {self.url} is already running")
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        (self.workdir / "log4j2.properties").write_text(_LOG4J2)
        cmd = self.command()
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts + 1}: {' '.join(cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self.starts += 1

    def wait_healthy(self, timeout: float = START_TIMEOUT_S) -> ConnectWorker:
        assert self.proc is not None, "launch() first"
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(ConnectError):
                if self.request("GET", "/health", timeout=2.0, ok=(200,))[0] == 200:
                    return self
            if self.proc.poll() is not None:
                raise ConnectError(f"worker exited with {self.proc.returncode}\n{self.tail()}")
            if time.monotonic() > deadline:
                kill_process(self.proc)
                raise ConnectError(f"worker not healthy within {timeout:.0f}s\n{self.tail()}")
            time.sleep(0.25)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM (a graceful shutdown) and wait; raises if it had to be killed."""
        assert self.proc is not None, "start() first"
        if not terminate_process(self.proc, timeout):
            raise ConnectError(f"worker did not exit within {timeout:.0f}s of SIGTERM; "
                               f"killed it\n{self.tail()}")
        return self.proc.returncode

    def kill(self) -> None:
        assert self.proc is not None, "start() first"
        kill_process(self.proc)

    def close(self) -> None:
        if self.running:
            assert self.proc is not None
            if not terminate_process(self.proc, 20.0):
                kill_process(self.proc)

    # -- REST ------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None, timeout: float = 30.0,
                ok: tuple[int, ...] = (200, 201, 202, 204)) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json",
                                              "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        except OSError as e:
            raise ConnectError(f"{method} {path}: {e}") from e
        payload = json.loads(raw) if raw.strip() else None
        if status not in ok:
            raise ConnectError(f"{method} {path} -> {status}: {payload}")
        return status, payload

    def put_connector(self, name: str, config: dict[str, str]) -> Any:
        """Create or update a connector (retried while the worker's group rebalances)."""
        deadline = time.monotonic() + 60.0
        while True:
            try:
                return self.request("PUT", f"/connectors/{name}/config", config)[1]
            except ConnectError as e:
                # 409: a rebalance is in progress / the leader is not known yet
                if "-> 409" not in str(e) or time.monotonic() > deadline:
                    raise
            time.sleep(0.5)

    def status(self, name: str) -> Any:
        return self.request("GET", f"/connectors/{name}/status")[1]

    def wait_running(self, name: str, tasks: int = 1, timeout: float = 60.0) -> Any:
        """Until the connector and its ``tasks`` tasks are RUNNING (a FAILED one raises)."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            with contextlib.suppress(ConnectError):
                last = self.status(name)
                states = [last["connector"]["state"], *(t["state"] for t in last["tasks"])]
                if "FAILED" in states:
                    raise AssertionError(f"connector {name} failed: {json.dumps(last)}")
                if len(last["tasks"]) == tasks and set(states) == {"RUNNING"}:
                    return last
            time.sleep(0.25)
        raise AssertionError(f"connector {name} not running in {timeout:.0f}s: {last}"
                             f"\n{self.tail()}")

    def wait_state(self, name: str, state: str, timeout: float = 60.0) -> Any:
        """Until the connector is in ``state`` (RUNNING, PAUSED, STOPPED...)."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            with contextlib.suppress(ConnectError):
                last = self.status(name)
                if last["connector"]["state"] == state:
                    return last
            time.sleep(0.25)
        raise AssertionError(f"connector {name} not {state} in {timeout:.0f}s: {last}")

    def tail(self, lines: int = 80) -> str:
        if not self.log_path.exists():
            return "(the worker wrote nothing)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


if __name__ == "__main__":
    print(connect_libs())
