"""Apache Kafka itself, on this machine, for differential tests and benchmarks.

``KafkaReference`` runs one single-node KRaft Apache Kafka (combined
broker+controller on two free loopback ports) from jars resolved from Maven
Central by ``_jvm.reference_libs`` — no tarball download. It mirrors
``compat_tests._broker.Broker``: ``bootstrap``, ``start()`` (formats the storage on
first start, waits until the broker accepts Kafka requests), ``stop()`` (SIGTERM,
clean shutdown), ``kill()``, ``close()``, ``tail()``.

CLI (``make kafka-reference`` runs ``run``)::

    python -m compat_tests.java.kafka_reference fetch     # resolve jars only
    python -m compat_tests.java.kafka_reference run [--port N]   # until ^C or SIGTERM
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from compat_tests._broker import free_port, kill_process, terminate_process
from compat_tests.java._jvm import (
    KAFKA_VERSION,
    QUICK_JVM,
    java_bin,
    log4j2_properties,
    reference_classpath,
)

START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0

_LOG4J2 = log4j2_properties({"kafka.server": "INFO",
                              "kafka.server.KafkaRaftServer": "INFO"})


#: Broker settings of the session's reference (``compat_tests/conftest.py``),
#: which a kcompat broker compared with it on group configs mirrors: share groups
#: may set share.record.lock.duration.ms down to 1 s, and a share member is
#: assigned at its second heartbeat 1 s after joining instead of 5 s.
SHARE_TEST_OVERRIDES = {"group.share.min.record.lock.duration.ms": "1000",
                        "group.share.min.heartbeat.interval.ms": "1000",
                        "group.share.heartbeat.interval.ms": "1000"}


class ReferenceError_(RuntimeError):
    """The reference broker did not start or stop."""


def kafka_cluster_id() -> str:
    """A random cluster id as Kafka's ``Uuid.toString`` prints it (base64url, 22 chars)."""
    while True:
        s = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not s.startswith("-"):
            return s


def _api_versions_ok(host: str, port: int) -> bool:
    """True once the broker answers ApiVersions v0 with error code 0 (it is serving)."""
    req_body = b""
    header = struct.pack(">hhih", 18, 0, 1, len("ready")) + b"ready"
    frame = header + req_body
    try:
        with socket.create_connection((host, port), timeout=2.0) as s:
            s.sendall(struct.pack(">i", len(frame)) + frame)
            data = b""
            while len(data) < 10:
                chunk = s.recv(65536)
                if not chunk:
                    return False
                data += chunk
            (_size, _corr, err) = struct.unpack_from(">iih", data, 0)
            return err == 0
    except OSError:
        return False


#: ``quick``: the reference JVM compiles with C1 only and collects with the
#: serial collector — it serves sooner and spends about 40 % less CPU on a
#: start and a light load (3.9 against 6.5-6.8 s of CPU for a start, 20,000
#: records produced and consumed). The test suite asks for it (its conftest.py);
#: benchmarks, which compare with Kafka warm, keep the JVM's defaults
#: (G1, tiered compilation).
JVM_ENV = "KAFKA_REFERENCE_JVM"  # not KCOMPAT_*: a kcompat broker reads those as its config


def jvm_flags() -> tuple[str, ...]:
    """The reference JVM's collector and compiler flags (see ``JVM_ENV``)."""
    mode = os.environ.get(JVM_ENV, "")
    if mode not in ("", "quick"):
        raise ReferenceError_(f"{JVM_ENV}={mode!r}: expected 'quick' or nothing")
    return QUICK_JVM if mode == "quick" else ("-XX:+UseG1GC",)


class KafkaReference:
    """A single-node KRaft Apache Kafka broker in a JVM subprocess."""

    def __init__(
        self,
        workdir: Path,
        host: str = "127.0.0.1",
        port: int | None = None,
        overrides: dict[str, str] | None = None,
        version: str = KAFKA_VERSION,
        heap: str = "768m",
        *,
        node_id: int = 1,
        controller_port: int | None = None,
        voters: str | None = None,
        cluster_id: str | None = None,
        format_args: tuple[str, ...] = (),
    ) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.controller_port = controller_port if controller_port is not None else free_port(host)
        self.version = version
        self.heap = heap
        self.data_dir = self.workdir / "kraft-data"
        self.config_path = self.workdir / "server.properties"
        self.log_path = self.workdir / "kafka.log"
        self.overrides = dict(overrides or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.cluster_id = cluster_id or kafka_cluster_id()
        self.node_id = node_id
        # ``id@host:port`` of every controller; a single node is its own quorum.
        self.voters = voters or f"{node_id}@{host}:{self.controller_port}"
        self.last_returncode: int | None = None
        # more ``kafka-storage format`` options, e.g. ``("--add-scram",
        # "SCRAM-SHA-512=[name=alice,password=alice-secret]")``: SCRAM users
        # bootstrapped into the metadata log before the first start
        self.format_args = tuple(format_args)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def properties(self) -> dict[str, str]:
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.voters,
            "listeners": f"PLAINTEXT://{self.host}:{self.port},"
                         f"CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # Kafka deletes empty groups without offsets every 10 minutes by default,
            # as kcompat does: a comparison just after one broker's sweep differs
            # by when it ran (F38: a heartbeat GROUP_ID_NOT_FOUND against
            # UNKNOWN_MEMBER_ID, 20 minutes into a fuzz run). Once a day here and
            # on the fuzzer's kcompat brokers.
            "offsets.retention.check.interval.ms": "86400000",
        }
        props.update(self.overrides)
        return props

    def _java(self, main: str, *args: str, heap: str = "256m") -> list[str]:
        return [
            java_bin(), f"-Xmx{heap}", *jvm_flags(),
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            "-cp", reference_classpath(self.version), main, *args,
        ]

    def _format(self) -> None:
        self.config_path.write_text(
            "".join(f"{k}={v}\n" for k, v in self.properties().items()))
        (self.workdir / "log4j2.properties").write_text(_LOG4J2)
        if (self.data_dir / "meta.properties").exists():
            return
        out = subprocess.run(
            self._java("kafka.tools.StorageTool", "format", "-t", self.cluster_id,
                       "-c", str(self.config_path), "--ignore-formatted",
                       *self.format_args),
            capture_output=True, text=True, timeout=120,
        )
        if out.returncode != 0:
            raise ReferenceError_(f"kafka-storage format failed ({out.returncode}):\n"
                                  f"{out.stdout}\n{out.stderr}")

    def start(self, timeout: float = START_TIMEOUT_S) -> KafkaReference:
        self.launch()
        self.wait_ready(timeout)
        return self

    def launch(self) -> None:
        """Format (first time) and spawn the JVM without waiting for it to serve."""
        if self.running:
            raise ReferenceError_(f"reference Kafka on {self.bootstrap} is already running")
        self._format()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self._java("kafka.Kafka", str(self.config_path), heap=self.heap),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        """Until the broker answers ApiVersions (a cluster node: once its quorum is up)."""
        assert self.proc is not None, "launch() first"
        deadline = time.monotonic() + timeout
        while not _api_versions_ok(self.host, self.port):
            rc = self.proc.poll()
            if rc is not None:
                self.last_returncode = rc
                raise ReferenceError_(f"reference Kafka exited with {rc}\n{self.tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise ReferenceError_(f"reference Kafka not ready in {timeout:.0f}s\n{self.tail()}")
            time.sleep(0.2)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        if self.proc is None:
            raise ReferenceError_("reference Kafka was never started")
        if not terminate_process(self.proc, timeout):
            self.last_returncode = self.proc.returncode
            raise ReferenceError_(
                f"reference Kafka did not exit within {timeout:.0f}s of SIGTERM; killed it"
                f"\n{self.tail()}")
        self.last_returncode = self.proc.returncode
        return self.proc.returncode

    def kill(self) -> int:
        assert self.proc is not None
        kill_process(self.proc)
        self.last_returncode = self.proc.returncode
        return self.proc.returncode if self.proc.returncode is not None else -9

    def restart(self) -> KafkaReference:
        if self.running:
            self.stop()
        return self.start()

    def close(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(Exception):
            self.stop(timeout=20)
        if self.proc.poll() is None:
            self.kill()

    def tail(self, lines: int = 60) -> str:
        if not self.log_path.exists():
            return "(reference Kafka wrote nothing)"
        text = self.log_path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> KafkaReference:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<KafkaReference {self.version} {self.bootstrap} running={self.running}>"


class KafkaReferenceCluster:
    """``size`` KRaft Apache Kafka nodes, each a combined broker+controller
    (``KafkaReference`` with its own ports and data dir), one static quorum
    over the controller ports (``controller.quorum.voters``). Internal topics
    (offsets, transactions, share state) get replication factor ``size`` and
    min.insync.replicas 2; ``min.insync.replicas`` (broker default, so for
    every topic created without its own) is 2 as well. ``start()`` spawns all
    nodes, then waits until each serves; ``close()`` stops them all."""

    def __init__(self, workdir: Path, size: int = 3, host: str = "127.0.0.1",
                 heap: str = "512m", overrides: dict[str, str] | None = None,
                 version: str = KAFKA_VERSION, first_node: int = 1) -> None:
        self.workdir = Path(workdir)
        self.host = host
        controller_ports = [free_port(host) for _ in range(size)]
        voters = ",".join(f"{i + first_node}@{host}:{p}" for i, p in enumerate(controller_ports))
        rf, isr = str(size), str(min(2, size))
        props = {
            "offsets.topic.replication.factor": rf,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": isr,
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": isr,
            "default.replication.factor": rf,
            "min.insync.replicas": isr,
            **(overrides or {}),
        }
        cluster_id = kafka_cluster_id()
        self.nodes = [
            KafkaReference(self.workdir / f"node-{i + 1}", host=host, overrides=props,
                           version=version, heap=heap, node_id=i + first_node,
                           controller_port=controller_ports[i], voters=voters,
                           cluster_id=cluster_id)
            for i in range(size)
        ]

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    @property
    def pids(self) -> list[int]:
        return [n.proc.pid for n in self.nodes if n.proc is not None]

    @property
    def running(self) -> bool:
        return all(n.running for n in self.nodes)

    def start(self, timeout: float = START_TIMEOUT_S) -> KafkaReferenceCluster:
        try:
            for n in self.nodes:
                n.launch()
            deadline = time.monotonic() + timeout
            for n in self.nodes:
                n.wait_ready(max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.close()
            raise
        return self

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> list[int]:
        for n in self.nodes:  # SIGTERM all first: a lone survivor waits for its quorum
            if n.running:
                assert n.proc is not None
                n.proc.send_signal(signal.SIGTERM)
        return [n.stop(timeout) for n in self.nodes]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop(timeout=30)
        for n in self.nodes:
            n.close()

    def __enter__(self) -> KafkaReferenceCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<KafkaReferenceCluster {self.bootstrap} running={self.running}>"


class _Stop(Exception):
    """SIGTERM or SIGHUP reached ``run``: stop the JVM as ^C does."""


def _raise_stop(signum: int, _frame: object) -> None:
    raise _Stop(signal.Signals(signum).name)


def _run(port: int | None, workdir: Path | None) -> int:
    """Run a reference broker until ^C, SIGTERM or SIGHUP, then stop its JVM (a
    clean shutdown) and remove the work dir if it was a temp dir made here."""
    own_dir = workdir is None
    workdir = workdir or Path(tempfile.mkdtemp(prefix="kafka-reference-"))
    # the JVM runs in its own session, so a signal to this process alone would
    # orphan it: turn SIGTERM and SIGHUP into the same unwinding as ^C
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_stop)
    ref = KafkaReference(workdir, port=port)
    try:
        t0 = time.monotonic()
        ref.start()
        print(f"Apache Kafka {ref.version} ready on {ref.bootstrap} in "
              f"{time.monotonic() - t0:.1f}s (dir {workdir}); ^C or SIGTERM stops it", flush=True)
        while ref.running:
            time.sleep(0.5)
    except (KeyboardInterrupt, _Stop):
        pass
    finally:
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(signum, signal.SIG_IGN)  # a second signal must not cut the stop short
        t1 = time.monotonic()
        if ref.proc is not None:
            rc = ref.stop() if ref.running else ref.proc.returncode
            print(f"stopped (exit {rc}) in {time.monotonic() - t1:.1f}s", flush=True)
        if own_dir:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m compat_tests.java.kafka_reference")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fetch", help="resolve the Kafka jars into the cache and exit")
    run = sub.add_parser("run", help="run a reference broker until ^C or SIGTERM")
    run.add_argument("--port", type=int, default=None)
    run.add_argument("--dir", type=Path, default=None,
                     help="work dir, kept (default: a temp dir, removed at exit)")
    args = ap.parse_args(argv)
    if args.cmd == "fetch":
        print(reference_classpath())
        return 0
    return _run(args.port, args.dir)


if __name__ == "__main__":
    sys.exit(main())
