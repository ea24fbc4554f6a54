"""Real-process chaos (issue 6): 3 brokers, an RF=3 topic with 6 partitions,
an idempotent acks=all producer, and a chaos thread that kill -9s and restarts
partition leaders and SIGSTOPs/SIGCONTs brokers. At the end every acknowledged
record must be readable exactly once, in per-partition order. Leader failover
times (kill -9 until Metadata names a live new leader) are printed.

``CHAOS_SECONDS`` sets the length (default 10 s, the short run collected by
``make test``); ``make chaos`` runs a long one.
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from compat_tests._broker import unique_topic
from compat_tests._cluster import Cluster, consume_all

CHAOS_SECONDS = float(os.environ.get("CHAOS_SECONDS", "10"))
PARTITIONS = 6
SEED = int(os.environ.get("CHAOS_SEED", str(random.randrange(1 << 30))))


class Chaos(threading.Thread):
    def __init__(self, cluster: Cluster, topic: str, until: float, rng: random.Random) -> None:
        super().__init__(daemon=True)
        self.cluster, self.topic, self.until, self.rng = cluster, topic, until, rng
        self.failovers_s: list[float] = []
        self.events: list[str] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while time.monotonic() < self.until:
                time.sleep(self.rng.uniform(1.0, 3.0))
                if self.rng.random() < 0.7:
                    self._kill_leader()
                else:
                    self._pause_broker()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e

    def _kill_leader(self) -> None:
        leaders = self.cluster.wait_for_leaders(self.topic, PARTITIONS)
        partition = self.rng.randrange(PARTITIONS)
        victim = leaders[partition]
        broker = self.cluster.brokers[victim]
        broker.kill()
        killed = time.monotonic()
        self.cluster.wait_for_leaders(self.topic, PARTITIONS, exclude=victim)
        self.failovers_s.append(time.monotonic() - killed)
        self.events.append(f"kill -9 broker {victim} (leader of p{partition}): "
                           f"failover {self.failovers_s[-1]:.2f} s")
        time.sleep(self.rng.uniform(0.5, 2.0))
        broker.start()

    def _pause_broker(self) -> None:
        node = self.rng.choice(sorted(self.cluster.brokers))
        broker = self.cluster.brokers[node]
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGSTOP)
        pause = self.rng.uniform(1.0, 4.0)
        time.sleep(pause)
        broker.proc.send_signal(signal.SIGCONT)
        self.events.append(f"SIGSTOP broker {node} for {pause:.1f} s")


def _verify(got: dict[int, list[bytes]], acked: dict[int, set[int]]) -> None:
    for p in range(PARTITIONS):
        seqs = [int(v.split(b"-")[1]) for v in got[p]]
        assert len(seqs) == len(set(seqs)), f"p{p}: duplicate records"
        assert seqs == sorted(seqs), f"p{p}: records out of order"
        missing = acked[p] - set(seqs)
        assert not missing, f"p{p}: {len(missing)} acknowledged records lost, e.g. " \
                            f"{sorted(missing)[:5]}"


@pytest.mark.timeout(int(CHAOS_SECONDS) + 300)
def test_chaos(tmp_path: Path) -> None:
    print(f"\nchaos seed {SEED}, {CHAOS_SECONDS:.0f} s")
    rng = random.Random(SEED)
    cluster = Cluster(tmp_path)
    try:
        cluster.start()
        topic = unique_topic("chaos")
        cluster.create_topic(topic, PARTITIONS, 3)
        acked: dict[int, set[int]] = {p: set() for p in range(PARTITIONS)}
        failures: list[str] = []

        def report(err, msg):  # type: ignore[no-untyped-def]
            if err is None:
                acked[msg.partition()].add(int(msg.value().split(b"-")[1]))
            else:
                failures.append(str(err))

        producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True,
                             "acks": "all", "linger.ms": 5, "message.timeout.ms": 120000,
                             "log_level": 0})
        chaos = Chaos(cluster, topic, time.monotonic() + CHAOS_SECONDS, rng)
        chaos.start()
        seq = 0
        while chaos.is_alive():
            for _ in range(20):
                p = seq % PARTITIONS
                producer.produce(topic, f"{p}-{seq}".encode(), partition=p, on_delivery=report)
                seq += 1
            producer.poll(0.02)
        chaos.join()
        for broker in cluster.brokers.values():
            if not broker.running:
                broker.start()
        assert chaos.error is None, f"chaos thread failed: {chaos.error!r}"
        assert producer.flush(120) == 0, "records still unacknowledged after 120 s"
        cluster.wait_for_leaders(topic, PARTITIONS)
        got = consume_all(cluster.live_bootstrap(), topic, PARTITIONS, timeout_s=120)
        total_acked = sum(len(s) for s in acked.values())
        for event in chaos.events:
            print("  " + event)
        f = chaos.failovers_s
        if f:
            print(f"leader failover after kill -9: median {statistics.median(f):.2f} s, "
                  f"max {max(f):.2f} s over {len(f)} kills")
        print(f"produced {seq}, acknowledged {total_acked}, failed deliveries {len(failures)}, "
              f"read {sum(len(v) for v in got.values())}")
        _verify(got, acked)
        assert total_acked > 0
    finally:
        cluster.close()
