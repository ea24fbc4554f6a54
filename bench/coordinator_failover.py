"""Group-coordinator failover time on a 3-broker kcompat cluster.

Not a test: it prints a report. Run it once per version of the code under test,
with the same sizes, and compare the figures:

    .venv/bin/python bench/coordinator_failover.py --pythonpath /tmp/oldmain --records 100000
    .venv/bin/python bench/coordinator_failover.py --pythonpath "$PWD" --records 100000

Theory of operation
-------------------
The broker processes run the ``kcompat`` package found under ``--pythonpath``
(``python -P -m kcompat broker`` with ``PYTHONPATH`` set: ``-P`` keeps the
current directory, this checkout, off the front of ``sys.path``); this script
and its helpers (``compat_tests._cluster.Cluster``, kafka-python's protocol
classes on raw connections) come from this checkout. A pre-flight check prints
which ``kcompat`` the brokers import, and the report says which coordinator log
line the brokers wrote: ``loaded N groups ... as coordinator`` (replay on
takeover, before abb8e56) or ``coordinating N groups`` (state applied as it
commits, from abb8e56 on).

1. Three brokers with ``offsets.topic.num.partitions=1``: every group lives in
   ``__consumer_offsets-0`` (replication factor 3, checked), so its log grows
   with every commit.
2. ``--groups`` standalone groups (generation -1, no members) each commit all
   ``--partitions`` partitions of one topic, round after round, until about
   ``--records`` offset records are in the log (one OffsetCommit = one batch).
3. Per kill: the coordinator (FindCoordinator) is killed with SIGKILL and a
   fresh client polls the survivors (FindCoordinator, then OffsetFetch v7 of
   one group at the answer) until the answer is error-free with the offsets
   last committed: ``kill->fetch``. From the new coordinator's JSON log:
   ``kill->leads`` (its ``leads group ... (__consumer_offsets-0)`` line),
   ``leads->fetch`` (that line to the client's success) and ``leads->state``
   (that line to the ``loaded``/``coordinating`` line). ``fetch rtt`` is the
   successful OffsetFetch's round trip (an old coordinator replays inside it).
   ``kill->all led``: once every partition of the topic has a live leader, the
   survivors' last ``leads group`` line (any partition, the metadata log's
   too): a broker busy replaying cannot vote, which delays other elections.
   Every group is then checked at the new coordinator, the killed broker is
   restarted and the script waits until the leader counts it in sync again.
4. Median and max over ``--kills`` kills.

Log timestamps and the client's clock are the same host's wall clock; the
client polls every ``POLL_PAUSE_S``, so figures carry that much resolution.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka.protocol.consumer.group import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compat_tests._broker import Broker, unique_topic  # noqa: E402
from compat_tests._cluster import Cluster  # noqa: E402
from tests.integration._raw import RawConnection  # noqa: E402

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_PARTITION = f"{OFFSETS_TOPIC}-0"
POLL_PAUSE_S = 0.01
FAILOVER_TIMEOUT_S = 120.0
SYNC_TIMEOUT_S = 180.0
SETTLE_S = 2.0
PROBE_GROUP = "bench-probe"
ERROR_NAMES = {0: "NONE", 6: "NOT_LEADER_OR_FOLLOWER", 14: "COORDINATOR_LOAD_IN_PROGRESS",
               15: "COORDINATOR_NOT_AVAILABLE", 16: "NOT_COORDINATOR"}
CommitPartition = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition


# -- brokers running the code under test ----------------------------------------------


class VersionedBroker(Broker):
    """A ``Broker`` whose process imports ``kcompat`` from ``PYTHONPATH`` first."""

    def command(self) -> list[str]:
        cmd = super().command()
        return [cmd[0], "-P", *cmd[1:]]


def code_origin(pythonpath: str) -> str:
    """The ``kcompat/__init__.py`` a broker process started like ours imports."""
    out = subprocess.run(
        [sys.executable, "-P", "-c", "import kcompat; print(kcompat.__file__)"],
        env={**os.environ, "PYTHONPATH": pythonpath}, cwd=str(ROOT),
        capture_output=True, text=True, check=True)
    return out.stdout.strip()


def start_cluster(root: Path, pythonpath: str) -> Cluster:
    cluster = Cluster(root, extra_args=(
        "--set", "offsets.topic.num.partitions=1", "--log-format", "json"))
    cluster.brokers = {
        n: VersionedBroker(b.workdir, port=b.port, extra_args=b.extra_args,
                           env={"PYTHONPATH": pythonpath})
        for n, b in cluster.brokers.items()}
    cluster.start()
    wait_for(lambda: len(cluster._admin().list_topics(timeout=2).brokers) == 3,
             "3 brokers in Metadata", 30.0)
    return cluster


def wait_for(done: Any, what: str, timeout_s: float, pause_s: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if done():
                return
        except Exception:  # noqa: BLE001 - keep polling until the deadline
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(pause_s)


# -- raw requests (kafka-python's codec, one fresh connection each) -------------------


def call(bootstrap: str, request: Any, response_class: Any, timeout_s: float = 5.0) -> Any:
    conn = RawConnection(bootstrap, timeout=timeout_s)
    try:
        return conn.request(request, response_class)
    finally:
        conn.close()


def find_coordinator(bootstrap: str, group: str, timeout_s: float = 5.0) -> tuple[int, int]:
    r = call(bootstrap, FindCoordinatorRequest[3](key=group, key_type=0),
             FindCoordinatorResponse[3], timeout_s)
    return int(r.error_code), int(r.node_id)


def commit_request(group: str, topic: str, offsets: dict[int, int]) -> Any:
    parts = [CommitPartition(partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                             committed_metadata="") for p, o in sorted(offsets.items())]
    return OffsetCommitRequest[7](
        group_id=group, generation_id_or_member_epoch=-1, member_id="",
        group_instance_id=None,
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=parts)])


def commit_errors(response: Any) -> list[int]:
    return [p.error_code for t in response.topics for p in t.partitions if p.error_code]


def fetch_offsets(bootstrap: str, group: str, timeout_s: float = 5.0) -> tuple[int, dict[int, int]]:
    """(error code, {partition: committed offset}) for every partition ``group`` has."""
    r = call(bootstrap, OffsetFetchRequest[7](group_id=group, topics=None, require_stable=False),
             OffsetFetchResponse[7], timeout_s)
    offsets = {p.partition_index: p.committed_offset for t in r.topics for p in t.partitions}
    errors = [p.error_code for t in r.topics for p in t.partitions if p.error_code]
    return int(r.error_code or (errors[0] if errors else 0)), offsets


def offsets_replicas(bootstrap: str) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """(leader, replicas, isr) of ``__consumer_offsets-0`` as ``bootstrap`` sees it."""
    r = call(bootstrap, MetadataRequest[9](
        topics=[MetadataRequest.MetadataRequestTopic(name=OFFSETS_TOPIC)],
        allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False), MetadataResponse[9])
    (p,) = [p for t in r.topics for p in t.partitions if p.partition_index == 0]
    return int(p.leader_id), tuple(p.replica_nodes), tuple(p.isr_nodes)


def coordinator_of(cluster: Cluster, group: str, timeout_s: float = 30.0) -> int:
    found: list[int] = []

    def ask() -> bool:
        for b in cluster.brokers.values():
            if b.running:
                code, node = find_coordinator(b.bootstrap, group, 2.0)
                if code == 0 and cluster.brokers[node].running:
                    found.append(node)
                    return True
        return False
    wait_for(ask, f"a coordinator for {group}", timeout_s)
    return found[-1]


# -- building up the offsets log -------------------------------------------------------


@dataclass
class Workload:
    topic: str
    groups: list[str]
    partitions: int
    rounds: int

    @property
    def records(self) -> int:
        return len(self.groups) * self.partitions * self.rounds

    def offset(self, rnd: int, group_index: int, partition: int) -> int:
        return (rnd + 1) * 1_000_000 + group_index * 1000 + partition

    def expected(self, group_index: int) -> dict[int, int]:
        return {p: self.offset(self.rounds - 1, group_index, p) for p in range(self.partitions)}


def commit_worker(bootstrap: str, work: Workload, indexes: list[int], window: int,
                  errors: collections.Counter[int]) -> None:
    """Commit every round of ``indexes``' groups on one connection, ``window``
    requests in flight (a broker answers a connection in order; a group's next
    commit is sent only after its previous one was answered)."""
    conn = RawConnection(bootstrap, timeout=60.0)
    jobs = [(r, gi) for r in range(work.rounds) for gi in indexes]
    assert len(indexes) > window, "a group must not have two commits in flight"
    in_flight = 0
    try:
        for r, gi in jobs:
            offsets = {p: work.offset(r, gi, p) for p in range(work.partitions)}
            conn.send(commit_request(work.groups[gi], work.topic, offsets))
            in_flight += 1
            if in_flight >= window:
                errors.update(commit_errors(conn.recv(OffsetCommitResponse[7])[1]))
                in_flight -= 1
        for _ in range(in_flight):
            errors.update(commit_errors(conn.recv(OffsetCommitResponse[7])[1]))
    finally:
        conn.close()


def build_state(cluster: Cluster, work: Workload, workers: int, window: int) -> float:
    """Commit the whole workload at the coordinator; the seconds it took."""
    coord = coordinator_of(cluster, work.groups[0])
    bootstrap = cluster.brokers[coord].bootstrap
    errors: collections.Counter[int] = collections.Counter()
    started = time.monotonic()
    threads = [threading.Thread(target=commit_worker, args=(
        bootstrap, work, list(range(len(work.groups)))[w::workers], window, errors))
        for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit(f"OffsetCommit errors while building state: {dict(errors)}")
    return time.monotonic() - started


def check_all_groups(bootstrap: str, work: Workload) -> int:
    """How many groups do not answer exactly their last committed offsets."""
    wrong = 0
    for gi, group in enumerate(work.groups):
        code, offsets = fetch_offsets(bootstrap, group, 30.0)
        wrong += code != 0 or offsets != work.expected(gi)
    return wrong


def offsets_log_bytes(broker: Broker) -> int:
    return sum(f.stat().st_size for f in (broker.data_dir / OFFSETS_PARTITION).glob("*.log"))


# -- broker logs -----------------------------------------------------------------------


def log_lines(broker: Broker, since_wall: float) -> list[tuple[float, str, str]]:
    """(wall time, level, message) of the broker's JSON log lines after ``since_wall``."""
    out = []
    for line in broker.log_path.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        rec = json.loads(line)
        ts = datetime.datetime.fromisoformat(rec["ts"]).timestamp()
        if ts >= since_wall:
            out.append((ts, rec["level"], rec["msg"]))
    return out


def coordinator_markers(lines: list[tuple[float, str, str]]) -> tuple[list[float], float | None]:
    """Times of the ``leads group ... (__consumer_offsets-0)`` lines and of the
    first coordinator state line for ``__consumer_offsets-0`` after them."""
    leads = [ts for ts, _lvl, msg in lines if "leads group" in msg and f"({OFFSETS_PARTITION})" in msg]
    state = [ts for ts, _lvl, msg in lines if OFFSETS_PARTITION in msg
             and ("as coordinator" in msg or msg.startswith("coordinating "))
             and (not leads or ts >= leads[-1])]
    return leads, (state[0] if state else None)


def last_election(cluster: Cluster, since_wall: float) -> float:
    """When the live brokers last logged ``leads group`` (any partition) since ``since_wall``."""
    return max([since_wall] + [ts for b in cluster.brokers.values() if b.running
                               for ts, _lvl, msg in log_lines(b, since_wall) if "leads group" in msg])


# -- one failover ----------------------------------------------------------------------


@dataclass
class Failover:
    killed: int
    killed_was_controller: bool
    new: int = -1
    kill_to_fetch_s: float = 0.0
    fetch_rtt_s: float = 0.0
    kill_to_leads_s: float | None = None
    leads_to_fetch_s: float | None = None
    leads_to_state_s: float | None = None
    leader_elections: int = 0
    kill_to_all_led_s: float | None = None
    groups_wrong: int = 0
    sync_s: float = 0.0
    seen: collections.Counter[str] = field(default_factory=collections.Counter)


def poll_new_coordinator(cluster: Cluster, fo: Failover, group: str, expected: dict[int, int],
                         kill_mono: float) -> float:
    """Poll the survivors until ``group``'s offsets come back right; the wall time."""
    survivors = [n for n, b in cluster.brokers.items() if b.running]
    attempt = 0
    while time.monotonic() - kill_mono < FAILOVER_TIMEOUT_S:
        ask = cluster.brokers[survivors[attempt % len(survivors)]].bootstrap
        attempt += 1
        try:
            code, node = find_coordinator(ask, group, 2.0)
            if code or node not in survivors:
                fo.seen[f"FindCoordinator {ERROR_NAMES.get(code, code)} node {node}"] += 1
            else:
                sent = time.monotonic()
                code, offsets = fetch_offsets(cluster.brokers[node].bootstrap, group, 30.0)
                fo.seen[f"OffsetFetch {ERROR_NAMES.get(code, code)}"] += 1
                if code == 0 and offsets == expected:
                    fo.new, fo.fetch_rtt_s = node, time.monotonic() - sent
                    fo.kill_to_fetch_s = time.monotonic() - kill_mono
                    return time.time()
                if code == 0:
                    fo.seen["OffsetFetch wrong offsets"] += 1
        except OSError as e:
            fo.seen[type(e).__name__] += 1
        time.sleep(POLL_PAUSE_S)
    raise SystemExit(f"no coordinator answered {group} within {FAILOVER_TIMEOUT_S:.0f} s: "
                     f"{dict(fo.seen)}")


def fail_over(cluster: Cluster, work: Workload, check_index: int) -> Failover:
    group = work.groups[check_index]
    coord = coordinator_of(cluster, group)
    controller = cluster.wait_for_controller()
    fo = Failover(killed=coord, killed_was_controller=coord == controller)
    kill_wall, kill_mono = time.time(), time.monotonic()
    cluster.brokers[coord].kill()
    ok_wall = poll_new_coordinator(cluster, fo, group, work.expected(check_index), kill_mono)
    leads, state = coordinator_markers(log_lines(cluster.brokers[fo.new], kill_wall))
    fo.leader_elections = sum(len(coordinator_markers(log_lines(b, kill_wall))[0])
                              for b in cluster.brokers.values() if b.running)
    if leads:
        fo.kill_to_leads_s = leads[-1] - kill_wall
        fo.leads_to_fetch_s = ok_wall - leads[-1]
        fo.leads_to_state_s = None if state is None else state - leads[-1]
    fo.groups_wrong = check_all_groups(cluster.brokers[fo.new].bootstrap, work)
    cluster.wait_for_leaders(work.topic, work.partitions, 60.0, exclude=coord)
    fo.kill_to_all_led_s = last_election(cluster, kill_wall) - kill_wall
    fo.sync_s = restart_and_sync(cluster, coord, work.topic)
    return fo


def restart_and_sync(cluster: Cluster, node: int, topic: str) -> float:
    """Restart ``node`` and wait until the offsets partition's leader, right
    after a fresh commit, counts all three replicas in sync; the seconds it took."""
    started = time.monotonic()
    cluster.brokers[node].start(timeout=120.0)
    probes = iter(range(1, 1 << 30))

    def in_sync() -> bool:
        coord = coordinator_of(cluster, PROBE_GROUP)
        bootstrap = cluster.brokers[coord].bootstrap
        r = call(bootstrap, commit_request(PROBE_GROUP, topic, {0: next(probes)}),
                 OffsetCommitResponse[7], 30.0)
        leader, _replicas, isr = offsets_replicas(bootstrap)
        return not commit_errors(r) and leader == coord and len(isr) == 3
    wait_for(in_sync, f"broker {node} back in the ISR of {OFFSETS_PARTITION}", SYNC_TIMEOUT_S, 0.5)
    time.sleep(SETTLE_S)
    return time.monotonic() - started


# -- report ----------------------------------------------------------------------------


def fmt(v: float | None) -> str:
    return "   n/a" if v is None else f"{v:6.3f}"


def print_failover(i: int, fo: Failover) -> None:
    print(f"kill {i}: broker {fo.killed}{' (controller)' if fo.killed_was_controller else ''}"
          f" -> {fo.new}: kill->fetch {fmt(fo.kill_to_fetch_s)} s, fetch rtt "
          f"{fmt(fo.fetch_rtt_s)} s, kill->leads {fmt(fo.kill_to_leads_s)} s, leads->fetch "
          f"{fmt(fo.leads_to_fetch_s)} s, leads->state {fmt(fo.leads_to_state_s)} s, "
          f"kill->all led {fmt(fo.kill_to_all_led_s)} s, "
          f"elections {fo.leader_elections}, groups wrong {fo.groups_wrong}, "
          f"resync {fo.sync_s:.1f} s", flush=True)
    print(f"        client saw: {dict(fo.seen)}", flush=True)


def summarize(name: str, values: list[float | None]) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return f"{name:<14} n/a"
    return f"{name:<14} median {statistics.median(vals):6.3f} s   max {max(vals):6.3f} s"


def print_summary(failovers: list[Failover]) -> None:
    print("summary over", len(failovers), "kills:")
    for name, attr in (("kill->fetch", "kill_to_fetch_s"), ("fetch rtt", "fetch_rtt_s"),
                       ("kill->leads", "kill_to_leads_s"), ("leads->fetch", "leads_to_fetch_s"),
                       ("leads->state", "leads_to_state_s"),
                       ("kill->all led", "kill_to_all_led_s")):
        print("  " + summarize(name, [getattr(fo, attr) for fo in failovers]))


def print_log_findings(cluster: Cluster) -> None:
    """Which coordinator line the brokers wrote, and their warnings and errors."""
    markers: collections.Counter[str] = collections.Counter()
    problems: collections.Counter[str] = collections.Counter()
    for node, b in cluster.brokers.items():
        for _ts, level, msg in log_lines(b, 0.0):
            if OFFSETS_PARTITION in msg and "as coordinator" in msg:
                markers["loaded ... as coordinator (replay on takeover)"] += 1
            elif OFFSETS_PARTITION in msg and msg.startswith("coordinating "):
                markers["coordinating ... (no replay)"] += 1
            if level in ("WARNING", "ERROR", "CRITICAL"):
                problems[f"broker {node} {level}: {msg[:160]}"] += 1
    print("coordinator log lines:", dict(markers) or "none")
    print(f"broker warnings/errors: {sum(problems.values())}")
    for line, n in problems.most_common(15):
        print(f"  {n:5d} x {line}")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--pythonpath", default=str(ROOT), help="tree whose kcompat the brokers run")
    p.add_argument("--records", type=int, default=100_000, help="offset records to commit")
    p.add_argument("--groups", type=int, default=200)
    p.add_argument("--partitions", type=int, default=20, help="partitions per commit")
    p.add_argument("--kills", type=int, default=3)
    p.add_argument("--workers", type=int, default=8, help="committing connections")
    p.add_argument("--window", type=int, default=8, help="commits in flight per connection")
    p.add_argument("--keep", action="store_true", help="keep the brokers' directories")
    return p.parse_args()


def run(args: argparse.Namespace, root: Path) -> None:
    origin = code_origin(args.pythonpath)
    print(f"code under test: kcompat from {origin}; load average {os.getloadavg()}", flush=True)
    rounds = max(1, round(args.records / (args.groups * args.partitions)))
    work = Workload(unique_topic("bench-failover"),
                    [f"bench-g{i:04d}" for i in range(args.groups)], args.partitions, rounds)
    cluster = start_cluster(root, args.pythonpath)
    try:
        cluster.create_topic(work.topic, work.partitions, 3)
        coord = coordinator_of(cluster, work.groups[0])
        leader, replicas, isr = offsets_replicas(cluster.brokers[coord].bootstrap)
        print(f"{OFFSETS_PARTITION}: leader {leader} replicas {replicas} isr {isr}", flush=True)
        if len(replicas) != 3:
            raise SystemExit(f"{OFFSETS_PARTITION} has replicas {replicas}, not 3")
        took = build_state(cluster, work, args.workers, args.window)
        print(f"committed {work.records} offset records ({len(work.groups)} groups x "
              f"{work.partitions} partitions x {work.rounds} rounds) in {took:.1f} s "
              f"({work.records / took:.0f} records/s); {OFFSETS_PARTITION} log "
              f"{offsets_log_bytes(cluster.brokers[coord]) / 2**20:.1f} MiB", flush=True)
        wrong = check_all_groups(cluster.brokers[coord].bootstrap, work)
        print(f"groups with wrong offsets before the first kill: {wrong}", flush=True)
        failovers = []
        for i in range(args.kills):
            failovers.append(fail_over(cluster, work, (len(work.groups) // 2 + i) % args.groups))
            print_failover(i + 1, failovers[-1])
        print_summary(failovers)
        print_log_findings(cluster)
    finally:
        cluster.close()
    print(f"load average at the end {os.getloadavg()}")


def main() -> None:
    args = parse_args()
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="kcompat-failover-"))
    print(f"brokers' directories: {root}")
    try:
        run(args, root)
    finally:
        if not args.keep:
            subprocess.run(["rm", "-rf", str(root)], check=False)
    print(f"wall time {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
