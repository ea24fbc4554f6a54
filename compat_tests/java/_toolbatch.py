"""Kafka's own command-line tools, several per JVM (``toolbatch/ToolBatch.java``).

``run_tools(steps)`` runs the unmodified main classes of the kafka-tools jar of the
reference classpath (TopicCommand, ConsumerGroupCommand, ConfigCommand, ...) one
after the other in one JVM and returns each one's exit code, stdout and stderr: a
JVM start costs 1-2 s here, a tool run a fraction of that. ``until(text, seconds,
step)`` makes a step wait for a condition with the tool itself (``--verify`` until it
reports a reassignment complete): it runs again while it exits 0 without printing
``text``. ToolBatch is compiled once with ``javac`` into the cache (keyed by its source
and the Kafka version).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from compat_tests.java._jvm import KAFKA_VERSION, cache_root, java_bin, reference_classpath
from compat_tests.java.conftest import java_cmd

SOURCE = Path(__file__).parent / "toolbatch" / "ToolBatch.java"
TOOLS = "org.apache.kafka.tools"
TOPICS = f"{TOOLS}.TopicCommand"
GROUPS = f"{TOOLS}.consumer.group.ConsumerGroupCommand"
CONFIGS = f"{TOOLS}.ConfigCommand"
LOG_DIRS = f"{TOOLS}.LogDirsCommand"
LEADER_ELECTION = f"{TOOLS}.LeaderElectionCommand"
METADATA_QUORUM = f"{TOOLS}.MetadataQuorumCommand"
REASSIGN = f"{TOOLS}.reassign.ReassignPartitionsCommand"
UNTIL = "--until--"


@dataclass
class ToolRun:
    args: list[str]
    code: int
    stdout: str
    stderr: str
    runs: int = 1  #: how often an ``until`` step ran

    def explain(self) -> str:
        return (f"$ {' '.join(self.args)}\nexit {self.code} after {self.runs} run(s)\n"
                f"--- stdout ---\n"
                f"{self.stdout[-3000:]}\n--- stderr ---\n{self.stderr[-3000:]}")


def classes_dir() -> Path:
    digest = hashlib.sha256(SOURCE.read_bytes() + KAFKA_VERSION.encode()).hexdigest()[:12]
    out = cache_root() / f"toolbatch-{digest}"
    if not (out / "ToolBatch.class").exists():
        # compiled beside it and renamed into place: parallel runs never see half a build
        tmp = Path(tempfile.mkdtemp(prefix="toolbatch-", dir=cache_root()))
        javac = Path(java_bin()).resolve().parent / "javac"
        subprocess.run([str(javac), "--release", "17", "-cp", reference_classpath(),
                        "-d", str(tmp), str(SOURCE)], check=True, capture_output=True,
                       timeout=120)
        try:
            tmp.rename(out)
        except OSError:  # another run got there first
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def until(text: str, timeout_s: float, step: list[str]) -> list[str]:
    """``step`` run again (200 ms apart) while it exits 0 and its stdout lacks
    ``text``, for at most ``timeout_s``; the last run is the step's result."""
    return [UNTIL, text, str(timeout_s), *step]


def run_tools(steps: list[list[str]], timeout: float = 120.0) -> list[ToolRun]:
    """Run each step (main class, then its arguments) in one JVM, in order."""
    args: list[str] = []
    for i, step in enumerate(steps):
        args += (["--next--"] if i else []) + step
    cp = f"{classes_dir()}:{reference_classpath()}"
    p = subprocess.run(java_cmd(cp, "ToolBatch", *args, heap="384m"), capture_output=True,
                       text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    found = {int(m.group(1)): (int(m.group(2)), m.group(4), m.group(5), int(m.group(3)))
             for m in re.finditer(
                 r"^@@STEP (\d+) (-?\d+) (\d+)\n(.*?)\n@@ERR\n(.*?)\n@@END \1$",
                 p.stdout, re.S | re.M)}
    if len(found) != len(steps):
        raise AssertionError(f"ToolBatch ran {len(found)} of {len(steps)} steps (exit "
                             f"{p.returncode})\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return [ToolRun(step[3:] if step[0] == UNTIL else step, *found[i])
            for i, step in enumerate(steps)]
