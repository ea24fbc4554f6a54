"""docs/extensions.md names exactly the ``kc-`` headers and ``kc.`` configs the broker knows.

Theory of operation
-------------------
The accepted names come from the code, never from a list kept here:

* headers: every module-level ``str`` constant of the form ``kc-name`` in the
  sans-IO extension cores (``kcompat.ext.*``, imported), and every such
  constant assigned at module level in ``kcompat/broker`` (read from the
  source with ``ast``: the message group header ``kc-group`` lives there);
* configs: the keys starting with ``kc.`` of the config registries
  ``TOPIC_CONFIGS``, ``GROUP_CONFIGS`` and ``BROKER_CONFIGS``, imported from
  whichever ``kcompat/broker`` module defines them (found by their source, so
  the test follows the modules when they move between subpackages).

The documented names are the first cells of the tables under the doc's
"Reference: headers and configs" heading. The test fails when either side has
a name the other lacks, when a config row's type or default disagrees with
its definition, and when a row's section link names no heading of the doc.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import kcompat.ext

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "extensions.md"
BROKER_SRC = ROOT / "kcompat" / "broker"
REFERENCE = "## Reference: headers and configs"
HEADER_NAME = re.compile(r"kc-[a-z][a-z0-9-]*")
CONFIG_PREFIX = "kc."
REGISTRIES = ("TOPIC_CONFIGS", "GROUP_CONFIGS", "BROKER_CONFIGS")


# -- what the code accepts ------------------------------------------------------------

def _ext_header_constants() -> set[str]:
    """``kc-`` names held by module-level str constants of ``kcompat.ext.*``."""
    found: set[str] = set()
    for info in pkgutil.iter_modules(kcompat.ext.__path__):
        module = importlib.import_module(f"kcompat.ext.{info.name}")
        found |= {value for value in vars(module).values()
                  if isinstance(value, str) and HEADER_NAME.fullmatch(value)}
    return found


def _broker_header_constants() -> set[str]:
    """``kc-`` names assigned to module-level constants in kcompat/broker."""
    found: set[str] = set()
    for path in sorted(BROKER_SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in tree.body:
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            if (isinstance(value, ast.Constant) and isinstance(value.value, str)
                    and HEADER_NAME.fullmatch(value.value)):
                found.add(value.value)
    return found


def _defining_module(name: str) -> ModuleType:
    """The kcompat/broker module that assigns ``name`` at module level."""
    assigned = re.compile(rf"^{name}\s*(?::[^=\n]*)?=(?!=)", re.MULTILINE)
    for path in sorted(BROKER_SRC.rglob("*.py")):
        if assigned.search(path.read_text(encoding="utf-8")):
            dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            return importlib.import_module(dotted)
    raise AssertionError(f"no module under kcompat/broker defines {name}")


def accepted_configs() -> dict[str, Any]:
    """``kc.`` key -> its ConfigDef, from every config registry."""
    out: dict[str, Any] = {}
    for registry in REGISTRIES:
        definitions = getattr(_defining_module(registry), registry)
        out.update({k: d for k, d in definitions.items() if k.startswith(CONFIG_PREFIX)})
    return out


def accepted_headers() -> set[str]:
    return _ext_header_constants() | _broker_header_constants()


# -- what the doc documents -------------------------------------------------------------

def _reference_text() -> str:
    text = DOC.read_text(encoding="utf-8")
    assert REFERENCE in text, f"{DOC.name} has no '{REFERENCE}' section"
    section = text.split(REFERENCE, 1)[1]
    return re.split(r"^## ", section, maxsplit=1, flags=re.MULTILINE)[0]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def documented_rows() -> dict[str, dict[str, str]]:
    """Name -> its row (column title -> cell) of every reference table."""
    rows: dict[str, dict[str, str]] = {}
    titles: list[str] | None = None
    for line in _reference_text().splitlines():
        if not line.startswith("|"):
            titles = None
            continue
        cells = _cells(line)
        if titles is None:
            titles = cells
            continue
        if set("".join(cells)) <= set("-: "):
            continue  # the delimiter row
        name = cells[0].strip("`")
        assert name not in rows, f"{name} is listed twice in the reference tables"
        rows[name] = dict(zip(titles, cells, strict=True))
    return rows


def _anchors() -> set[str]:
    """The doc's heading anchors, as GitHub makes them (a repeated heading
    gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    in_fence = False
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
        if in_fence or not line.startswith("#"):
            continue
        title = line.lstrip("#").strip().lower()
        slug = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


# -- the tests ---------------------------------------------------------------------------

def _assert_same(kind: str, accepted: set[str], documented: set[str]) -> None:
    problems = []
    if accepted - documented:
        problems.append(f"{kind} the broker knows that {DOC.name} does not document "
                        f"(add a row to its reference tables): {sorted(accepted - documented)}")
    if documented - accepted:
        problems.append(f"{kind} {DOC.name} documents that the broker does not know: "
                        f"{sorted(documented - accepted)}")
    assert not problems, "\n".join(problems)


def test_every_kc_header_is_documented_and_no_other() -> None:
    accepted = accepted_headers()
    documented = {name for name in documented_rows() if name.startswith("kc-")}
    assert accepted, "found no kc- header constant in the code"
    _assert_same("headers", accepted, documented)


def test_every_kc_config_is_documented_and_no_other() -> None:
    accepted = set(accepted_configs())
    documented = {name for name in documented_rows() if name.startswith(CONFIG_PREFIX)}
    assert accepted, "found no kc. config in the registries"
    _assert_same("configs", accepted, documented)


def test_config_types_and_defaults_match_their_definitions() -> None:
    rows = documented_rows()
    wrong = []
    for name, definition in sorted(accepted_configs().items()):
        row = rows.get(name)
        if row is None:
            continue  # reported by the test above
        if row.get("Type") != definition.type:
            wrong.append(f"{name}: type {row.get('Type')!r}, defined {definition.type!r}")
        default = "" if definition.default is None else definition.render(definition.default)
        if default and default not in row.get("Default", ""):
            wrong.append(f"{name}: default cell {row.get('Default')!r} lacks {default!r}")
    assert not wrong, "reference rows that disagree with the code:\n" + "\n".join(wrong)


def test_section_links_name_headings_of_the_doc() -> None:
    anchors = _anchors()
    broken = [f"{name}: #{target}" for name, row in documented_rows().items()
              for target in re.findall(r"\]\(#([^)]+)\)", row.get("Section", ""))
              if target not in anchors]
    assert not broken, "section links to no heading:\n" + "\n".join(broken)
