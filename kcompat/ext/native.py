"""The C module of the extensions' hot loops, when it was built (``_native.c``).

``MODULE`` is ``kcompat.ext._native``, or None where it could not be compiled
(setup.py builds it as optional) or once ``leave_out`` was called (a broker
started with ``KCOMPAT_PURE_PYTHON`` set: to measure the Python twins, or to
rule the C module out). Every caller keeps its Python loop: the C functions
answer None for any case they are not for.
"""

from __future__ import annotations

import importlib
from array import array
from typing import Protocol, cast

# split_delays's answer: the kept records' bytes joined and their count; the moves'
# offsets, timestamps, bodies, header counts, header bytes, dues, id rows and ids; the
# cancellations' holes and ids
SplitColumns = tuple[bytes, int, bytes, bytes, list[bytes], bytes, list[bytes], bytes, bytes,
                     list[str], bytes, list[str]]


class Native(Protocol):
    """What ``_native.c`` defines (its comments say what each answers)."""

    def split_delays(self, payload: bytes, count: int, base_offset: int, base_ts: int,
                     append_time: int | None, now_ms: int, max_delay_ms: int
                     ) -> SplitColumns | None: ...

    def delayed_records(self, offsets: array[int], timestamps: array[int], bodies: list[bytes],
                        header_counts: array[int], header_bytes: list[bytes], shift: int
                        ) -> tuple[list[bytes], int, int] | None: ...


def _load() -> Native | None:
    try:
        return cast(Native, importlib.import_module("kcompat.ext._native"))
    except ImportError:  # not built: the Python loops
        return None


MODULE = _load()
_BUILT = MODULE is not None


def leave_out() -> None:
    """The Python loops from now on, built or not."""
    global MODULE
    MODULE = None


def describe() -> str:
    """Whether the C loops run, for the broker's start-up log."""
    if MODULE is not None:
        return "in use"
    if _BUILT:
        return "built, left out (KCOMPAT_PURE_PYTHON): the Python loops"
    return ("not built (no C compiler when kcompat was installed?): the Python loops, "
            "slower under delayed producers")
