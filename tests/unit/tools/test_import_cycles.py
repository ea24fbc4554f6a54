"""tools/import_cycles.py finds cycles that import-linter does not count:
through a function-level import and through ``if TYPE_CHECKING:``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TOOL = Path(__file__).parents[3] / "tools" / "import_cycles.py"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("import_cycles", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["import_cycles"] = module
    spec.loader.exec_module(module)
    return module


def _package(root: Path, files: dict[str, str]) -> Path:
    pkg = root / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        path = pkg / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return pkg


def test_function_level_and_type_checking_imports_make_a_cycle(tmp_path: Path) -> None:
    pkg = _package(tmp_path, {
        "a.py": "def f():\n    from pkg import b\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub.c import C\n",
        "sub/__init__.py": "",
        "sub/c.py": "from .. import a\n",
    })
    tool = _tool()
    assert tool.cycles(tool.graph(pkg)) == [["pkg.a", "pkg.b", "pkg.sub.c"]]
    assert tool.main(["import_cycles", str(pkg)]) == 1


def test_layered_package_has_no_cycle(tmp_path: Path) -> None:
    pkg = _package(tmp_path, {
        "a.py": "from pkg import b\n",
        "b.py": "import pkg.c\n",
        "c.py": "import json\n",
    })
    tool = _tool()
    assert tool.cycles(tool.graph(pkg)) == []
    assert tool.main(["import_cycles", str(pkg)]) == 0
