"""Share groups (KIP-932): consume throughput of kcompat vs Apache Kafka, and FIFO message groups.

    .venv/bin/python bench/share.py                  # 200k records (~3 min on 2 cores)
    .venv/bin/python bench/share.py --quick          # 100k records, < 2 min
    .venv/bin/python bench/share.py --profile        # + py-spy of kcompat in one more run

What it measures, on this machine in one run (Apache Kafka first, then kcompat;
each broker alone on the machine while it is measured):

* **share vs classic consume.** For each of 1 and 4 members (separate
  processes, confluent-kafka 2.16) of a *share group* (``ShareConsumer``,
  ``share.acknowledgement.mode=explicit``, every record ``acknowledge(msg,
  ACCEPT)``, the acknowledgements riding on the next poll's ShareFetch) and of a
  *classic group* (``Consumer``, auto commit), a fresh 4-partition topic holds
  ``--records`` records of 200 bytes (partition ``i % 4``, no key). The figure
  is records/s from the first record any member received to the moment every
  offset was received by some member. For a share group that also bounds the
  acknowledgements: a share-partition hands out at most
  ``group.share.partition.max.record.locks`` (2000) unacknowledged records, so
  ACCEPTs must flow for the last record to come; the report says how many
  ACCEPTs the broker had confirmed (acknowledgement-commit callback, ok) when
  the last record arrived, and how much later the last one was confirmed (the
  ShareFetch carrying it may wait out its max wait once no records are left).
* **Joining is not counted.** The records are written in one transaction left
  open; the members (``isolation.level`` / the group's ``share.isolation.level``
  = read_committed, ``share.auto.offset.reset=earliest`` set first through
  IncrementalAlterConfigs on the GROUP resource) start together after a
  barrier; once the group is stable (classic: all partitions assigned, one
  per member; share: ``SHARE_SETTLE_S``, 4 heartbeat intervals) the
  transaction commits and every record becomes readable at once. Without this
  the first member to join reads alone until the others are in (Kafka's share
  members join about a heartbeat interval apart).
* **FIFO message groups (kcompat only).** ``kc.share.ordering=message-group``
  on a share group: ``--fifo-groups`` message groups x ``--fifo-per-group``
  records (key = the message group, interleaved: sequence 0 of every group,
  then 1, ...), read by 1 and 4 share members; only the head of each message
  group is acquirable, so a group advances by one record per acknowledgement
  round trip and the throughput comes from many groups in parallel. The same
  records with ordering ``none`` are the baseline, and ``--fifo-few`` (10 groups
  x 200 records) shows what ordering costs when few groups carry the traffic.

Both brokers run with ``group.share.heartbeat.interval.ms`` and
``group.share.min.heartbeat.interval.ms`` at 1000 (members get their assignment
quickly) and ``group.initial.rebalance.delay.ms=0``; kcompat also with
``kcompat.flush.mode=never`` as in ``compare.py`` (Kafka does not fsync on
acknowledgement either). Each member reports what it received and which
acknowledgements were confirmed over its stdout; the parent counts distinct
offsets. Broker CPU seconds per run come from /proc/<pid>/stat. Figures are
printed and appended to bench/RESULTS.md with the machine's load average.

The producer's batch size matters to kcompat (``--batch-records``, default 5000):
its share fetch decodes whole batches in Python to list their offsets, so its
throughput falls as batches grow (see RESULTS.md, 2026-11-26).
"""

from __future__ import annotations

import argparse
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# bench.compare / compat_tests are imported where used: a member process needs only
# confluent_kafka.
PARTITIONS = 4
VALUE_BYTES = 200
MEMBER_COUNTS = (1, 4)
SHARE_HEARTBEAT = {"group.share.min.heartbeat.interval.ms": "1000",
                   "group.share.heartbeat.interval.ms": "1000"}
EARLIEST = {"share.auto.offset.reset": "earliest"}
ACK_WAIT_S = 15.0  # after the last record: how long to wait for its ACCEPT to be confirmed
SHARE_SETTLE_S = 4.0  # members joined -> records published (4 heartbeat intervals)
READ_COMMITTED = {"share.isolation.level": "read_committed"}
BATCH_RECORDS = 5000  # producer batch.num.messages (--batch-records; librdkafka's is 10000)


# -- one member: its own process (``share.py member KIND BOOTSTRAP TOPIC GROUP``) ----------
#
# Lines on stdout: ``ready`` once the client exists (then it waits for ``go`` on stdin),
# ``R <time> <ranges>`` per poll batch received, ``K <time> ok|error <ranges>`` per
# acknowledgement-commit callback (share only); ranges are ``partition:first-last``.

STOP = False


def ranges(pairs: Iterable[tuple[int, int]]) -> str:
    runs: list[list[int]] = []
    for p, o in sorted(pairs):
        if runs and runs[-1][0] == p and runs[-1][2] == o - 1:
            runs[-1][2] = o
        else:
            runs.append([p, o, o])
    return " ".join(f"{p}:{a}-{b}" for p, a, b in runs)


def parse_ranges(fields: Iterable[str]) -> Iterator[tuple[int, int, int]]:
    for f in fields:
        p, _, span = f.partition(":")
        a, _, b = span.partition("-")
        yield int(p), int(a), int(b)


def emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def member(kind: str, bootstrap: str, topic: str, group: str) -> None:
    from confluent_kafka import AcknowledgeType, Consumer, ShareConsumer

    def stop(signum: int, frame: Any) -> None:
        global STOP
        STOP = True

    def on_ack(offsets: dict[Any, set[int]], exc: Any) -> None:
        pairs = [(tp.partition, o) for tp, offs in offsets.items() for o in offs]
        emit(f"K {time.time():.6f} {'ok' if exc is None else 'error'} {ranges(pairs)}")

    signal.signal(signal.SIGTERM, stop)
    base = {"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0}
    if kind == "share":
        c: Any = ShareConsumer({**base, "share.acknowledgement.mode": "explicit"})
        c.set_acknowledgement_commit_callback(on_ack)
    else:
        c = Consumer({**base, "auto.offset.reset": "earliest",
                      "isolation.level": "read_committed"})
    emit("ready")
    sys.stdin.readline()  # the barrier: every member is ready
    if kind == "share":
        c.subscribe([topic])
    else:
        c.subscribe([topic], on_assign=lambda _, parts: emit(f"A {len(parts)}"),
                    on_revoke=lambda _, parts: emit("A 0"))
    try:
        while not STOP:
            msgs = c.poll(0.1) if kind == "share" else c.consume(num_messages=1000, timeout=0.1)
            got = [(m.partition(), m.offset()) for m in msgs if m.error() is None]
            if kind == "share":
                for m in msgs:
                    if m.error() is None:
                        c.acknowledge(m, AcknowledgeType.ACCEPT)
            if got:
                emit(f"R {time.time():.6f} {ranges(got)}")
    finally:
        c.close()


# -- the parent: start members, count distinct offsets -------------------------------------

class Tally:
    """Distinct offsets seen per partition (the topic's records are offsets 0..end-1)."""

    def __init__(self, ends: dict[int, int]) -> None:
        self.seen = {p: bytearray(n) for p, n in ends.items()}
        self.distinct = 0
        self.total = 0

    def add(self, p: int, a: int, b: int) -> None:
        arr = self.seen[p]
        b = min(b, len(arr) - 1)
        n = b - a + 1
        self.total += n
        self.distinct += n - arr[a:b + 1].count(1)
        arr[a:b + 1] = b"\x01" * n


@dataclass
class Run:
    kind: str
    members: int
    records: int
    join_s: float = 0.0               # the commit publishing the records -> first record
    first_ts: float | None = None     # wall clock of the first record received
    received_ts: float | None = None  # every offset received
    acked_ts: float | None = None     # every offset's ACCEPT confirmed (share)
    received: int = 0                 # records received, duplicates included
    distinct: int = 0                 # distinct offsets received
    acked: int = 0                    # distinct offsets confirmed
    acked_when_received: int = 0      # ... at the moment the last record was received
    ack_errors: int = 0
    per_member: list[int] = field(default_factory=list)
    broker_cpu_s: float = 0.0
    wall_s: float = 0.0               # the commit -> done

    @property
    def done_ts(self) -> float | None:
        return self.acked_ts if self.kind == "share" else self.received_ts

    def rate(self) -> float | None:
        """Records/s from the first record to the last distinct one received."""
        end = self.received_ts
        if end is None or self.first_ts is None or end <= self.first_ts:
            return None
        return self.records / (end - self.first_ts)


def _reader(proc: subprocess.Popen[str], i: int, q: queue.Queue[tuple[int, str]]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        q.put((i, line.rstrip("\n")))
    q.put((i, "EOF"))


def start_members(kind: str, bootstrap: str, topic: str, group: str, n: int
                  ) -> tuple[list[subprocess.Popen[str]], queue.Queue[tuple[int, str]]]:
    """``n`` member processes, each waiting at the barrier; their lines on one queue."""
    q: queue.Queue[tuple[int, str]] = queue.Queue()
    procs = []
    for i in range(n):
        proc = subprocess.Popen([sys.executable, __file__, "member", kind, bootstrap, topic, group],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        procs.append(proc)
        threading.Thread(target=_reader, args=(proc, i, q), daemon=True).start()
    ready = 0
    while ready < n:
        i, line = q.get(timeout=60)
        if line == "EOF":
            raise RuntimeError(f"member {i} exited before it was ready")
        ready += line == "ready"
    return procs, q


def stop_members(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def run_members(kind: str, bootstrap: str, loaded: Loaded, group: str, members: int,
                broker_pid: int) -> Run:
    """Start ``members`` members at once, let the group settle, publish the records
    (commit their transaction) and count until every offset is done."""
    from bench.compare import proc_cpu_s

    run = Run(kind, members, sum(loaded.ends.values()), per_member=[0] * members)
    received, acked = Tally(loaded.ends), Tally(loaded.ends)
    procs, q = start_members(kind, bootstrap, loaded.topic, group, members)
    timeout_s = 60 + run.records / 1000
    try:
        tell(procs, "go")
        if kind == "classic":
            wait_assigned(q, members)
        else:  # no assignment to watch: a few heartbeat intervals
            time.sleep(SHARE_SETTLE_S)
        cpu0, t0, wall0 = proc_cpu_s(broker_pid), time.monotonic(), time.time()
        loaded.publish()
        while run.done_ts is None and time.monotonic() - t0 < timeout_s and not (
                run.received_ts and time.time() - run.received_ts > ACK_WAIT_S):
            try:
                i, line = q.get(timeout=1.0)
            except queue.Empty:
                continue
            _account(run, received, acked, i, line)
        run.broker_cpu_s, run.wall_s = proc_cpu_s(broker_pid) - cpu0, time.monotonic() - t0
        run.join_s = (run.first_ts - wall0) if run.first_ts else 0.0
    finally:
        stop_members(procs)
    run.received, run.distinct, run.acked = received.total, received.distinct, acked.distinct
    return run


def tell(procs: list[subprocess.Popen[str]], line: str) -> None:
    for p in procs:
        assert p.stdin is not None
        p.stdin.write(line + "\n")
        p.stdin.flush()


def wait_assigned(q: queue.Queue[tuple[int, str]], members: int, timeout_s: float = 60) -> None:
    """Until the classic group is stable: every partition assigned, spread over as
    many members as can have one."""
    held = [0] * members
    deadline = time.monotonic() + timeout_s
    while not (sum(held) == PARTITIONS
               and sum(1 for h in held if h) == min(members, PARTITIONS)):
        i, line = q.get(timeout=max(deadline - time.monotonic(), 0.01))
        if line.startswith("A "):
            held[i] = int(line[2:])
        elif line == "EOF":
            raise RuntimeError(f"member {i} exited while waiting for the assignment")


def _account(run: Run, received: Tally, acked: Tally, i: int, line: str) -> None:
    f = line.split(" ")
    if f[0] == "R":
        ts = float(f[1])
        run.first_ts = ts if run.first_ts is None else min(run.first_ts, ts)
        before = received.total
        for p, a, b in parse_ranges(f[2:]):
            received.add(p, a, b)
        run.per_member[i] += received.total - before
        if received.distinct == run.records and run.received_ts is None:
            run.received_ts, run.acked_when_received = ts, acked.distinct
    elif f[0] == "K":
        spans = list(parse_ranges(f[3:]))
        if f[2] != "ok":
            run.ack_errors += sum(b - a + 1 for _, a, b in spans)
            return
        for p, a, b in spans:
            acked.add(p, a, b)
        if acked.distinct == run.records and run.acked_ts is None:
            run.acked_ts = float(f[1])
    elif line == "EOF" and run.done_ts is None:
        print(f"  member {i} exited early", flush=True)


# -- workloads -------------------------------------------------------------------------

def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    from compat_tests._share import set_group_configs as set_configs

    set_configs(bootstrap, group, configs)


@dataclass
class Loaded:
    """A topic holding records in one open transaction: invisible to read_committed
    readers until ``publish()``, then all at once."""

    topic: str
    ends: dict[int, int]  # partition -> end offset of the records (the marker excluded)
    producer: Any

    def publish(self) -> None:
        self.producer.commit_transaction(60)


def load_topic(bootstrap: str, prefix: str, records: Iterable[tuple[int | None, bytes | None]],
               batch_records: int) -> Loaded:
    """A new topic with ``(partition or None, key)`` records of 200-byte values, in
    producer batches of up to ``batch_records`` records."""
    from confluent_kafka import Producer

    from bench.compare import create_topic

    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, PARTITIONS)
    ends = dict.fromkeys(range(PARTITIONS), 0)

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            raise RuntimeError(f"produce failed: {err}")
        ends[msg.partition()] = max(ends[msg.partition()], msg.offset() + 1)

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                  "batch.num.messages": batch_records,
                  "queue.buffering.max.messages": 1_000_000, "log_level": 0,
                  "transactional.id": topic, "transaction.timeout.ms": 600_000})
    p.init_transactions(60)
    p.begin_transaction()
    value = b"v" * VALUE_BYTES
    for i, (partition, key) in enumerate(records):
        kw = {} if partition is None else {"partition": partition}
        while True:
            try:
                p.produce(topic, value, key, on_delivery=on_delivery, **kw)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10_000 == 0:
            p.poll(0)
    if p.flush(300):
        raise RuntimeError("records left unacknowledged by the broker")
    return Loaded(topic, ends, p)


def consume_runs(bootstrap: str, pid: int, args: argparse.Namespace) -> dict[str, Run]:
    """Share and classic groups with 1 and 4 members, each run on its own topic."""
    runs: dict[str, Run] = {}
    for kind in ("share", "classic"):
        for n in MEMBER_COUNTS:
            loaded = load_topic(bootstrap, f"bench-{kind}-{n}",
                                ((i % PARTITIONS, None) for i in range(args.records)),
                                args.batch_records)
            group = f"{kind}-{n}-{uuid.uuid4().hex[:8]}"
            if kind == "share":
                set_group_configs(bootstrap, group, {**EARLIEST, **READ_COMMITTED})
            runs[f"{kind} x{n}"] = run = run_members(kind, bootstrap, loaded, group, n, pid)
            print(f"    {kind} x{n}: {fmt_run(run)}", flush=True)
    return runs


def fifo_runs(bootstrap: str, pid: int, args: argparse.Namespace) -> dict[str, Run]:
    """kcompat's message-group ordering vs none, 1 and 4 share members; then the
    ordering with few message groups (``--fifo-few``), where round trips bound it."""
    few_groups, few_per_group = (int(x) for x in args.fifo_few.split("x"))
    cases = [(args.fifo_groups, args.fifo_per_group, o) for o in ("message-group", "none")]
    cases.append((few_groups, few_per_group, "message-group"))
    runs: dict[str, Run] = {}
    for groups, per_group, ordering in cases:
        for n in MEMBER_COUNTS:
            # key g<n>, interleaved: sequence 0 of every message group, then 1, ...
            keys = (b"g%04d" % g for _ in range(per_group) for g in range(groups))
            loaded = load_topic(bootstrap, "bench-fifo", ((None, k) for k in keys),
                                args.batch_records)
            group = f"fifo-{ordering}-{n}-{uuid.uuid4().hex[:8]}"
            set_group_configs(bootstrap, group, {**EARLIEST, **READ_COMMITTED,
                                                 "kc.share.ordering": ordering})
            key = f"{groups}x{per_group} {ordering} x{n}"
            runs[key] = run = run_members("share", bootstrap, loaded, group, n, pid)
            print(f"    {key}: {fmt_run(run)}", flush=True)
    return runs


def fmt_run(run: Run) -> str:
    rate = run.rate()
    head = f"{rate:,.0f} rec/s" if rate else f"INCOMPLETE ({run.distinct} received)"
    extra = ""
    if run.kind == "share":
        tail = (f", all {run.acked} +{(run.acked_ts - run.received_ts) * 1000:.0f} ms later"
                if run.acked_ts and run.received_ts else f", {run.acked} in the end")
        extra = (f"; ACCEPTs confirmed: {run.acked_when_received} when the last record "
                 f"arrived{tail}, {run.ack_errors} ack errors")
    per_member = "/".join(map(str, run.per_member))
    return (f"{head}{extra}; join {run.join_s:.1f} s, duplicates {run.received - run.distinct}, "
            f"per member {per_member}; broker cpu {run.broker_cpu_s:.1f} s in {run.wall_s:.1f} s")


# -- the two brokers --------------------------------------------------------------------

def kcompat_args() -> tuple[str, ...]:
    from bench.compare import KCOMPAT_ARGS

    extra = [a for k, v in SHARE_HEARTBEAT.items() for a in ("--set", f"{k}={v}")]
    return (*KCOMPAT_ARGS, *extra)


def on_kafka(args: argparse.Namespace, workdir: Path) -> dict[str, Run]:
    from bench.compare import KAFKA_HEAP
    from compat_tests.java.kafka_reference import KafkaReference

    ref = KafkaReference(workdir / "kafka", heap=KAFKA_HEAP, overrides=SHARE_HEARTBEAT).start()
    assert ref.proc is not None
    try:
        print(f"Apache Kafka on {ref.bootstrap}", flush=True)
        return consume_runs(ref.bootstrap, ref.proc.pid, args)
    finally:
        ref.close()


def on_kcompat(args: argparse.Namespace, workdir: Path) -> tuple[dict[str, Run], dict[str, Run],
                                                                 list[str]]:
    from compat_tests._broker import Broker

    broker = Broker(workdir / "kcompat", extra_args=kcompat_args()).start()
    assert broker.pid is not None
    try:
        print(f"kcompat on {broker.bootstrap}", flush=True)
        runs = consume_runs(broker.bootstrap, broker.pid, args)
        fifo = fifo_runs(broker.bootstrap, broker.pid, args) if not args.skip_fifo else {}
        prof = profile(broker.bootstrap, broker.pid, args, workdir) if args.profile else []
    finally:
        broker.close()
    return runs, fifo, prof


def profile(bootstrap: str, pid: int, args: argparse.Namespace, workdir: Path) -> list[str]:
    """One more 4-member share run with py-spy recording the broker."""
    from bench.compare import aggregate, spy, stop_spy

    loaded = load_topic(bootstrap, "bench-profile",
                        ((i % PARTITIONS, None) for i in range(args.records)), args.batch_records)
    group = f"share-prof-{uuid.uuid4().hex[:8]}"
    set_group_configs(bootstrap, group, {**EARLIEST, **READ_COMMITTED})
    out = workdir / "pyspy-share.txt"
    spy_proc = spy(pid, out)
    try:
        run = run_members("share", bootstrap, loaded, group, 4, pid)
    finally:
        stop_spy(spy_proc)
    lines = [f"share x4 under py-spy: {fmt_run(run)}",
             *(aggregate(out, top=20) if out.exists() else ["py-spy wrote nothing"])]
    print("\n".join(lines), flush=True)
    return lines


# -- report ----------------------------------------------------------------------------

def cell(run: Run | None) -> str:
    if run is None:
        return "-"
    rate = run.rate()
    if rate is None:
        return f"incomplete: {run.distinct} of {run.records}"
    return (f"{rate:,.0f} rec/s (cpu {run.broker_cpu_s:.1f} s; per member "
            f"{'/'.join(map(str, run.per_member))})")


def report(args: argparse.Namespace, kafka: dict[str, Run], kc: dict[str, Run],
           fifo: dict[str, Run]) -> list[str]:
    lines = ["| workload | Apache Kafka | kcompat | kcompat / Kafka |", "|---|---|---|---|"]
    for key in (f"{k} x{n}" for k in ("share", "classic") for n in MEMBER_COUNTS):
        a, b = kafka.get(key), kc.get(key)
        ra, rb = (a.rate() if a else None), (b.rate() if b else None)
        ratio = f"{rb / ra:.2f}" if ra and rb else "-"
        lines.append(f"| {key.replace(' x', ', members ')} | {cell(a)} | {cell(b)} | {ratio} |")
    lines.append("")
    lines += [f"* {k} — Kafka: {fmt_run(r)}" for k, r in kafka.items()]
    lines += [f"* {k} — kcompat: {fmt_run(r)}" for k, r in kc.items()]
    if fifo:
        lines += ["", f"kcompat FIFO message groups (groups x records per group, key = the "
                      f"group, interleaved, {PARTITIONS} partitions, {VALUE_BYTES} B values):"]
        lines += [f"* {k.replace(' x', ', members ')}: {fmt_run(r)}" for k, r in fifo.items()]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=None, help="default 200000, --quick 100000")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--fifo-groups", type=int, default=1000)
    ap.add_argument("--fifo-per-group", type=int, default=20)
    ap.add_argument("--fifo-few", default="10x200", help="GROUPSxRECORDS: few message groups")
    ap.add_argument("--batch-records", type=int, default=BATCH_RECORDS,
                    help="records per producer batch at most (batch.num.messages)")
    ap.add_argument("--skip-kafka", action="store_true")
    ap.add_argument("--skip-fifo", action="store_true")
    ap.add_argument("--profile", action="store_true", help="py-spy kcompat in one more run")
    ap.add_argument("--no-results", action="store_true", help="do not append to RESULTS.md")
    args = ap.parse_args()
    args.records = args.records or (100_000 if args.quick else 200_000)
    from bench.compare import loadavg, machine

    load = [loadavg()]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kcompat-bench-share-") as tmp:
        kafka = {} if args.skip_kafka else on_kafka(args, Path(tmp))
        load.append(loadavg())
        kc, fifo, prof = on_kcompat(args, Path(tmp))
    load.append(loadavg())
    lines = report(args, kafka, kc, fifo)
    lines += ["", f"Load average (1/5/15 min) at start / after Kafka / at end: {' / '.join(load)}; "
                  f"total {time.monotonic() - t0:.0f} s"]
    if prof:
        lines += ["", "```", *prof, "```"]
    print("\n".join(lines))
    if not args.no_results:
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        cmd = " ".join(["bench/share.py", *sys.argv[1:]])
        with (ROOT / "bench" / "RESULTS.md").open("a") as f:
            f.write(f"\n## Share groups (KIP-932) — {stamp}\n\n`{cmd}`; {'; '.join(machine())}; "
                    f"{args.records} records of {VALUE_BYTES} B, {PARTITIONS} partitions, producer "
                    f"batches of up to {args.batch_records} records, "
                    "confluent-kafka 2.16 members as separate processes\n\n"
                    + "\n".join(lines) + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["member"]:
        member(*sys.argv[2:6])
    else:
        main()
