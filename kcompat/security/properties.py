"""Java ``.properties`` files, as ``java.util.Properties`` reads them: Kafka's
``server.properties`` and its tools' ``--command-config`` files.

``key=value`` / ``key: value`` / ``key value`` lines, ``#`` and ``!`` comments,
backslash line continuations and escapes (``\\uXXXX`` too); the last of a
repeated key wins. Pure: text in, a dict out, ``ValueError`` naming the source
for a malformed escape.
"""

from __future__ import annotations

import re

_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|(u)|(.))", re.S)
_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse(text: str, source: str = "properties") -> dict[str, str]:
    """Every key and its value."""
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split(line)
        props[_unescape(key, source)] = _unescape(value, source)
    return props


def _logical_lines(text: str) -> list[str]:
    out: list[str] = []
    pending: str | None = None
    for natural in re.split(r"\r\n|\r|\n", text):
        line = natural.lstrip(" \t\f")
        if pending is None and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:  # an odd count: the last backslash joins the next line
            pending = (pending or "") + line[:-1]
            continue
        out.append((pending or "") + line)
        pending = None
    if pending is not None:
        out.append(pending)
    return out


def _split(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line) and line[i] not in "=: \t\f":
        i += 2 if line[i] == "\\" else 1
    key, rest = line[:i], line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


def _unescape(text: str, source: str) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group(1):
            return chr(int(m.group(1), 16))
        if m.group(2):
            raise ValueError(f"{source}: malformed \\uxxxx escape in {text!r}")
        return _SIMPLE_ESCAPES.get(m.group(3), m.group(3))

    return _ESCAPE.sub(one, text)
