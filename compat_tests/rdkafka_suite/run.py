"""librdkafka 2.15.1's own test suite against kcompat and Apache Kafka 4.4.0.

``make rdkafka-suite`` (not part of ``make test``) runs
``python -m compat_tests.rdkafka_suite.run``: it builds librdkafka's
``tests/test-runner`` once (``_build.ensure_built``: npm tarball, pinned sha512,
cached in ``$COMPAT_CACHE``), then, one side at a time (the machine has two
cores), starts

* ``single``: one kcompat broker (``compat_tests._broker.Broker``),
* ``cluster``: three kcompat brokers, topics at replication factor 3
  (``compat_tests._cluster.Cluster``),
* ``kafka``: Apache Kafka 4.4.0, one KRaft node (``KafkaReference``, as the
  differential tests start it),
* ``kafka3`` (asked for by name): three Kafka 4.4.0 nodes (``KafkaReferenceCluster``),
  the reference for the tests that create topics at replication factor 3,

each with 4 partitions per auto-created topic and no initial rebalance delay
(librdkafka's "default" test scenario: auto-creation on, 4 partitions), writes a
``test.conf`` (bootstrap, ``test.timeout.multiplier``, random topic names) and runs
every chosen test as its own ``TEST_KAFKA_VERSION=4.4.0 test-runner -Q -E -L -p1`` process
(``TESTS=<number>``: quick mode, no sockem, no broker-less tests, one at a time),
bounded by a wall-clock limit. A test's result is what the runner's summary says
(PASSED / FAILED / SKIPPED, by the test itself or by the runner), or TIMEOUT when
the process outlived its limit. Results are merged into
``build/rdkafka-suite/results.json`` (so sides may be run separately), each
test's output kept in ``build/rdkafka-suite/<side>/<test>.log`` with the byte
range of the broker log it produced, and ``--findings`` rewrites the generated
section of ``compat_tests/FINDINGS.md`` from the merged results.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# A port slice of its own (compat_tests._broker.free_port: by xdist worker), away from
# the gw0 / gw1 slices a `make test` run beside this one uses.
os.environ.setdefault("PYTEST_XDIST_WORKER", "gw3")

from compat_tests._broker import REPO_ROOT, Broker  # noqa: E402
from compat_tests._cluster import Cluster  # noqa: E402
from compat_tests.java._jvm import java_bin, reference_classpath  # noqa: E402
from compat_tests.java.kafka_reference import (  # noqa: E402
    SHARE_TEST_OVERRIDES,
    KafkaReference,
    KafkaReferenceCluster,
)
from compat_tests.rdkafka_suite import _build  # noqa: E402
from compat_tests.rdkafka_suite._selection import (  # noqa: E402
    FOUND,
    NOAUTOCREATE_NUMBERS,
    NOAUTOCREATE_TESTS,
    NOTES,
    SKIPPED_GROUPS,
    select,
)

OUT_DIR = REPO_ROOT / "build" / "rdkafka-suite"
RESULTS = OUT_DIR / "results.json"
FINDINGS = REPO_ROOT / "compat_tests" / "FINDINGS.md"
SIDES = ("single", "cluster", "kafka", "kafka3")
_TITLES = ("kcompat, 1 node", "kcompat, 3 brokers RF 3", "Kafka 4.4.0", "Kafka 4.4.0, 3 nodes")
BROKER_VERSION = "4.4.0"
#: the consumers' group.protocol (``--group-protocol``): classic, or consumer (KIP-848)
GROUP_PROTOCOL = ["classic"]
#: librdkafka's default scenario (tests/scenarios/default.json), as broker settings, and
#: an authorizer that allows what no ACL names (0081 creates, describes and deletes
#: ACLs; 0109, 0115, 0119 deny User:* on a topic of their own and expect the denial)
SCENARIO = {"num.partitions": "4", "auto.create.topics.enable": "true",
            "group.initial.rebalance.delay.ms": "0",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "true"}
_AUTHORIZER = ("authorizer.class.name", "allow.everyone.if.no.acl.found")
#: what ``$KAFKA_PATH/bin/<script>`` runs (Kafka 4.4.0's tools, reference classpath)
_KAFKA_TOOLS = {"kafka-topics.sh": "org.apache.kafka.tools.TopicCommand",
                "kafka-acls.sh": "org.apache.kafka.tools.AclCommand",
                "kafka-configs.sh": "org.apache.kafka.tools.ConfigCommand"}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ROW = re.compile(r"^\|\s*(\d{4}_\S+)\s*\|\s*([A-Z ]+?)\s*\|\s*[\d.]+s\s*\|\s?(.*)$")


#: librdkafka's other test scenario run here: brokers that create no topic on demand
SCENARIOS: dict[str, dict[str, str]] = {
    "default": {}, "noautocreate": {"auto.create.topics.enable": "false"}}


def _kcompat_args(settings: dict[str, str]) -> tuple[str, ...]:
    args: list[str] = ["--admin-port", "-1"]
    for k, v in settings.items():
        args += ["--set", f"{k}={v}"]
    return tuple(args)


class _Side:
    """The brokers of one side: ``bootstrap`` and the log(s) to cite."""

    def __init__(self, name: str, workdir: Path, settings: dict[str, str]) -> None:
        self.name = name
        self.workdir = workdir
        self.settings = settings
        self.single: Broker | None = None
        self.cluster: Cluster | None = None
        self.ref: KafkaReference | None = None
        self.refs: KafkaReferenceCluster | None = None

    def start(self) -> None:
        if self.name == "single":
            self.single = Broker(self.workdir / "broker",
                                 extra_args=_kcompat_args(self.settings))
            self.single.start()
        elif self.name == "cluster":
            self.cluster = Cluster(self.workdir / "cluster", 3,
                                   extra_args=_kcompat_args(self.settings), link="PLAINTEXT")
            self.cluster.start()
        elif self.name == "kafka":
            self.ref = KafkaReference(self.workdir / "kafka",
                                      overrides={**self.settings, **SHARE_TEST_OVERRIDES})
            self.ref.start()
        else:
            # no authorizer: before a quorum of three forms, Kafka's StandardAuthorizer
            # refuses the controllers' Vote requests unless their principal (here
            # ANONYMOUS, as every client's) is a super user; the RF 3 tests need none
            settings = {k: v for k, v in self.settings.items() if k not in _AUTHORIZER}
            self.refs = KafkaReferenceCluster(
                self.workdir / "kafka3", overrides={**settings, **SHARE_TEST_OVERRIDES})
            self.refs.start()

    @property
    def bootstrap(self) -> str:
        node = self.single or self.cluster or self.ref or self.refs
        assert node is not None
        return node.bootstrap

    def logs(self) -> list[Path]:
        if self.single:
            return [self.single.log_path]
        if self.cluster:
            return [b.log_path for b in self.cluster.brokers.values()]
        if self.refs:
            return [n.log_path for n in self.refs.nodes]
        return [self.ref.log_path] if self.ref else []

    def alive(self) -> bool:
        if self.single:
            return self.single.running
        if self.cluster:
            return all(b.running for b in self.cluster.brokers.values())
        if self.refs:
            return self.refs.running
        return self.ref is not None and self.ref.running

    def close(self) -> None:
        for node in (self.single, self.cluster, self.ref, self.refs):
            if node is not None:
                node.close()


@contextmanager
def _side(name: str, workdir: Path, settings: dict[str, str]) -> Iterator[_Side]:
    side = _Side(name, workdir, settings)
    try:
        side.start()
        yield side
    finally:
        side.close()


def _kafka_path(workdir: Path) -> Path:
    """A ``KAFKA_PATH`` for the tests that call Kafka's scripts (0052, 0077 alter topic
    configs with ``kafka-topics.sh``; 0109, 0115, 0119 add ACLs with ``kafka-acls.sh``):
    Kafka 4.4.0's tool classes from the reference classpath."""
    home = workdir / "kafka-path"
    (home / "bin").mkdir(parents=True, exist_ok=True)
    for name, main in _KAFKA_TOOLS.items():
        script = home / "bin" / name
        script.write_text("#!/bin/sh\n"
                          f'exec "{java_bin()}" -Xmx256m -cp "{reference_classpath()}" '
                          f'{main} "$@"\n')
        script.chmod(0o755)
    return home


def _write_conf(path: Path, bootstrap: str, multiplier: float) -> None:
    path.write_text(f"bootstrap.servers={bootstrap}\n"
                    f"test.timeout.multiplier={multiplier}\n"
                    "test.topic.random=true\n")


def parse_summary(output: str) -> dict[str, tuple[str, str]]:
    """The runner's summary rows: test name -> (state, reason)."""
    rows: dict[str, tuple[str, str]] = {}
    for line in _ANSI.sub("", output).splitlines():
        m = _ROW.match(line.strip())
        if m:
            rows[m.group(1)] = (m.group(2).strip(), m.group(3).strip())
    return rows


def run_one(tests: Path, number: str, conf: Path, log: Path, limit_s: float,
            side: _Side, kafka_path: Path, scenario: str) -> dict[str, tuple[str, str]]:
    """Run test ``number`` (every test of that number the runner keeps) once."""
    env = dict(os.environ, TESTS=number, RDKAFKA_TEST_CONF=str(conf),
               KAFKA_PATH=str(kafka_path), BROKERS=side.bootstrap,
               TEST_KAFKA_VERSION=BROKER_VERSION, TEST_CONSUMER_GROUP_PROTOCOL=GROUP_PROTOCOL[0],
               LD_LIBRARY_PATH=f"{tests.parent / 'src'}:{tests.parent / 'src-cpp'}")
    marks = [(p, p.stat().st_size if p.exists() else 0) for p in side.logs()]
    # stdout line-buffered: a runner that dies at exit keeps its summary; the broker
    # version goes by TEST_KAFKA_VERSION (`-V` makes 2.15.1's runner free() argv at exit)
    cmd = ["stdbuf", "-oL", "./test-runner", "-Q", "-E", "-L", "-p1", "-s", scenario]
    t0 = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=str(tests), env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=limit_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            timed_out = True
        took = time.monotonic() - t0
        for path, start in marks:
            out.write(f"\n# broker log {path} bytes {start}..{path.stat().st_size}\n".encode())
        out.write(f"# exit {proc.returncode} after {took:.1f}s\n".encode())
    rows = {name: row for name, row in parse_summary(log.read_text(errors="replace")).items()
            if (name in NOTES or "negative test flags" not in row[1])  # broker-less variants
            and (name in NOAUTOCREATE_TESTS) == (scenario == "noautocreate")}
    if timed_out:
        rows = {name: ("TIMEOUT", f"killed after {limit_s:.0f}s") for name in rows} or {
            number: ("TIMEOUT", f"killed after {limit_s:.0f}s")}
    elif not rows:
        rows = {number: ("FAILED", f"no summary, exit {proc.returncode}")}
    return rows


def run_side(name: str, numbers: list[str], multiplier: float, limit_s: float,
             results: dict[str, dict[str, list[str]]], scenario: str = "default",
             extra: dict[str, str] | None = None) -> None:
    """Run ``numbers`` one by one against side ``name`` set up for ``scenario`` (and
    the broker settings ``extra``)."""
    tree = _build.ensure_built()
    tests = _build.tests_dir(tree)
    workdir = OUT_DIR / name
    workdir.mkdir(parents=True, exist_ok=True)
    kafka_path = _kafka_path(OUT_DIR)
    settings = {**SCENARIO, **SCENARIOS[scenario], **(extra or {})}
    suffix = "" if scenario == "default" else f"-{scenario}"
    with _side(name, workdir / f"brokers{suffix}", settings) as side:
        conf = workdir / "test.conf"
        _write_conf(conf, side.bootstrap, multiplier)
        for number in numbers:
            if not side.alive():
                print(f"[{name}] the broker died; restarting it", flush=True)
                side.close()
                side.start()
                _write_conf(conf, side.bootstrap, multiplier)
            rows = run_one(tests, number, conf, workdir / f"{number}{suffix}.log", limit_s,
                           side, kafka_path, scenario)
            for test, (state, reason) in sorted(rows.items()):
                results.setdefault(test, {})[name] = [state, reason[:200]]
                print(f"[{name}] {test:45s} {state:8s} {reason[:100]}", flush=True)
            _save(results)


def _load() -> dict[str, dict[str, list[str]]]:
    if RESULTS.exists():
        loaded: dict[str, dict[str, list[str]]] = json.loads(RESULTS.read_text())
        return loaded
    return {}


def _save(results: dict[str, dict[str, list[str]]]) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True))


_BEGIN = "<!-- rdkafka-suite: generated by compat_tests/rdkafka_suite/run.py --findings -->"
_END = "<!-- /rdkafka-suite -->"
_WORD = {"PASSED": "pass", "FAILED": "FAIL", "SKIPPED": "skip", "TIMEOUT": "TIMEOUT"}


def table(results: dict[str, dict[str, list[str]]]) -> str:
    lines = [f"| Test | {' | '.join(_TITLES)} | Notes |",
             "|---|" + "---|" * len(_TITLES) + "---|"]
    for test in sorted(results):
        cells = []
        for side in SIDES:
            state = results[test].get(side)
            cells.append("-" if state is None else _WORD.get(state[0], state[0].lower()))
        note = NOTES.get(test, "")
        if not note:
            reasons = {s[1] for s in results[test].values() if s[0] == "SKIPPED" and s[1]}
            note = "; ".join(sorted(reasons))[:160].replace("|", "/")
        lines.append(f"| {test} | {' | '.join(cells)} | {note} |")
    return "\n".join(lines)


def findings_section(results: dict[str, dict[str, list[str]]]) -> str:
    skipped = "\n".join(f"- {group}: {why}" for group, why in SKIPPED_GROUPS)
    return (f"{_BEGIN}\n## librdkafka {_build.LIBRDKAFKA_VERSION}'s own test suite "
            "(issue 32 item 4; `make rdkafka-suite`)\n\n"
            f"librdkafka's tests (`tests/0nnn-*`, from {_build.NPM_PACKAGE}@{_build.NPM_VERSION}'s "
            "`deps/librdkafka`), each run alone in quick mode (`TEST_KAFKA_VERSION="
            f"{BROKER_VERSION} test-runner -Q -E -L -p1`) against one kcompat broker, three "
            "kcompat brokers (RF 3) and Apache Kafka 4.4.0 (one node; three nodes, without the "
            "authorizer, for the tests that create RF 3 topics), each with librdkafka's default scenario (auto-created topics "
            "of 4 partitions; the `noautocreate` tests against brokers set up without "
            "auto-creation), no initial rebalance delay (as in the differential tests), "
            "an authorizer allowing what no ACL names, "
            "`test.timeout.multiplier` 3 on this 2-core shared machine and random topic names."
            " pass / FAIL / skip is what librdkafka's runner said (skip: "
            "the test skipped itself or the runner did, the reason in Notes); TIMEOUT: killed "
            "by the harness; -: not run on that side.\n\n"
            f"{table(results)}\n\n{FOUND}\n\nNot run, by group:\n\n{skipped}\n{_END}\n")


def write_findings(results: dict[str, dict[str, list[str]]]) -> None:
    text = FINDINGS.read_text()
    section = findings_section(results)
    if _BEGIN in text and _END in text:
        head, rest = text.split(_BEGIN, 1)
        tail = rest.split(_END, 1)[1].lstrip("\n")
        text = head + section + ("\n" + tail if tail else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    FINDINGS.write_text(text)


def main(argv: list[str] | None = None) -> int:
    global RESULTS
    ap = argparse.ArgumentParser(prog="python -m compat_tests.rdkafka_suite.run")
    ap.add_argument("--sides", default="single,cluster,kafka",
                    help="comma-separated, run in this order, one at a time; kafka3 (three "
                         "Kafka 4.4.0 nodes) is for the tests that create RF 3 topics; '' "
                         "runs none (with --findings: the table from the results file)")
    ap.add_argument("--tests", default="all",
                    help="'all', 'first' (0001-0030) or comma-separated numbers")
    ap.add_argument("--multiplier", type=float, default=3.0,
                    help="test.timeout.multiplier (this machine: 2 shared cores)")
    ap.add_argument("--limit-s", type=float, default=600.0,
                    help="wall-clock limit of one test-runner process")
    ap.add_argument("--scenario", default="both", choices=("default", "noautocreate", "both"),
                    help="librdkafka's test scenario(s): noautocreate runs "
                         f"{', '.join(NOAUTOCREATE_TESTS)} against brokers without "
                         "auto-creation")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker setting on every side (e.g. "
                         "group.initial.rebalance.delay.ms=3000); best with --results")
    ap.add_argument("--results", type=Path, default=RESULTS,
                    help=f"the results file to merge into (default {RESULTS})")
    ap.add_argument("--group-protocol", default="classic", choices=("classic", "consumer"),
                    help="the tests' consumers' group.protocol (consumer: KIP-848); best "
                         "with --results")
    ap.add_argument("--fresh", action="store_true", help="forget earlier results")
    ap.add_argument("--findings", action="store_true",
                    help="rewrite the generated section of compat_tests/FINDINGS.md")
    ap.add_argument("--build-only", action="store_true")
    args = ap.parse_args(argv)
    if args.build_only:
        print(_build.ensure_built())
        return 0
    RESULTS = args.results
    GROUP_PROTOCOL[0] = args.group_protocol
    extra = dict(kv.split("=", 1) for kv in args.set)
    results = {} if args.fresh else _load()
    numbers = select(args.tests)
    for name in filter(None, args.sides.split(",")):
        if name not in SIDES:
            ap.error(f"unknown side {name!r} (one of {', '.join(SIDES)})")
        if args.scenario in ("default", "both"):
            run_side(name, numbers, args.multiplier, args.limit_s, results, extra=extra)
        if args.scenario in ("noautocreate", "both"):
            run_side(name, NOAUTOCREATE_NUMBERS, args.multiplier, args.limit_s, results,
                     "noautocreate", extra)
    if args.findings:
        write_findings(results)
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
