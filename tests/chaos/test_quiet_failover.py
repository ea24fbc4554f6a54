"""Failover of quiet partitions (issue 16): 3 brokers, ``IDLE_PARTITIONS``
(300 in ``make test``, 2,000 in ``make chaos``) RF 3 partitions that see no traffic — their Raft groups
quiesce: no ticks, no fetch round trips — beside a busy RF 3 topic with an
idempotent acks=all producer. The broker that leads the most quiet
partitions is killed -9: every partition it led must get a live leader
(its followers learn it is gone from the broker-pair heartbeat, not from
their own timers, which are stopped), quiet ones as well as busy ones;
every acknowledged record of the busy topic is read back exactly once; and
a record produced to every quiet partition after the failover is readable
(the woken groups replicate and commit again). The restarted broker rejoins
and its partitions go back to it or stay led.

Failover times (kill -9 until Metadata from a live broker names a live
leader) are printed per kind, never asserted: timings are benchmark figures
(``bench/scale.py`` measures the same at 5,000 partitions).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests._broker import unique_topic
from compat_tests._cluster import Cluster, consume_all, diagnostics

IDLE_PARTITIONS = int(os.environ.get("IDLE_PARTITIONS", "300"))
PER_TOPIC = 500
BUSY_PARTITIONS = 6


def _leaders(admin: AdminClient, topics: list[str]) -> dict[tuple[str, int], int]:
    md = admin.list_topics(timeout=10)
    out: dict[tuple[str, int], int] = {}
    for name in topics:
        t = md.topics.get(name)
        if t is not None:
            out.update({(name, p.id): p.leader for p in t.partitions.values()})
    return out


def _create(admin: AdminClient, topics: dict[str, int]) -> None:
    futures = admin.create_topics([NewTopic(n, p, 3) for n, p in topics.items()],
                                  operation_timeout=120, request_timeout=120)
    for f in futures.values():
        f.result(timeout=180)


@pytest.mark.timeout(600)
def test_quiet_partitions_fail_over(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    with contextlib.closing(cluster), diagnostics(cluster):
        cluster.start()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
        idle = {unique_topic(f"quiet{i}"): min(PER_TOPIC, IDLE_PARTITIONS - i * PER_TOPIC)
                for i in range((IDLE_PARTITIONS + PER_TOPIC - 1) // PER_TOPIC)}
        busy = unique_topic("busy")
        started = time.monotonic()
        for name, count in idle.items():
            _create(admin, {name: count})
        _create(admin, {busy: BUSY_PARTITIONS})
        names = [*idle, busy]
        total = IDLE_PARTITIONS + BUSY_PARTITIONS
        deadline = time.monotonic() + 120
        while True:
            leaders = _leaders(admin, names)
            if len(leaders) == total and all(v >= 0 for v in leaders.values()):
                break
            assert time.monotonic() < deadline, "not every partition got a first leader"
            time.sleep(0.5)
        print(f"\n{total} partitions created and led in {time.monotonic() - started:.1f} s")

        acked: dict[int, set[int]] = {p: set() for p in range(BUSY_PARTITIONS)}
        failures: list[str] = []
        stop = threading.Event()

        def report(err, msg):  # type: ignore[no-untyped-def]
            if err is None:
                acked[msg.partition()].add(int(msg.value().split(b"-")[1]))
            else:
                failures.append(str(err))

        def produce() -> None:
            producer = Producer({"bootstrap.servers": cluster.bootstrap,
                                 "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                                 "message.timeout.ms": 120000, "log_level": 0})
            seq = 0
            while not stop.is_set():
                p = seq % BUSY_PARTITIONS
                producer.produce(busy, f"{p}-{seq}".encode(), partition=p, on_delivery=report)
                seq += 1
                producer.poll(0.005)
            assert producer.flush(120) == 0, "busy records unacknowledged after 120 s"

        writer = threading.Thread(target=produce, daemon=True)
        writer.start()
        time.sleep(4.0)  # the idle groups quiesce within a few ticks

        leaders = _leaders(admin, names)
        counts = {n: sum(1 for (t, _p), v in leaders.items() if v == n and t != busy)
                  for n in cluster.brokers}
        victim = max(counts, key=lambda n: counts[n])
        moved_from = {tp for tp, v in leaders.items() if v == victim}
        assert moved_from, f"broker {victim} leads nothing: {counts}"
        cluster.brokers[victim].kill()
        killed = time.monotonic()
        live = AdminClient({"bootstrap.servers": cluster.live_bootstrap(), "log_level": 0})
        moved_at: dict[tuple[str, int], float] = {}
        deadline = killed + 60
        while len(moved_at) < len(moved_from):
            assert time.monotonic() < deadline, \
                f"{len(moved_from) - len(moved_at)} of {len(moved_from)} partitions of " \
                f"broker {victim} have no live leader 60 s after its kill -9"
            try:
                now_leaders = _leaders(live, names)
            except Exception:  # noqa: BLE001 - a broker busy electing: ask again
                continue
            now = time.monotonic() - killed
            for tp in moved_from - set(moved_at):
                ldr = now_leaders.get(tp, -1)
                if ldr >= 0 and ldr != victim:
                    moved_at[tp] = now
            time.sleep(0.2)  # Metadata of thousands of partitions is not free
        quiet = [s for tp, s in moved_at.items() if tp[0] != busy]
        loud = [s for tp, s in moved_at.items() if tp[0] == busy]
        print(f"kill -9 broker {victim}: {len(quiet)} quiet partitions failed over, median "
              f"{statistics.median(quiet):.2f} s, all {max(quiet):.2f} s"
              + (f"; {len(loud)} busy, median {statistics.median(loud):.2f} s" if loud else ""))

        # every quiet partition takes a write again (woken groups commit)
        probe = Producer({"bootstrap.servers": cluster.live_bootstrap(), "acks": "all",
                          "linger.ms": 20, "message.timeout.ms": 60000, "log_level": 0})
        errors: list[str] = []
        for name, count in idle.items():
            for p in range(count):
                probe.produce(name, f"after-{p}".encode(), partition=p,
                              on_delivery=lambda err, _m: err and errors.append(str(err)))
            probe.poll(0)
        assert probe.flush(120) == 0 and not errors, f"quiet partitions refused: {errors[:3]}"

        cluster.brokers[victim].start().wait_serving()  # then a reader may bootstrap from it
        stop.set()
        writer.join(180)
        assert not writer.is_alive(), "the busy producer did not finish"
        assert not failures, f"busy deliveries failed: {failures[:3]}"
        got = consume_all(cluster.live_bootstrap(), busy, BUSY_PARTITIONS, timeout_s=120)
        for p in range(BUSY_PARTITIONS):
            seqs = [int(v.split(b"-")[1]) for v in got[p]]
            assert len(seqs) == len(set(seqs)), f"busy p{p}: duplicates"
            assert not acked[p] - set(seqs), f"busy p{p}: acknowledged records lost"
        sample = next(iter(idle))
        got_idle = consume_all(cluster.live_bootstrap(), sample, idle[sample], timeout_s=120)
        assert all(got_idle[p] == [f"after-{p}".encode()] for p in range(idle[sample])), \
            "a quiet partition lost or duplicated its post-failover record"
