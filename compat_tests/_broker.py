"""Run a real kcompat broker as a separate process for the compatibility suites.

The broker is always a subprocess (``python -m kcompat broker``); the clients under
test talk to it over TCP exactly as they would talk to Apache Kafka.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

REPO_ROOT = Path(__file__).resolve().parent.parent
READY_MARKER = b"kcompat broker ready"
#: logged once a broker of a cluster first serves clients (``lifecycle.heartbeat``)
SERVING_MARKER = b"serving clients"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0


def kill_process(proc: subprocess.Popen[bytes]) -> int | None:
    """SIGKILL (if still running) and reap; the exit code."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10.0)
    return proc.returncode


def terminate_process(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """SIGTERM and wait; False (after a SIGKILL) if it did not exit in time."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_process(proc)
            return False
    return True


class BrokerError(RuntimeError):
    """The broker process did not start or stop as the CLI contract says."""


#: ports tests hand out: below the kernel's ephemeral range (32768-60999 by default),
#: so no client connection's local port takes one between free_port() and the
#: broker's bind; each pytest-xdist worker has its own slice, so two workers never
#: hand out the same port
PORT_BASE, PORT_SLICE = 20000, 3000
_next_port: list[int] = []


def _slice() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    return PORT_BASE + (index % 4) * PORT_SLICE


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on, from this process's slice, handed out in turn
    (not again until the slice wraps): the kernel's own pick (bind to 0) may give
    the same free port to two binds in a row, or to a client connection, and two
    brokers of one cluster were once given the same port."""
    base = _slice()
    if not _next_port:
        _next_port.append(base + (os.getpid() * 7919) % PORT_SLICE)
    for _ in range(PORT_SLICE):
        port = _next_port[0]
        _next_port[0] = base + (port + 1 - base) % PORT_SLICE
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue  # in use (or lingering): the next one
        return port
    raise RuntimeError(f"no free port in {base}..{base + PORT_SLICE - 1}")


def unique_topic(prefix: str = "t") -> str:
    """A topic name that no other test uses: legal Kafka characters only."""
    clean = re.sub(r"[^a-zA-Z0-9._-]+", "-", prefix).strip("-.")[:80] or "t"
    return f"{clean}-{uuid.uuid4().hex[:10]}"


class Broker:
    """One kcompat broker process with its own data dir and captured stderr.

    ``start()`` waits for the ``kcompat broker ready`` line on stderr (30 s),
    ``stop()`` sends SIGTERM and waits, ``kill()`` sends SIGKILL, ``restart()``
    brings it back on the same port with the same data dir.
    """

    def __init__(
        self,
        workdir: Path,
        host: str = "127.0.0.1",
        port: int | None = None,
        extra_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.data_dir = self.workdir / "data"
        self.log_path = self.workdir / "broker.stderr.log"
        self.stdout_path = self.workdir / "broker.stdout.log"
        self.extra_args = tuple(extra_args)
        self.env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.last_returncode: int | None = None
        self._ready_offset = 0

    # -- properties -------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "kcompat", "broker",
            "--host", self.host,
            "--port", str(self.port),
            "--data-dir", str(self.data_dir),
            *self.extra_args,
        ]

    # -- lifecycle --------------------------------------------------------------

    def start(self, timeout: float = START_TIMEOUT_S, wait: bool = True) -> Broker:
        """Start the process and (``wait``) return once it is ready; else call
        ``wait_ready`` later (a cluster starts its brokers side by side)."""
        if self.running:
            raise BrokerError(f"broker on {self.bootstrap} is already running (pid {self.pid})")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.update(self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        start_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as err, open(self.stdout_path, "ab") as out:
            banner = f"\n===== compat_tests: start #{self.starts + 1}: {' '.join(self.command())}\n"
            err.write(banner.encode())
            err.flush()
            start_offset += len(banner.encode())
            self.proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=str(REPO_ROOT),
                env=env,
                start_new_session=True,  # a ^C on pytest must not reach the broker first
            )
        self.starts += 1
        self._ready_offset = start_offset
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> Broker:
        """Until the process started last printed its ready line and listens."""
        self._wait_ready(self._ready_offset, timeout)
        return self

    def wait_serving(self, timeout: float = START_TIMEOUT_S) -> Broker:
        """Until the process started last serves clients: its listener opens
        first, and a broker of a cluster then holds its answers until it has
        caught up and registered (as a Kafka broker processes no request
        before it is unfenced). A client that bootstraps from it meanwhile
        waits; librdkafka 2.16 can then fail a ``get_watermark_offsets``
        with "Unknown partition" as it swaps its bootstrap connection."""
        self._wait_ready(self._ready_offset, timeout, SERVING_MARKER)
        return self

    def _wait_ready(self, start_offset: int, timeout: float,
                    marker: bytes = READY_MARKER) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while True:
            with open(self.log_path, "rb") as f:
                f.seek(start_offset)
                if marker in f.read():
                    break
            rc = self.proc.poll()
            if rc is not None:
                self.last_returncode = rc
                raise BrokerError(
                    f"broker exited with code {rc} before printing {marker.decode()!r}"
                    f"\n--- stderr tail ---\n{self.tail()}"
                )
            if time.monotonic() > deadline:
                self._force_kill()
                raise BrokerError(
                    f"broker did not print {marker.decode()!r} within {timeout:.0f}s"
                    f"\n--- stderr tail ---\n{self.tail()}"
                )
            time.sleep(0.05)
        # The contract says the line appears once connections are accepted; check it.
        connect_deadline = time.monotonic() + 5.0
        while True:
            try:
                with socket.create_connection((self.host, self.port), timeout=1.0):
                    return
            except OSError as exc:
                if time.monotonic() > connect_deadline:
                    self._force_kill()  # not left running: it holds its ports
                    raise BrokerError(
                        f"broker printed the ready line but {self.bootstrap} refuses TCP: {exc}"
                        f"\n--- stderr tail ---\n{self.tail()}"
                    ) from exc
                time.sleep(0.05)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait. Returns the exit code; raises if it does not exit in time."""
        if self.proc is None:
            raise BrokerError("broker was never started")
        if not terminate_process(self.proc, timeout):
            raise BrokerError(
                f"broker (pid {self.proc.pid}) did not exit within {timeout:.0f}s of SIGTERM;"
                f" killed it\n--- stderr tail ---\n{self.tail()}"
            )
        self.last_returncode = self.proc.returncode
        return self.proc.returncode

    def kill(self) -> int:
        """SIGKILL (kill -9) and reap."""
        if self.proc is None:
            raise BrokerError("broker was never started")
        self._force_kill()
        self.last_returncode = self.proc.returncode
        return self.proc.returncode

    def restart(self, timeout: float = START_TIMEOUT_S) -> Broker:
        """Same port, same data dir. Stops (SIGTERM) first if still running."""
        if self.running:
            self.stop()
        return self.start(timeout=timeout)

    def close(self) -> None:
        """Teardown: SIGTERM, and SIGKILL if that does not work. Never raises."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(Exception):
            self.stop(timeout=10.0)
        if self.proc.poll() is None:
            self._force_kill()

    def _force_kill(self) -> None:
        assert self.proc is not None
        kill_process(self.proc)

    # -- diagnostics ------------------------------------------------------------

    def stored_codecs(self, topic: str, partition: int) -> list[int]:
        """Compression codec (attributes & 7) of every RecordBatch in the partition's
        segment files: kcompat keeps Kafka's own layout (``<topic>-<p>/*.log`` of
        RecordBatch v2) under the data dir. 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        pdir = self.data_dir / f"{topic}-{partition}"
        logs = sorted(pdir.glob("*.log"))
        if not logs:
            raise AssertionError(f"no segment files in {pdir} (data dir has "
                                 f"{sorted(p.name for p in self.data_dir.iterdir())[:20]})")
        codecs: list[int] = []
        for path in logs:
            data = path.read_bytes()
            pos = 0
            while pos + 61 <= len(data):  # 61 = RecordBatch v2 header size
                (batch_len,) = struct.unpack_from(">i", data, pos + 8)
                magic = data[pos + 16]
                if batch_len <= 0 or magic != 2:
                    break  # preallocated/zero tail or not a batch
                (attrs,) = struct.unpack_from(">h", data, pos + 21)
                codecs.append(attrs & 7)
                pos += 12 + batch_len
        return codecs

    def log_size(self) -> int:
        return self.log_path.stat().st_size if self.log_path.exists() else 0

    @property
    def admin_url(self) -> str:
        """``http://host:port`` of its admin port (started with ``--admin-port 0``
        or a port of its own), from the line the process started last logged."""
        with open(self.log_path, "rb") as f:
            f.seek(self._ready_offset)
            found = re.findall(rb"admin HTTP on (https?://[0-9.]+:[0-9]+)", f.read())
        if not found:
            raise BrokerError(f"broker on {self.bootstrap} logged no admin HTTP port")
        return found[-1].decode()

    def tail(self, lines: int = 60) -> str:
        parts = []
        for path in (self.log_path, self.stdout_path):
            if not path.exists() or path.stat().st_size == 0:
                continue
            with open(path, "rb") as f:
                f.seek(max(0, path.stat().st_size - 64 * 1024))
                text = f.read().decode("utf-8", "replace")
            chunk = "\n".join(text.splitlines()[-lines:])
            parts.append(f"[{path.name}]\n{chunk}")
        return "\n".join(parts) if parts else "(broker wrote nothing)"

    def __repr__(self) -> str:
        state = "running" if self.running else f"exited({self.last_returncode})"
        return f"<Broker {self.bootstrap} {state} data={self.data_dir}>"


B = TypeVar("B", bound=Broker)


def running(broker: B) -> Iterator[B]:
    """Start ``broker``, yield it, close it (SIGTERM, then SIGKILL) afterwards:
    the body of a fixture that owns one broker,
    ``yield from running(Broker(tmp_path_factory.mktemp("name"), extra_args=...))``."""
    broker.start()
    try:
        yield broker
    finally:
        broker.close()


def brokers_in(values: list[object]) -> list[Broker]:
    """The broker processes among a test's fixture values: a ``Broker``, or
    those of a ``Deployment`` (a tuple) or a ``Cluster`` (a dict by node id),
    each once."""
    seen: list[Broker] = []
    for value in values:
        found = getattr(value, "brokers", None)
        members = (list(found.values()) if isinstance(found, dict)
                   else found if isinstance(found, (tuple, list)) else [value])
        for b in members:
            if isinstance(b, Broker) and all(b is not s for s in seen):
                seen.append(b)
    return seen
