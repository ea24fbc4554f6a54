"""The documentation's runnable code blocks, each run as a test.

Theory of operation
-------------------
A fenced block in ``docs/*.md`` or ``README.md`` whose info string is
``python run`` or ``sh run`` is an example the docs promise works; every other
block is illustration only. This module finds those blocks when pytest
collects it and makes one test of each, its id the file and the line of the
block's opening fence (``docs/guide.md:120``), so a failure names the block
to fix.

Runnable blocks are written against ``localhost:9092`` (the broker address a
reader has after ``make run``) and, for the admin HTTP port, ``localhost:9644``.
The tests replace both with the addresses of one embedded broker
(``kcompat.embedded``) started for the whole test session, with its admin port
on: blocks share it, so each block uses topic and group names of its own.

* ``python run``: the block is written to a file and run with this
  interpreter (``sys.executable``); it asserts its own outcome.
* ``sh run``: the block is run by ``bash -euo pipefail`` with this
  interpreter's ``bin`` directory first on ``PATH`` (so ``kcompat`` is the
  checkout's); a command such as ``grep`` checks the outcome.

Each runs in a temporary directory of its own, bounded by ``TIMEOUT_S``
(its whole process group is killed then). A non-zero exit fails the test with
the block as run, its exit code, stdout and stderr. Two guards keep the
runner from testing nothing without notice: ``docs/`` must hold at least one
runnable block, and an info string that mentions ``run`` in any other way
(``bash run``, ``python-run``...) is an error rather than a block silently
skipped.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
KAFKA_PLACEHOLDER = "localhost:9092"
ADMIN_PLACEHOLDER = "localhost:9644"
LANGUAGES = ("python", "sh")
TIMEOUT_S = 60.0
LOG_LINES = 80  # of the broker's log in a failure report
# an opening or closing fence: up to 3 spaces, then ``` or ~~~ (3 or more)
FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    info: str  # the info string after the fence
    source: str

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def language(self) -> str | None:
        """``python`` or ``sh`` for a runnable block, else None."""
        words = self.info.split()
        if len(words) == 2 and words[0] in LANGUAGES and words[1] == "run":
            return words[0]
        return None

    @property
    def mentions_run(self) -> bool:
        return re.search(r"(?<![A-Za-z])run(?![A-Za-z])", self.info) is not None


def fenced_blocks(path: Path) -> Iterator[Block]:
    """Every fenced code block of a Markdown file (CommonMark's fences: a
    block closes at a fence of the same character at least as long, with no
    info string; an unclosed block runs to the end of the file; the content
    loses as many leading spaces as the opening fence had, at most)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None or (opening[2][0] == "`" and "`" in opening[3]):
            i += 1
            continue
        indent, fence, info, start = len(opening[1]), opening[2], opening[3].strip(), i
        body: list[str] = []
        i += 1
        while i < len(lines):
            closing = FENCE.match(lines[i])
            if (closing is not None and closing[2][0] == fence[0]
                    and len(closing[2]) >= len(fence) and not closing[3].strip()):
                break
            line = lines[i]
            body.append(line[min(indent, len(line) - len(line.lstrip(" "))):])
            i += 1
        i += 1
        yield Block(path, start + 1, info, "\n".join(body) + "\n")


def all_blocks() -> list[Block]:
    return [b for path in DOC_FILES if path.exists() for b in fenced_blocks(path)]


BLOCKS = all_blocks()
RUNNABLE = [b for b in BLOCKS if b.language is not None]


def test_docs_have_runnable_blocks() -> None:
    in_docs = [b.name for b in RUNNABLE if b.path.parent == ROOT / "docs"]
    assert in_docs, ("no ```python run or ```sh run block in docs/*.md: the docs' examples "
                     "would go untested")


def test_run_markers_are_spelled_as_the_runner_reads_them() -> None:
    odd = [f"{b.name}: ```{b.info}" for b in BLOCKS if b.mentions_run and b.language is None]
    assert not odd, ("info strings that mention 'run' but are neither 'python run' nor "
                     "'sh run' (the block would not be run):\n" + "\n".join(odd))


# the broker's line naming its admin port (``admin.port`` 0: one it picked)
ADMIN_LINE = re.compile(rb"admin HTTP on https?://([0-9.]+):([0-9]+) ")


@dataclass(frozen=True)
class DocsBroker:
    bootstrap: str  # HOST:PORT of the Kafka listener
    admin: str  # HOST:PORT of the admin HTTP port (/metrics, /health)
    log: Path  # the broker's log file

    def log_size(self) -> int:
        return self.log.stat().st_size if self.log.exists() else 0

    def log_since(self, size: int, lines: int = LOG_LINES) -> str:
        """The last ``lines`` lines the broker logged after its log had ``size`` bytes."""
        with open(self.log, "rb") as f:
            f.seek(size)
            text = f.read().decode("utf-8", "replace")
        return "\n".join(text.splitlines()[-lines:]) + "\n"


@pytest.fixture(scope="session")
def docs_broker() -> Iterator[DocsBroker]:
    """One embedded broker for every block of the session, its admin port on, on a
    port the broker picks and logs: a port picked here and handed to the broker could
    be taken meanwhile by another test process's listener (a CI run lost all 38 docs
    blocks to that once)."""
    from kcompat._embedded import embedded

    with embedded(config={"admin.port": 0}) as broker:
        found = ADMIN_LINE.search(broker.log_paths[0].read_bytes())
        assert found, "the broker logged no admin HTTP line before its ready line"
        yield DocsBroker(broker.bootstrap, f"{found[1].decode()}:{found[2].decode()}",
                         broker.log_paths[0])


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[int | None, str, str]:
    """(exit code or None on timeout, stdout, stderr) of a command in its own
    process group, which is killed whole on timeout."""
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return None, out, err


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.name for b in RUNNABLE])
def test_block(block: Block, docs_broker: DocsBroker, tmp_path: Path) -> None:
    source = (block.source.replace(KAFKA_PLACEHOLDER, docs_broker.bootstrap)
              .replace(ADMIN_PLACEHOLDER, docs_broker.admin))
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCOMPAT_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    if block.language == "python":
        script = tmp_path / "block.py"
        script.write_text(source, encoding="utf-8")
        command = [sys.executable, str(script)]
    else:
        script = tmp_path / "block.sh"
        script.write_text(source, encoding="utf-8")
        command = ["bash", "-euo", "pipefail", str(script)]
    logged = docs_broker.log_size()
    code, out, err = _run(command, tmp_path, env)
    if code != 0:
        outcome = f"timed out after {TIMEOUT_S:.0f} s" if code is None else f"exited {code}"
        pytest.fail(f"{block.name} ({block.language} run) {outcome}\n"
                    f"--- block as run ---\n{source}"
                    f"--- stdout ---\n{out}--- stderr ---\n{err}"
                    f"--- the broker's log meanwhile ({docs_broker.log}) ---\n"
                    f"{docs_broker.log_since(logged)}", pytrace=False)
