"""Rebuild the version table in compat_tests/LEDGER.md from a real run.

    rm -f /tmp/ledger.jsonl
    KCOMPAT_LOG_LEVEL=DEBUG COMPAT_LEDGER_OUT=/tmp/ledger.jsonl \\
        .venv/bin/python -m pytest compat_tests --basetemp=/tmp/compat-run
    .venv/bin/python -m compat_tests.ledger_scan /tmp/ledger.jsonl --write

The broker logs ``request <Api> v<N> cid=.. client=<client.id>`` at DEBUG; conftest.py
records which byte range of which broker log each test produced. "Served" comes from
a fresh broker's ApiVersions answer as kafka-python decodes it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from kcompat.wire.versions import API_RANGES

from ._broker import Broker

LEDGER = Path(__file__).with_name("LEDGER.md")
BEGIN = "<!-- ledger_scan:begin -->"
END = "<!-- ledger_scan:end -->"

REQUEST = re.compile(rb"request (\w+) v(\d+) cid=\d+ client=(\S+)")

# One row per API kcompat serves, in the order of its version table.
ROWS = [(r.api_key, r.name) for r in API_RANGES.values()]
CLIENTS = ["kafka-python", "confluent-kafka", "aiokafka", "kcat", "java"]
JAVA_PREFIXES = ("producer-", "consumer-", "adminclient-", "perf-", "verifiable-")


def client_family(client_id: str) -> str | None:
    if client_id.startswith("kcat"):
        return "kcat"
    if client_id.startswith("aiokafka"):
        return "aiokafka"
    if client_id.startswith("kafka-python"):
        return "kafka-python"
    if client_id.startswith("rdkafka"):
        return "confluent-kafka"  # kcat runs with -X client.id=kcat
    if client_id.startswith(JAVA_PREFIXES) or "spark" in client_id:
        return "java"  # kafka-clients 4.4 (our programs, Kafka's tools) and Spark's 3.9
    return None


def served_versions() -> dict[int, tuple[int, int]]:
    from kafka import KafkaAdminClient

    with tempfile.TemporaryDirectory() as d:
        b = Broker(Path(d))
        b.start()
        try:
            admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
            try:
                return {int(k): tuple(v) for k, v in admin.api_versions().items()}  # type: ignore[misc]
            finally:
                admin.close()
        finally:
            b.close()


def scan(jsonl: Path) -> dict[str, dict[str, dict[int, str]]]:
    """api name -> client -> version -> first test that showed it."""
    seen: dict[str, dict[str, dict[int, str]]] = defaultdict(lambda: defaultdict(dict))
    for line in jsonl.read_text().splitlines():
        entry = json.loads(line)
        path = Path(entry["log"])
        if not path.exists():
            continue
        with open(path, "rb") as f:
            f.seek(entry["start"])
            chunk = f.read(max(0, entry["end"] - entry["start"]))
        test = entry["nodeid"].removeprefix("compat_tests/")
        for m in REQUEST.finditer(chunk):
            fam = client_family(m.group(3).decode())
            if fam is None:
                continue
            api, ver = m.group(1).decode(), int(m.group(2))
            seen[api][fam].setdefault(ver, test)
    return seen


def render(served: dict[int, tuple[int, int]], seen: dict[str, dict[str, dict[int, str]]]) -> str:
    head = "| Key | API | Served | " + " | ".join(CLIENTS) + " |"
    out = [head, "|" + "---|" * (3 + len(CLIENTS))]
    named = {name for _, name in ROWS}
    for key, name in ROWS:
        rng = served.get(key)
        cells = [str(key), name, f"{rng[0]}–{rng[1]}" if rng else "not advertised"]
        for client in CLIENTS:
            vers = seen.get(name, {}).get(client, {})
            cells.append("<br>".join(f"v{v} `{t}`" for v, t in sorted(vers.items())) or "—")
        out.append("| " + " | ".join(cells) + " |")
    extra = sorted(set(seen) - named)
    if extra:
        out += ["", "Other APIs the suites drove:", ""]
        for name in extra:
            parts = [f"{c} v{','.join(str(v) for v in sorted(seen[name][c]))}"
                     for c in CLIENTS if seen[name].get(c)]
            out.append(f"- {name}: " + "; ".join(parts))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("jsonl", type=Path)
    ap.add_argument("--write", action="store_true", help=f"replace the table in {LEDGER}")
    args = ap.parse_args(argv)
    table = render(served_versions(), scan(args.jsonl))
    if not args.write:
        print(table)
        return 0
    text = LEDGER.read_text()
    if BEGIN not in text or END not in text:
        print(f"{LEDGER} lacks the {BEGIN} / {END} markers", file=sys.stderr)
        return 1
    pre, rest = text.split(BEGIN, 1)
    _, post = rest.split(END, 1)
    LEDGER.write_text(f"{pre}{BEGIN}\n{table}\n{END}{post}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
