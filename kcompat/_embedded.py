"""``with kcompat.embedded() as bootstrap:`` — a throwaway Kafka for any test.

Theory of operation
-------------------
``embedded`` starts one broker, or a cluster of ``brokers`` brokers, as child
processes (``python -m kcompat broker``, the same command an operator runs) in
a fresh temporary directory, yields once every broker serves, and on exit
stops them and deletes the directory. It yields an ``EmbeddedKafka``: the
bootstrap string itself (``"127.0.0.1:40123"``, or three addresses joined by
commas), so it goes straight into any client's configuration, carrying topic
helpers that talk to the brokers through kafka-python as any client would.

Invariants:
- This module imports the standard library only (kafka-python inside the
  topic helpers): a pytest plugin imports it at every pytest start, so it must
  cost nothing there, and it never imports the broker (a contract in
  pyproject.toml says so).
- A single broker binds port 0 and reports the port it got on its ready line
  (``kcompat broker ready on HOST:PORT``); the brokers of a cluster must know
  each other's ports before they start (``controller.quorum.voters``), so those
  are picked free ports.
- Ready means usable: a single broker prints its ready line once it accepts
  connections with its controller started; a cluster is ready once the
  controller counts every broker as registered and unfenced, i.e. it accepts a
  validate-only CreateTopics of replication factor ``brokers``.
- The child's environment has no ``KCOMPAT_*`` variables: they override every
  flag (docs/guide.md, "Configuration"), and an embedded broker's settings are
  what its caller passed in ``config``.
- Each broker's log goes to ``<dir>/broker-N/broker.log`` (a file, never a
  pipe that could fill and block the broker); a broker that fails to start
  raises ``EmbeddedError`` with the log's tail.
- A broker outlives no test run: on Linux each child asks the kernel for a
  SIGTERM when the thread that started it ends (``PR_SET_PDEATHSIG``), so a
  test run killed -9 or by a CI timeout leaves no broker behind (only its
  temporary directory). Start brokers from a thread that lives as long as
  they do (a test session's main thread does).
- Teardown: SIGTERM and wait (SIGKILL after ``STOP_TIMEOUT_S``). A cluster whose
  data is thrown away anyway is SIGKILLed: a graceful stop of three brokers
  hands leaderships around for seconds.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

READY_LINE = re.compile(rb"kcompat broker ready on (\S+):(\d+)")
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
POLL_S = 0.02
PR_SET_PDEATHSIG = 1  # linux/prctl.h

#: Settings an embedded broker starts with unless ``config`` says otherwise:
#: what test suites want (testcontainers' Kafka sets the first one too).
TEST_DEFAULTS: dict[str, str] = {
    "group.initial.rebalance.delay.ms": "0",  # a lone consumer joins at once
    "offsets.topic.num.partitions": "10",     # the first group creates it; 50 is for production
    "transaction.state.log.num.partitions": "10",
}


class EmbeddedError(RuntimeError):
    """An embedded broker did not start (its log's tail is in the message)."""


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCOMPAT_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _die_with_parent(parent_pid: int) -> None:
    """In the child between fork and exec: SIGTERM me when my parent dies (Linux)."""
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent_pid:  # it died before the prctl
        os._exit(1)


class _BrokerProcess:
    """One ``python -m kcompat broker`` child with its own data dir and log file."""

    def __init__(self, workdir: Path, args: list[str]) -> None:
        self.workdir = workdir
        self.log_path = workdir / "broker.log"
        self.address = ""
        workdir.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "kcompat", "broker",
                   "--data-dir", str(workdir / "data"), "--admin-port", "-1", *args]
        parent_pid = os.getpid()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, env=_child_env(),
                                         start_new_session=True,  # a ^C reaches the test first
                                         preexec_fn=lambda: _die_with_parent(parent_pid))

    def wait_ready(self, deadline: float) -> str:
        """``HOST:PORT`` from the broker's ready line, once it printed one."""
        while True:
            found = READY_LINE.search(self.log_path.read_bytes())
            if found:
                self.address = f"{found[1].decode()}:{found[2].decode()}"
                return self.address
            if self.proc.poll() is not None:
                raise EmbeddedError(f"kcompat broker exited with code {self.proc.returncode}"
                                    f" before it was ready:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise EmbeddedError(f"kcompat broker not ready in {START_TIMEOUT_S:.0f} s:"
                                    f"\n{self.tail()}")
            time.sleep(POLL_S)

    def signal(self, signum: signal.Signals) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signum)

    def reap(self, timeout_s: float) -> None:
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.proc.wait(timeout=10.0)

    def tail(self, lines: int = 40) -> str:
        text = self.log_path.read_bytes().decode("utf-8", "replace")
        return "\n".join(text.splitlines()[-lines:]) or "(the broker wrote nothing)"


#: what a throwaway broker is set to unless its caller says otherwise: no
#: codec warm-up (each API version loads on first use; the warm-up is about
#: 2 s of CPU that a broker living for one test never gets back)
EMBEDDED_DEFAULTS: dict[str, Any] = {"kcompat.codec.warm": False}


def _broker_args(node_id: int, size: int, ports: list[int], host: str,
                 config: Mapping[str, Any]) -> list[str]:
    if size == 1:
        args = ["--host", host, "--port", "0"]
    else:
        voters = ",".join(f"{i + 1}@{host}:{p}" for i, p in enumerate(ports))
        args = ["--host", host, "--port", str(ports[node_id - 1]), "--node-id", str(node_id),
                "--set", f"controller.quorum.voters={voters}",
                "--set", f"default.replication.factor={size}"]
    for key, value in {**EMBEDDED_DEFAULTS, **config}.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        args += ["--set", f"{key}={text}"]
    return args


class EmbeddedKafka(str):
    """The bootstrap string of running embedded brokers, with topic helpers.

    ``str(self)`` is ``HOST:PORT[,HOST:PORT...]``: pass it as kafka-python's
    ``bootstrap_servers`` or librdkafka's ``bootstrap.servers`` as it is.
    """

    data_dir: Path
    addresses: list[str]
    _processes: list[_BrokerProcess]

    def __new__(cls, processes: list[_BrokerProcess], data_dir: Path) -> EmbeddedKafka:
        self = super().__new__(cls, ",".join(p.address for p in processes))
        self.data_dir = data_dir
        self.addresses = [p.address for p in processes]
        self._processes = processes
        return self

    @property
    def bootstrap(self) -> str:
        """The bootstrap servers as a plain ``str``."""
        return str.__str__(self)

    @property
    def broker_count(self) -> int:
        return len(self._processes)

    @property
    def log_paths(self) -> list[Path]:
        """Each broker's log file (``<dir>/broker-N/broker.log``), in broker order."""
        return [p.log_path for p in self._processes]

    @contextlib.contextmanager
    def admin(self, timeout_ms: int = 10_000) -> Iterator[Any]:
        """A kafka-python ``KafkaAdminClient`` on these brokers, closed on exit."""
        import logging

        from kafka import KafkaAdminClient

        logging.getLogger("kafka").setLevel(logging.ERROR)  # retries are expected here
        client = KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id="kcompat-embedded",
                                  request_timeout_ms=timeout_ms)
        try:
            yield client
        finally:
            client.close()

    def create_topic(self, name: str | None = None, partitions: int = -1,
                     replication_factor: int = -1, config: Mapping[str, Any] | None = None,
                     ) -> str:
        """Create a topic (a fresh unique name if ``name`` is None) and return
        its name once every partition has a leader; ``-1`` means the broker's
        default (``num.partitions``, ``default.replication.factor``)."""
        name = name or f"topic-{uuid.uuid4().hex[:12]}"
        spec = {name: {"num_partitions": partitions, "replication_factor": replication_factor,
                       "configs": {k: str(v) for k, v in (config or {}).items()}}}
        with self.admin() as admin:
            admin.create_topics(spec, timeout_ms=20_000, wait_for_metadata=True)
        return name

    def delete_topic(self, name: str) -> None:
        with self.admin() as admin:
            admin.delete_topics([name], timeout_ms=20_000)

    def list_topics(self) -> set[str]:
        """Topic names, internal ones (``__consumer_offsets``...) left out."""
        with self.admin() as admin:
            return {t for t in admin.list_topics() if not t.startswith("__")}

    def stop(self, graceful: bool = True) -> None:
        """Stop every broker: SIGTERM and wait, or (``graceful=False``) SIGKILL."""
        signum = signal.SIGTERM if graceful else signal.SIGKILL
        for p in self._processes:
            p.signal(signum)
        for p in self._processes:
            p.reap(STOP_TIMEOUT_S)

    def __repr__(self) -> str:
        return f"<EmbeddedKafka {self.bootstrap} data={self.data_dir}>"


def _wait_registered(cluster: EmbeddedKafka, deadline: float) -> None:
    """Until the controller accepts a validate-only topic of replication
    factor ``broker_count``: every broker registered and unfenced."""
    spec = {"kcompat-embedded-ready-probe": {"num_partitions": 1,
                                             "replication_factor": cluster.broker_count}}
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            with cluster.admin(timeout_ms=2000) as admin:
                admin.create_topics(spec, timeout_ms=2000, validate_only=True)
                return
        except Exception as exc:  # noqa: BLE001 - not ready yet: ask again until the deadline
            last = f"{type(exc).__name__}: {exc}"
        time.sleep(0.1)
    raise EmbeddedError(f"not all {cluster.broker_count} brokers registered in "
                        f"{START_TIMEOUT_S:.0f} s; the controller last said: {last}")


def start(brokers: int = 1, partitions: int | None = None,
          config: Mapping[str, Any] | None = None, data_dir: str | Path | None = None,
          host: str = "127.0.0.1") -> EmbeddedKafka:
    """Start the brokers (see ``embedded``); the caller must ``stop()`` them."""
    if brokers < 1:
        raise ValueError(f"brokers must be at least 1, got {brokers}")
    root = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="kcompat-"))
    settings: dict[str, Any] = {**TEST_DEFAULTS, **(config or {})}
    if partitions is not None:
        settings["num.partitions"] = partitions
    ports = [_free_port(host) for _ in range(brokers)] if brokers > 1 else []
    processes: list[_BrokerProcess] = []
    try:
        for node_id in range(1, brokers + 1):
            args = _broker_args(node_id, brokers, ports, host, settings)
            processes.append(_BrokerProcess(root / f"broker-{node_id}", args))
        deadline = time.monotonic() + START_TIMEOUT_S
        for p in processes:
            p.wait_ready(deadline)
        cluster = EmbeddedKafka(processes, root)
        if brokers > 1:
            _wait_registered(cluster, deadline)
        return cluster
    except BaseException:
        for p in processes:
            p.signal(signal.SIGKILL)
            p.reap(STOP_TIMEOUT_S)
        if data_dir is None:
            shutil.rmtree(root, ignore_errors=True)
        raise


@contextlib.contextmanager
def embedded(brokers: int = 1, partitions: int | None = None,
             config: Mapping[str, Any] | None = None, data_dir: str | Path | None = None,
             host: str = "127.0.0.1") -> Iterator[EmbeddedKafka]:
    """Run kcompat brokers for the ``with`` block and yield their bootstrap string.

    ``brokers``: 1 (one node) or more (a Raft cluster; topics default to
    replication factor ``brokers``). ``partitions``: ``num.partitions`` for
    topics created without a count (auto-created ones too). ``config``: any
    broker setting by Kafka's name, e.g. ``{"auto.create.topics.enable": False}``.
    ``data_dir``: keep the data there (stopped gracefully, never deleted);
    by default a temporary directory, deleted on exit.
    """
    cluster = start(brokers, partitions, config, data_dir, host)
    try:
        yield cluster
    finally:
        cluster.stop(graceful=data_dir is not None or brokers == 1)
        if data_dir is None:
            shutil.rmtree(cluster.data_dir, ignore_errors=True)
