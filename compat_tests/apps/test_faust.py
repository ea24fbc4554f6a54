"""Faust (faust-streaming) with a Table, stopped and restarted as a new worker process,
against a single kcompat broker, a 3-broker kcompat cluster (every topic, Faust's
internal ones and ``__consumer_offsets`` at replication factor 3) and Apache Kafka
4.4.0 (same assertions).

The application is ``compat_tests/apps/faust_wordcount.py``, run unmodified as
``python -m compat_tests.apps.faust_wordcount worker``: lines -> words (a repartition
topic Faust declares) -> a Table of counts (memory store, changelog topic created by
Faust, compacted) -> ``word -> count`` on the output topic; at_least_once.

Each scenario: a producer thread writes 1500 lines for ten seconds; worker 1 starts, and
once it has counted a third of the words it is stopped (SIGTERM, or kill -9) while input
keeps arriving; worker 2, a new process in the same group, restores the table from the
changelog and processes the rest. Asserted on both brokers:

* worker 2 continues from the changelog: for every word its first count is the value
  worker 1 left in the changelog plus one, then one by one;
* at least once from the words topic on: no word record uncounted;
* every line below worker 1's last committed offsets of the input was split
  (``_faust_trace.align`` explains the words topic as lines split in order): a broker
  that lost an acknowledged record of worker 1, or answered an OffsetCommit worker 2 did
  not then see, fails here;
* the changelog's final values equal the last emitted counts; Faust created it compacted;
* Faust created its internal topics (words, changelog) at the deployment's replication
  factor (``FAUST_WC_REPLICATION``); on the cluster the partitions are led by more than
  one broker, not all by the group coordinator.

What Faust 0.15.3 does not guarantee, seen alike on kcompat and on Kafka 4.4.0 (printed
per run, written up in FINDINGS.md): after kill -9 it counts again what worker 1 had
processed past its last commit (at-least-once: hundreds to a few thousand extra), and
now and then a worker that starts with a backlog skips a few records right after its
committed offsets (its recovery resumes the partitions before seeking them to the
committed offsets; faust-streaming issue 216), so the words topic can miss a line's
words. With ``processing_guarantee="exactly_once"`` a restarted worker never finishes
its recovery on either broker (it waits for the offset of the last transaction marker
of the changelog; faust-streaming issue 47), so that mode is not run here.

Each run prints which lines were never split (and where worker 2 resumed), which were
split more than once, and the words no line explains. ``FAUST_WC_LOG_LEVEL=debug`` runs
the workers at Faust's debug level (aiokafka's requests and answers, fetch positions and
seeks in ``worker1.log``/``worker2.log``; ``--basetemp`` keeps them).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

from compat_tests._broker import REPO_ROOT, kill_process, unique_topic
from compat_tests._deployment import Deployment
from compat_tests.apps._faust_trace import align, ranges
from compat_tests.apps.conftest import DEPLOYMENTS, deployment_of

PARTITIONS = 2
VOCABULARY = [f"w{i:02d}" for i in range(24)]
LINES = 1500
LINES_PER_SECOND = 150
WORKER_START_TIMEOUT_S = 60.0
SETTLE_TIMEOUT_S = 90.0
QUIET_S = 5.0


@pytest.fixture(scope="module", params=DEPLOYMENTS)
def deployment(request: pytest.FixtureRequest,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """(bootstrap, replication factor of every topic, Faust's internal ones included)."""
    # Here, not at import: `make test` collects this module and deselects it (marker apps).
    # A failure, not a skip: `make test-apps` installs the extra, a skip would hide that step.
    try:
        import faust  # noqa: F401
    except ImportError:
        pytest.fail("faust-streaming is not installed: `make test-apps` installs the extra 'apps'")
    yield from deployment_of(request, tmp_path_factory, "faust", Deployment.cluster_args("rf3"))


def _lines(seed: int) -> list[str]:
    rnd = random.Random(seed)
    return [" ".join(rnd.choice(VOCABULARY) for _ in range(rnd.randrange(3, 8)))
            for _ in range(LINES)]


class Worker:
    """One ``faust worker`` process of the word-count app."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                # --without-web: `faust worker` starts its web server on port 6066 unless
                # told not to (the app's web_enabled=False does not stop it), so two
                # workers on one machine would collide.
                [sys.executable, "-m", "compat_tests.apps.faust_wordcount", "worker",
                 "-l", os.environ.get("FAUST_WC_LOG_LEVEL", "info"), "--without-web"],
                cwd=str(REPO_ROOT), env=env, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True)

    def sigterm(self, timeout: float = 30.0) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            kill_process(self.proc)
            raise AssertionError(
                f"faust worker ignored SIGTERM for {timeout}s\n{self.tail()}") from exc

    def kill9(self) -> int | None:
        return kill_process(self.proc)

    def ready(self) -> bool:
        """Faust logs ``[^Worker]: Ready`` once partitions are assigned and the tables
        recovered from their changelogs."""
        return self.log.exists() and "[^Worker]: Ready" in self.log.read_text(errors="replace")

    def alive(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"faust worker exited ({self.proc.returncode})\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


class TopicLog:
    """Reads a topic from the beginning (read_committed); ``poll`` reads what is new and
    keeps every record as (partition, offset, key, value) with JSON values."""

    def __init__(self, bootstrap: str, topic: str, json_keys: bool = False,
                 json_values: bool = True) -> None:
        self.json_keys, self.json_values = json_keys, json_values
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap,
                                      isolation_level="read_committed",
                                      auto_offset_reset="earliest", enable_auto_commit=False)
        self.tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        self.consumer.assign(self.tps)
        self.consumer.seek_to_beginning(*self.tps)
        self.records: list[tuple[int, int, str, Any]] = []

    def poll(self, budget_s: float = 0.5) -> TopicLog:
        deadline = time.monotonic() + budget_s
        while time.monotonic() < deadline:
            batch = self.consumer.poll(timeout_ms=300)
            if not batch:
                break
            for recs in batch.values():
                for r in recs:
                    key = json.loads(r.key) if self.json_keys else r.key.decode()
                    value = (None if r.value is None else
                             json.loads(r.value) if self.json_values else r.value.decode())
                    self.records.append((r.partition, r.offset, key, value))
        return self

    def read_to_end(self, timeout_s: float = 30.0) -> TopicLog:
        ends = self.consumer.end_offsets(self.tps)
        deadline = time.monotonic() + timeout_s
        while any(self.consumer.position(tp) < ends[tp] for tp in self.tps):
            assert time.monotonic() < deadline, f"{self.tps[0].topic} not read to its end"
            self.poll()
        return self

    def latest(self) -> dict[str, int]:
        return {k: int(v) for _, _, k, v in self.records if v is not None}

    def close(self) -> None:
        self.consumer.close()


def _produce_throttled(bootstrap: str, topic: str, lines: list[str],
                       errors: list[BaseException]) -> None:
    try:
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        chunk = LINES_PER_SECOND // 10
        for i in range(0, len(lines), chunk):
            for j, line in enumerate(lines[i:i + chunk], start=i):
                producer.send(topic, key=str(j).encode(), value=line.encode())
            producer.flush(30)
            time.sleep(0.1)
        producer.close()
    except BaseException as exc:  # noqa: BLE001 - reported by the test thread
        errors.append(exc)


def _create_topics(bootstrap: str, replication: int, *topics: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(t, PARTITIONS, replication) for t in topics])
    finally:
        admin.close()


def _topic_config(bootstrap: str, topic: str, key: str) -> str:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        res = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic, {key: None})],
                                     config_filter="all")
    finally:
        admin.close()
    return str(res["topic"][topic][key]["value"])


def _leaders_and_replication(bootstrap: str, group: str, topics: list[str]
                             ) -> tuple[int, dict[str, set[int]], dict[str, set[int]]]:
    """(group coordinator id, {topic: partition leaders}, {topic: replica counts})."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    coordinator = admin.describe_consumer_groups([group])[group].result(timeout=30).coordinator.id
    leaders: dict[str, set[int]] = {}
    replicas: dict[str, set[int]] = {}
    for topic in topics:
        md = admin.list_topics(topic, timeout=10).topics[topic]
        assert md.error is None and len(md.partitions) == PARTITIONS, (topic, md.error)
        leaders[topic] = {p.leader for p in md.partitions.values()}
        replicas[topic] = {len(p.replicas) for p in md.partitions.values()}
    return coordinator, leaders, replicas


def _group_lag(bootstrap: str, group: str, topics: list[str]
               ) -> tuple[dict[str, int], dict[tuple[str, int], int]]:
    """(per topic: records between the group's committed offsets and the end,
    {(topic, partition): committed offset})."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        committed = admin.list_group_offsets({group: None})[group]
        tps = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
        ends = consumer.end_offsets(tps)
    finally:
        admin.close()
        consumer.close()
    lag: dict[str, int] = {}
    done: dict[tuple[str, int], int] = {}
    for tp in tps:
        done[(tp.topic, tp.partition)] = committed[tp].offset if tp in committed else 0
        name = tp.topic.rsplit("-", 1)[-1]
        lag[name] = lag.get(name, 0) + ends[tp] - done[(tp.topic, tp.partition)]
    return lag, done


def _wait(cond: Any, timeout: float, what: str, workers: list[Worker]) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        for w in workers:
            w.alive()
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n"
                                 + "\n".join(w.tail() for w in workers))
        time.sleep(0.2)


SCENARIOS = [pytest.param("sigterm", id="sigterm"), pytest.param("kill9", id="kill9")]


def _read(bootstrap: str, topic: str, json_keys: bool = False,
          json_values: bool = True) -> TopicLog:
    log = TopicLog(bootstrap, topic, json_keys, json_values)
    try:
        return log.read_to_end()
    finally:
        log.close()


@pytest.mark.parametrize("stop", SCENARIOS)
def test_table_survives_worker_restart(deployment: tuple[str, int], tmp_path: Path,
                                       stop: str) -> None:
    bootstrap, replication = deployment
    app_id = unique_topic(f"faust-wc-{stop}")
    in_topic, out_topic = f"{app_id}-lines", f"{app_id}-counts"
    words_topic, changelog = f"{app_id}-words", f"{app_id}-word-counts-changelog"
    _create_topics(bootstrap, replication, in_topic, out_topic)
    lines = _lines(seed=zlib.crc32(stop.encode()))
    expected = Counter(w for line in lines for w in line.split())
    total = sum(expected.values())
    env = dict(os.environ, PYTHONUNBUFFERED="1", FAUST_WC_BROKER=bootstrap,
               FAUST_WC_APP_ID=app_id, FAUST_WC_INPUT=in_topic, FAUST_WC_OUTPUT=out_topic,
               FAUST_WC_PARTITIONS=str(PARTITIONS), FAUST_WC_REPLICATION=str(replication),
               FAUST_WC_GUARANTEE="at_least_once",
               FAUST_WC_DATADIR=str(tmp_path / "faust-data"))
    errors: list[BaseException] = []
    producer = threading.Thread(target=_produce_throttled,
                                args=(bootstrap, in_topic, lines, errors), daemon=True)
    out = TopicLog(bootstrap, out_topic)
    t0 = time.monotonic()
    w1 = Worker(env, tmp_path / "worker1.log")
    workers = [w1]
    try:
        _wait(w1.ready, WORKER_START_TIMEOUT_S, "worker 1 to be ready", workers)
        t_ready1 = time.monotonic() - t0
        producer.start()
        # Worker 1 counts about a third of the words, then is stopped while input flows.
        _wait(lambda: sum(out.poll().latest().values()) >= total // 3,
              WORKER_START_TIMEOUT_S, "worker 1 to count a third of the words", workers)
        if stop == "sigterm":
            rc = w1.sigterm()
            assert rc == 0, f"worker 1 exit code {rc} after SIGTERM\n{w1.tail()}"
        else:
            w1.kill9()
        t_stop = time.monotonic() - t0
        still_producing = producer.is_alive()
        time.sleep(1.0)  # requests worker 1 had in flight
        # What worker 1 left: its output, its table in the changelog, its commits.
        out_before = {(p, o) for p, o, _, _ in out.read_to_end().records}
        counted_by_w1 = sum(out.latest().values())
        table_at_stop = _read(bootstrap, changelog, json_keys=True).latest()
        lag_at_stop, committed_at_stop = _group_lag(bootstrap, app_id, [in_topic, words_topic])

        w2 = Worker(env, tmp_path / "worker2.log")
        workers = [w2]
        producer.join(60)
        assert not errors, errors
        assert not producer.is_alive()
        _wait(w2.ready, WORKER_START_TIMEOUT_S, "worker 2 to restore the table", workers)
        t_ready2 = time.monotonic() - t0
        # Done once worker 2 emitted nothing more for QUIET_S (it may not commit the end
        # of its input: Faust's commit stops at a gap, see the module docstring).
        quiet = {"n": -1, "since": time.monotonic()}

        def quiet_for() -> bool:
            n = len(out.poll().records)
            if n != quiet["n"]:
                quiet.update(n=n, since=time.monotonic())
            return time.monotonic() - quiet["since"] >= QUIET_S

        _wait(quiet_for, SETTLE_TIMEOUT_S, "worker 2 to finish the input", workers)
        out.read_to_end()
        assert w2.sigterm() == 0, w2.tail()
        elapsed = time.monotonic() - t0
    finally:
        for w in workers:
            if w.proc.poll() is None:
                w.kill9()
        out.close()

    final = out.latest()
    changelog_final = _read(bootstrap, changelog, json_keys=True).latest()
    words_log = _read(bootstrap, words_topic, json_values=False).records
    words = Counter(k for _, _, k, _ in words_log)
    # Which lines the words topic holds the words of (see _faust_trace): the lines worker 2
    # skipped (F2) and the words no line explains.
    lines_log = _read(bootstrap, in_topic, json_values=False).records
    split = align({p: [v for q, _, _, v in sorted(lines_log) if q == p] for p in range(PARTITIONS)},
                  {p: [v for q, _, _, v in sorted(words_log) if q == p] for p in range(PARTITIONS)})
    resumed_at = {p: committed_at_stop[(in_topic, p)] for p in range(PARTITIONS)}
    by_w2: dict[str, list[int]] = {}
    for p, o, k, v in sorted(out.records):
        if (p, o) not in out_before:
            by_w2.setdefault(k, []).append(int(v))
    split_diff = {w: words[w] - n for w, n in expected.items() if words[w] != n}
    topics = [in_topic, words_topic, changelog, out_topic]
    coordinator, leaders, replicas = _leaders_and_replication(bootstrap, app_id, topics)
    print(f"\n[{bootstrap} rf {replication} {stop}] {len(lines)} lines, {total} words; worker 1 ready at"
          f" {t_ready1:.1f}s, stopped at {t_stop:.1f}s with {counted_by_w1} counted (input"
          f" still flowing: {still_producing}; uncommitted {lag_at_stop}); worker 2 ready at"
          f" {t_ready2:.1f}s, done at {elapsed:.1f}s; counts - expected:"
          f" {sum(final.values()) - total}; words topic - words in lines: {split_diff};"
          f" lines never split: {ranges(split.unsplit) or 'none'} (worker 2 resumed the lines"
          f" at {resumed_at}); split more than once: {len(split.repeated)} lines"
          f" ({ranges(sorted(split.repeated))[:200]}); words no line explains:"
          f" {split.unexplained_words}; coordinator {coordinator}, leaders {leaders}")

    assert 0 < counted_by_w1 < total
    # What the broker answers for: every line below worker 1's last committed offset was
    # split (Faust flushes its producer before it commits, so a line committed whose words
    # are missing would be an acknowledged record lost, or a commit answered before it
    # held). Lines never split at or after those offsets are F2's (Faust's recovery, see
    # the module docstring): printed, not asserted. Words no line explains are printed,
    # not asserted: a worker stopped between two sends of one line leaves part of it (its
    # words go out one by one, and on the cluster the two words partitions' batches to
    # two leaders), and worker 2 splits that line again.
    assert split.complete
    below = [(p, o) for p, o in split.unsplit if o < resumed_at[p]]
    assert not below, f"lines below the committed offsets {resumed_at} never split: {ranges(below)}"
    assert table_at_stop, "worker 1 left no table in the changelog"
    # Worker 2 restored the table from the changelog: for every word its first count is
    # the count worker 1 left there plus one, and then it counts on one by one.
    for w, values in by_w2.items():
        first = table_at_stop.get(w, 0) + 1
        assert values == list(range(first, first + len(values))), (w, first, values[:5])
    assert set(by_w2) == set(expected)
    # At least once, from the words topic on: no word record uncounted.
    uncounted = {w: (final.get(w, 0), n) for w, n in words.items() if final.get(w, 0) < n}
    assert not uncounted, f"word records not counted (count, records): {uncounted}"
    assert set(final) == set(expected)
    # The changelog (what a third worker would restore) agrees with the emitted counts.
    assert changelog_final == final
    # Faust created the changelog topic compacted.
    assert _topic_config(bootstrap, changelog, "cleanup.policy") == "compact"
    # Faust created its internal topics at the replication factor it was given; on the
    # cluster the partitions are led by several brokers, not all by the coordinator.
    assert all(rfs == {replication} for rfs in replicas.values()), replicas
    if replication > 1:
        led_by = set().union(*leaders.values())
        assert len(led_by) > 1 and led_by - {coordinator}, (coordinator, leaders)
