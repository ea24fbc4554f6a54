"""A confluent-kafka (librdkafka) consumer in its own process, for the hole-read
tests: reads one partition from its start with the soak's settings, writes a
``ready`` file once it has fetched at the (empty) log end, then every value
read and every error event to ``out`` (JSON) when it has ``want`` values or its
deadline passes.

    python -m tests.integration._hole_reader BOOTSTRAP TOPIC WANT OUT DEADLINE_S [CONFIG]

CONFIG (JSON) adds to or overrides the consumer's settings (a view's test
sets small fetch sizes). Once it has ``want`` values it polls a little longer,
so a record delivered twice shows up.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SETTLE_S = 0.5  # polled after the last value wanted arrived


def main(bootstrap: str, topic: str, want: int, out: str, deadline_s: float,
         config: dict[str, object] | None = None) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "hole-reader",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 50, "log_level": 0,
                  **(config or {})})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[str] = []
    errors: list[str] = []
    deadline = time.monotonic() + deadline_s
    ready = Path(out + ".ready")
    try:
        while len(values) < want and time.monotonic() < deadline:
            _take(c, values, errors)
            if not ready.exists():
                ready.write_text("fetching")
        settle = time.monotonic() + SETTLE_S
        while len(values) >= want and time.monotonic() < settle:
            _take(c, values, errors)
    finally:
        c.close()
    Path(out).write_text(json.dumps({"values": values, "errors": errors}))


def spawn(bootstrap: str, topic: str, want: int, out: str, deadline_s: float,
          config: dict[str, object] | None = None) -> subprocess.Popen[bytes]:
    """This reader started in its own process (from the repository's root)."""
    root = Path(__file__).resolve().parents[2]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration._hole_reader", bootstrap, topic, str(want),
         out, str(deadline_s), json.dumps(config or {})], cwd=str(root))


def values_read(out: str) -> list[str]:
    """The values a reader wrote to ``out``, once checked it saw no error event."""
    got = json.loads(Path(out).read_text())
    assert got["errors"] == [], f"{len(got['errors'])} error events: {got['errors'][:3]}"
    return list(got["values"])


def _take(c: Any, values: list[str], errors: list[str]) -> None:
    for m in c.consume(num_messages=500, timeout=0.05):
        if m.error():
            errors.append(str(m.error()))
        else:
            values.append(m.value().decode())


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5]),
         json.loads(sys.argv[6]) if len(sys.argv) > 6 else None)
