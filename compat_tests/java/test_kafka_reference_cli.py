"""``python -m compat_tests.java.kafka_reference run`` stops its Kafka JVM (in its
own session, so no signal of ours reaches it) and removes its temp dir on
SIGTERM, as on ^C. The signal is sent once the broker's JVM is running,
without waiting for it to serve: the same handler unwinds both waits, and
this keeps the test to about 1 s."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from compat_tests.java._jvm import reference_classpath

ROOT = Path(__file__).resolve().parents[2]


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:  # fields: state, ppid, ...
            out.append(int(stat.parent.name))
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_sigterm_stops_the_reference_jvm_and_removes_its_dir(tmp_path: Path) -> None:
    reference_classpath()  # resolved before the clock starts
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "compat_tests.java.kafka_reference", "run"],
                            cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    jvm = None
    try:
        deadline = time.monotonic() + 60
        while jvm is None and time.monotonic() < deadline and proc.poll() is None:
            jvm = next((c for c in _children(proc.pid) if "kafka.Kafka" in _cmdline(c)), None)
            time.sleep(0.05)
        assert jvm is not None, "no Kafka JVM started"
        assert list(tmp_path.glob("kafka-reference-*"))
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=40)
        assert proc.returncode == 0, out
        assert "stopped (exit" in out, out
        assert not _alive(jvm), f"the Kafka JVM {jvm} outlived SIGTERM"
        assert not list(tmp_path.glob("kafka-reference-*")), "its temp dir was left behind"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if jvm is not None and _alive(jvm) and "kafka.Kafka" in _cmdline(jvm):
            os.kill(jvm, signal.SIGKILL)


def test_the_suites_reference_jvm_is_quick_and_a_benchmarks_keeps_the_defaults(
        tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The suite (conftest.py) asks for C1 and the serial collector; without
    the variable, as in a benchmark, the JVM keeps G1 and tiered compilation;
    a value it does not know is an error, not a silent default."""
    from compat_tests.java.kafka_reference import JVM_ENV, KafkaReference, ReferenceError_

    ref = KafkaReference(tmp_path)
    assert os.environ.get(JVM_ENV) == "quick"
    quick = ref._java("kafka.Kafka", "server.properties")
    assert "-XX:TieredStopAtLevel=1" in quick and "-XX:+UseSerialGC" in quick
    assert "-XX:+UseG1GC" not in quick
    monkeypatch.delenv(JVM_ENV)
    full = ref._java("kafka.Kafka", "server.properties")
    assert "-XX:+UseG1GC" in full and "-XX:TieredStopAtLevel=1" not in full
    monkeypatch.setenv(JVM_ENV, "fast")
    try:
        ref._java("kafka.Kafka", "server.properties")
    except ReferenceError_ as e:
        assert "fast" in str(e)
    else:
        raise AssertionError("an unknown KAFKA_REFERENCE_JVM was taken")
