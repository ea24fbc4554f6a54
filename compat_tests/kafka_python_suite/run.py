"""kafka-python's own integration suite against kcompat and Apache Kafka 4.4.0.

``make kafka-python-suite`` (not part of ``make test``) runs
``python -m compat_tests.kafka_python_suite.run``: it fetches the suite once
(``_fetch.ensure_suite``: the sdist of the kafka-python installed here, sha256
pinned) and, one side at a time (the machine has two cores), starts

* ``single``: one kcompat broker (``compat_tests._broker.Broker``),
* ``cluster``: three kcompat brokers, topics and ``__consumer_offsets`` at
  replication factor 3 (``compat_tests._cluster.Cluster``),
* ``kafka``: Apache Kafka 4.4.0, one KRaft node (``KafkaReference``),
* ``kafka-cluster``: three Apache Kafka 4.4.0 nodes, internal topics and new
  topics at replication factor 3 (``KafkaReferenceCluster``): what the
  ``cluster`` side is compared with (a test written for one broker may see a
  client's timing on three: ``test_delete_records`` expects one poll to bring
  every partition's records, which holds while one broker leads them all),

each configured as the suite configures its own brokers (kafka-python's
``servers/4.0.0/resources/kafka.properties``: ``SETTINGS``: node ids from 0, an
authorizer that allows what no ACL names, a 1 s minimum session timeout, no
initial rebalance delay, 2 offsets partitions), and runs ``test/integration``
against it with ``KAFKA_URI`` naming the broker (the suite's external-broker
mode) and ``KAFKA_VERSION=4.4.0``. The SASL and SSL modules start brokers of
their own with Kafka's scripts and are not run. Each test's outcome comes from
pytest's JUnit report; results merge into ``build/kafka-python-suite/results.json``
(sides, or some tests, may be run again: a rerun replaces only what it ran) and ``--findings`` rewrites the generated table in
``compat_tests/kafka_python/FINDINGS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# a port slice of its own (compat_tests._broker.free_port: by xdist worker)
os.environ.setdefault("PYTEST_XDIST_WORKER", "gw4")

from compat_tests._broker import REPO_ROOT, Broker  # noqa: E402
from compat_tests._cluster import Cluster  # noqa: E402
from compat_tests.java.kafka_reference import KafkaReference, KafkaReferenceCluster  # noqa: E402
from compat_tests.kafka_python_suite._fetch import ensure_suite  # noqa: E402

OUT_DIR = REPO_ROOT / "build" / "kafka-python-suite"
RESULTS = OUT_DIR / "results.json"
FINDINGS = REPO_ROOT / "compat_tests" / "kafka_python" / "FINDINGS.md"
SIDES = ("single", "cluster", "kafka", "kafka-cluster")
BROKER_VERSION = "4.4.0"
#: kafka-python's own broker settings (its servers/4.0.0 kafka.properties), where they
#: change what a client sees
SETTINGS = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "true", "num.partitions": "4",
            "offsets.topic.num.partitions": "2", "group.min.session.timeout.ms": "1000",
            "group.initial.rebalance.delay.ms": "0", "replica.lag.time.max.ms": "1000"}
NOT_RUN = ("test_sasl_integration.py", "test_ssl_integration.py")
TEST_TIMEOUT_S = 120
BEGIN, END = "<!-- kafka_python_suite:begin -->", "<!-- kafka_python_suite:end -->"


def _set(settings: dict[str, str]) -> tuple[str, ...]:
    return tuple(a for k, v in settings.items() for a in ("--set", f"{k}={v}"))


@contextmanager
def deployment(side: str, workdir: Path) -> Iterator[str]:
    """The side's brokers, running; their bootstrap address."""
    if side == "single":
        broker = Broker(workdir, extra_args=("--node-id", "0", *_set(SETTINGS)))
        broker.start()
        try:
            yield broker.bootstrap
        finally:
            broker.close()
    elif side == "cluster":
        cluster = Cluster(workdir, 3, first_node=0, extra_args=_set(
            {**SETTINGS, "offsets.topic.replication.factor": "3"}))
        cluster.start()
        try:
            yield cluster.brokers[0].bootstrap
        finally:
            cluster.close()
    elif side == "kafka":
        with KafkaReference(workdir, node_id=0, overrides=SETTINGS) as ref:
            yield ref.bootstrap
    else:
        # the quorum's votes pass the authorizer too, and it loads only once a
        # leader is elected: the nodes' own principal must be a super user
        with KafkaReferenceCluster(workdir, 3, first_node=0, overrides={
                **SETTINGS, "super.users": "User:ANONYMOUS"}) as refs:
            yield refs.nodes[0].bootstrap


def run_side(side: str, suite: Path, selected: list[str]) -> dict[str, dict[str, str]]:
    """{test id: {"outcome": passed|failed|error|skipped, "detail": first line}}."""
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    report = OUT_DIR / f"{side}.xml"
    log = OUT_DIR / f"{side}.log"
    with tempfile.TemporaryDirectory(prefix=f"kps-{side}-") as tmp, \
            deployment(side, Path(tmp)) as bootstrap:
        env = dict(os.environ, PYTHONPATH=str(suite), KAFKA_ROOT=str(suite / "kafka-root"),
                   KAFKA_URI=f"tcp://{bootstrap}", KAFKA_VERSION=BROKER_VERSION)
        env.pop("PYTEST_XDIST_WORKER", None)
        args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                "no:randomly", "-rfEs", "--timeout", str(TEST_TIMEOUT_S), "--timeout-method",
                "signal", f"--junitxml={report}", "-o", "junit_family=xunit1",
                *(f"--ignore=test/integration/{m}" for m in NOT_RUN),
                *(selected or ["test/integration"])]
        with open(log, "w") as out:
            subprocess.run(args, cwd=suite, env=env, stdout=out, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, check=False)
    return parse_report(report)


def parse_report(report: Path) -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        outcome, detail = "passed", ""
        for kind in ("failure", "error", "skipped"):
            node = case.find(kind)
            if node is not None:
                outcome = {"failure": "failed"}.get(kind, kind)
                detail = (node.get("message") or "").splitlines()[0][:160] if node.get(
                    "message") else ""
                break
        found[name] = {"outcome": outcome, "detail": detail}
    return found


def merged(new: dict[str, dict[str, dict[str, str]]]) -> dict[str, dict[str, dict[str, str]]]:
    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    for side, tests in new.items():  # a rerun of some tests replaces only theirs
        old.setdefault(side, {}).update(tests)
    RESULTS.write_text(json.dumps(old, indent=1, sort_keys=True))
    return old


def table(results: dict[str, dict[str, dict[str, str]]]) -> str:
    sides = [s for s in SIDES if s in results]
    tests = sorted({t for s in sides for t in results[s]})
    head = "| test | " + " | ".join(sides) + " |\n|---|" + "---|" * len(sides) + "\n"
    rows = []
    for t in tests:
        cells = [results[s].get(t, {"outcome": "-"})["outcome"] for s in sides]
        mark = " **differs**" if len({c for c in cells if c != "-"}) > 1 else ""
        rows.append(f"| `{t}`{mark} | " + " | ".join(cells) + " |")
    counts = "; ".join(
        f"{s}: " + ", ".join(f"{sum(1 for r in results[s].values() if r['outcome'] == o)} {o}"
                             for o in ("passed", "failed", "error", "skipped"))
        for s in sides)
    return head + "\n".join(rows) + f"\n\nTotals — {counts}.\n"


def write_findings(results: dict[str, dict[str, dict[str, str]]]) -> None:
    text = FINDINGS.read_text()
    block = f"{BEGIN}\n{table(results)}{END}"
    if BEGIN in text:
        text = text[:text.index(BEGIN)] + block + text[text.index(END) + len(END):]
    else:
        text += ("\n## kafka-python's own integration suite (issue 32 item 4; "
                 "`make kafka-python-suite`)\n\nGenerated by "
                 "`compat_tests/kafka_python_suite/run.py` (see its docstring).\n\n"
                 + block + "\n")
    FINDINGS.write_text(text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sides", default=",".join(SIDES))
    ap.add_argument("--findings", action="store_true",
                    help="rewrite the generated table in compat_tests/kafka_python/FINDINGS.md")
    ap.add_argument("tests", nargs="*", help="test paths or node ids under the suite's root")
    args = ap.parse_args()
    suite = ensure_suite() if args.sides else Path()
    new = {}
    for side in filter(None, args.sides.split(",")):  # --sides "": the table only
        if side not in SIDES:
            raise SystemExit(f"unknown side {side!r}: one of {', '.join(SIDES)}")
        new[side] = run_side(side, suite, args.tests)
        bad = sorted(t for t, r in new[side].items() if r["outcome"] in ("failed", "error"))
        print(f"{side}: {len(new[side])} tests, {len(bad)} failed: {', '.join(bad) or '-'}",
              flush=True)
    results = merged(new)
    print(table(results))
    if args.findings:
        write_findings(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
