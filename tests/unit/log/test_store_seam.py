"""The log reaches the disk only through its ``FileStore`` (``kcompat/log/store.py``).

import-linter forbids ``os`` and ``shutil`` in the other log modules; this
check also catches file access through ``pathlib`` methods and ``open``, which
an import contract cannot see (``Path`` is still used to build names)."""

from __future__ import annotations

import ast
from pathlib import Path

import kcompat.log

FILE_METHODS = {"read_bytes", "read_text", "write_bytes", "write_text", "exists", "iterdir",
                "unlink", "mkdir", "rmdir", "glob", "stat", "touch", "is_dir", "is_file",
                "replace", "rename", "open"}


def file_calls(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "open":
            found.append(f"line {node.lineno}: open()")
        elif isinstance(func, ast.Attribute) and func.attr in FILE_METHODS:
            owner = func.value
            # store.open(...), store.rename(...) and LogSegment/PartitionLog.open go through the seam
            named = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
            if named in {"store", "_store", "cls", "PartitionLog", "LogSegment"}:
                continue
            found.append(f"line {node.lineno}: .{func.attr}()")
    return found


def test_log_modules_touch_files_only_through_the_store() -> None:
    root = Path(kcompat.log.__file__).parent
    offenders = {}
    for module in sorted(root.glob("*.py")):
        if module.name == "store.py":
            continue
        calls = file_calls(module.read_text())
        if calls:
            offenders[module.name] = calls
    assert not offenders, offenders


def test_the_check_sees_direct_file_access() -> None:
    assert file_calls("from pathlib import Path\nPath('x').read_bytes()\nopen('y')\n") == [
        "line 2: .read_bytes()", "line 3: open()"]
    assert file_calls("self.store.open(p)\nstore.rename(a, b)\n") == []
