"""A small datadriven runner (after cockroachdb/datadriven, as etcd-io/raft uses).

A test file is a sequence of cases::

    # comments and blank lines between cases are kept
    command arg key=value
    ----
    expected output (no blank lines)
    <blank line>

``run_file`` calls ``handler(command, args, kwargs)`` for each case and
compares its output. With ``REWRITE=1`` in the environment the file is
rewritten with the actual outputs instead of failing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

Handler = Callable[[str, list[str], dict[str, str]], str]


@dataclass
class Case:
    line_no: int
    command: str
    expected: str


def parse(text: str) -> list[str | Case]:
    """Comment/blank chunks (str) interleaved with cases."""
    lines = text.splitlines()
    out: list[str | Case] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            out.append(line)
            i += 1
            continue
        start = i
        assert i + 1 < len(lines) and lines[i + 1] == "----", f"line {i + 2}: expected ----"
        i += 2
        expected: list[str] = []
        while i < len(lines) and lines[i].strip():
            expected.append(lines[i])
            i += 1
        out.append(Case(start + 1, line, "\n".join(expected)))
    return out


def split_args(command: str) -> tuple[str, list[str], dict[str, str]]:
    words = command.split()
    args = [w for w in words[1:] if "=" not in w]
    kwargs = dict(w.split("=", 1) for w in words[1:] if "=" in w)
    return words[0], args, kwargs


def run_file(path: Path, handler: Handler) -> None:
    rewrite = os.environ.get("REWRITE") == "1"
    chunks = parse(path.read_text())
    rendered: list[str] = []
    failures: list[str] = []
    for chunk in chunks:
        if isinstance(chunk, str):
            rendered.append(chunk)
            continue
        name, args, kwargs = split_args(chunk.command)
        actual = handler(name, args, kwargs).rstrip("\n")
        rendered += [chunk.command, "----", actual]
        if actual != chunk.expected:
            failures.append(
                f"{path.name}:{chunk.line_no}: {chunk.command}\n"
                f"--- expected\n{chunk.expected}\n--- actual\n{actual}"
            )
    if rewrite:
        path.write_text("\n".join(rendered) + "\n")
        return
    assert not failures, "\n\n".join(failures[:1]) + "\n(run with REWRITE=1 to accept)"
