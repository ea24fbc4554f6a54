"""A confluent-kafka (librdkafka) consumer in its own process, for the hole-read
tests: reads one partition from its start with the soak's settings, writes a
``ready`` file once it has fetched at the (empty) log end, then every value
read and every error event to ``out`` (JSON) when it has ``want`` values or its
deadline passes.

    python -m tests.integration._hole_reader BOOTSTRAP TOPIC WANT OUT DEADLINE_S
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main(bootstrap: str, topic: str, want: int, out: str, deadline_s: float) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "hole-reader",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 50, "log_level": 0})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[str] = []
    errors: list[str] = []
    deadline = time.monotonic() + deadline_s
    ready = Path(out + ".ready")
    try:
        while len(values) < want and time.monotonic() < deadline:
            for m in c.consume(num_messages=500, timeout=0.05):
                if m.error():
                    errors.append(str(m.error()))
                else:
                    values.append(m.value().decode())
            if not ready.exists():
                ready.write_text("fetching")
    finally:
        c.close()
    Path(out).write_text(json.dumps({"values": values, "errors": errors}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5]))
