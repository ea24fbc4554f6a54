"""The delayed produce's two per-record loops, in C and in Python (issue 31).

``holes.split`` of one batch of ``--records`` records of 100 B, each with
``kc-delay-ms``, and ``schedule_adds.delayed_records`` of what it took out, each
``--rounds`` times in this process: once with the C module (``kcompat/ext/_native.c``)
and once with its Python twins (``native.MODULE`` set to None). Prints microseconds
per record; nothing is appended to bench/RESULTS.md.

    .venv/bin/python bench/split_loops.py
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kcompat.ext import native  # noqa: E402
from kcompat.ext.holes import split  # noqa: E402
from kcompat.ext.schedule_adds import delayed_records  # noqa: E402
from kcompat.wire.batch import validate  # noqa: E402
from kcompat.wire.records import encode_batch  # noqa: E402

NOW = 1_700_000_000_000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args()
    if native.MODULE is None:
        sys.exit("kcompat.ext._native is not built (pip install -e . compiles it)")
    raw = encode_batch([(b"k%d" % i, b"v" * 100, [("kc-delay-ms", b"%d" % (5000 + i * 7))],
                         NOW + i) for i in range(args.records)])
    header = validate(raw)
    built = native.MODULE
    for name, module in (("Python", None), ("C", built)):
        native.MODULE = module
        t0 = time.perf_counter()
        for _ in range(args.rounds):
            out = split(raw, header, NOW)
        t1 = time.perf_counter()
        assert out is not None
        for _ in range(args.rounds):
            delayed_records(out.taken, 3)
        t2 = time.perf_counter()
        per = 1e6 / args.rounds / args.records
        print(f"{name}: split {(t1 - t0) * per:.2f} us a record, "
              f"delayed_records {(t2 - t1) * per:.2f} us a record")
    native.MODULE = built


if __name__ == "__main__":
    main()
