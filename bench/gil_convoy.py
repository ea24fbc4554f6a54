"""How long a step of socket-like calls waits for the GIL beside a busy thread.

The broker's event loop makes many short system calls per step (sends,
receives), each releasing the GIL; while a worker thread runs Python (log
opens, the cleaner, delayed-produce splits, view filtering, the /metrics
text), taking it back waits up to ``sys.getswitchinterval()``. This measures
a step of ``--calls`` sends and receives over a socket pair (100 B, 16 KiB,
64 KiB) alone and beside a thread running
a pure Python loop, at CPython's default interval (5 ms) and at the broker's
(``server.GIL_SWITCH_INTERVAL_S``). Prints the figures and the load average;
``--append`` adds them to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kcompat.broker.node.server import GIL_SWITCH_INTERVAL_S  # noqa: E402


def burn(stop: threading.Event) -> None:
    """Run Python until ``stop``: a worker thread that wants the GIL."""
    x = 0
    while not stop.is_set():
        for i in range(1000):
            x += i


def _step(a: socket.socket, b: socket.socket, calls: int, size: int) -> float:
    data = b"x" * size
    started = time.perf_counter()
    for _ in range(calls):
        a.sendall(data)
        got = 0
        while got < size:
            got += len(b.recv(size - got))
    return time.perf_counter() - started


def measure(interval_s: float, calls: int, steps: int, size: int
            ) -> tuple[float, float, float, float]:
    """(alone best, beside a busy thread median, p99, max) in seconds."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(interval_s)
    a, b = socket.socketpair()
    try:
        alone = min(_step(a, b, calls, size) for _ in range(5))
        stop = threading.Event()
        busy = threading.Thread(target=burn, args=(stop,))
        busy.start()
        time.sleep(0.05)
        beside = sorted(_step(a, b, calls, size) for _ in range(steps))
        stop.set()
        busy.join()
    finally:
        sys.setswitchinterval(before)
        a.close()
        b.close()
    return alone, statistics.median(beside), beside[int(len(beside) * 0.99)], beside[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--append", action="store_true", help="append to bench/RESULTS.md")
    args = parser.parse_args()
    load_before = os.getloadavg()
    rows = []
    for size in (100, 16384, 65536):
        for interval_s in (0.005, GIL_SWITCH_INTERVAL_S):
            alone, median, p99, worst = measure(interval_s, args.calls, args.steps, size)
            rows.append(f"| {size:,} B | {interval_s * 1000:g} ms | {alone * 1000:.2f} ms "
                        f"| {median * 1000:.1f} / {p99 * 1000:.1f} / {worst * 1000:.1f} ms |")
    load_after = os.getloadavg()
    lines = [
        f"## GIL convoy: a step of socket-like calls beside a busy thread — "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC", "",
        f"`bench/gil_convoy.py --calls {args.calls} --steps {args.steps}`; Python "
        f"{sys.version.split()[0]}, {os.cpu_count()} cores; load average before "
        f"{' '.join(f'{x:.2f}' for x in load_before)}, after "
        f"{' '.join(f'{x:.2f}' for x in load_after)} (machine shared)", "",
        f"| message | switch interval | {args.calls} sends+receives alone (best of 5) "
        f"| beside a thread running Python: median / p99 / max of {args.steps} |",
        "|---|---|---|---|", *rows, ""]
    report(lines, args.append)


def report(lines: list[str], append: bool) -> None:
    """Print a section of ``lines``; with ``append``, add it to bench/RESULTS.md."""
    text = "\n".join(lines)
    print(text)
    if append:
        with open(ROOT / "bench" / "RESULTS.md", "a") as out:
            out.write("\n" + text + "\n")


if __name__ == "__main__":
    main()
