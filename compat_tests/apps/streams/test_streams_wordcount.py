"""An unmodified Kafka Streams 4.4.0 application, killed -9 and restarted, counts exactly.

The application (``app/``, built from Maven Central by ``_jvm.project_classpath``)
is the classic word count: lines in, ``groupBy(word)`` (Streams creates the
repartition topic ``<app>-words-repartition``), ``count()`` into the RocksDB store
``counts`` (Streams creates its changelog ``<app>-counts-changelog``,
``cleanup.policy=compact``), every update of the KTable out to a topic, with
``processing.guarantee=exactly_once_v2`` and two stream threads (two transactional
producers). The record cache is off, so each word's output is its counts one by one.

The driver produces the input with an idempotent producer (3 partitions, known
lines, so known totals per word) in three parts, and runs the application as a
separate JVM three times:

1. first run: the first part is counted and committed; the second part is produced
   while it runs, and once it has committed some of it, it is killed -9 mid-stream,
   while a transaction of it holds records (checked after the kills: one was left open);
2. second run, same ``state.dir`` (same process id, so the same transactional ids,
   which fence the dead producers): the third part is produced while it runs and it
   is killed -9 mid-stream again, the same way;
3. third run with a wiped ``state.dir`` (new transactional ids: the dead
   transactions end by timeout; the store is rebuilt from its changelog); it runs
   until the application's committed offsets are at the input's end, then is stopped
   with SIGTERM.

Then, read with ``isolation.level=read_committed``: for every word the output holds
exactly the counts 1, 2, ..., total in order (none lost, none counted twice, nothing
of an aborted transaction visible), the changelog's last value per word is its total,
the internal topics exist with Streams' configs and the deployment's replication
factor, Streams has deleted consumed repartition records (DeleteRecords), and the
application's committed offsets are the end offsets of the input and of the
repartition topic.

The same test runs against one kcompat broker, a 3-broker kcompat cluster (every
topic at replication factor 3; the internal topics' partitions are led by other
brokers than the group coordinator) and the reference Apache Kafka 4.4.0.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import signal
import struct
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec

from compat_tests._broker import Broker, unique_topic
from compat_tests._deployment import Deployment
from compat_tests._eos import TXN_BROKER_ARGS, list_offsets, read_confluent
from compat_tests.java._jvm import java_bin, project_classpath
from compat_tests.java.kafka_reference import KafkaReference

APP_DIR = Path(__file__).resolve().parent / "app"
MAIN = "io.kcompat.apps.WordCount"
PARTITIONS = 3
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
         "india", "juliett", "kilo", "lima", "mike", "november", "oscar")
WORDS_PER_LINE = 5
LINES_PER_PART = 1000
PART_RATE = 300             # lines per second while the application runs (3.3 s a part)
DONE_TIMEOUT_S = 120.0
TARGETS = ("kcompat", "kcompat-rf3", "kafka")


def lines(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(WORDS_PER_LINE)) for _ in range(n)]


class StreamsProcess:
    """One run of the word count as its own JVM (stdout: its state changes)."""

    def __init__(self, workdir: Path, run: int, cmd: list[str]) -> None:
        self.out = workdir / f"streams-{run}.stdout"
        self.err = workdir / f"streams-{run}.stderr"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                         start_new_session=True)

    def states(self) -> list[str]:
        return [line.split('"')[3] for line in self.out.read_text().splitlines()
                if line.startswith('{"state"') and line.endswith("}")]  # whole lines

    def tail(self) -> str:
        return (f"--- {self.out.name} ---\n{self.out.read_text()[-1500:]}\n"
                f"--- {self.err.name} (tail) ---\n{self.err.read_text(errors='replace')[-4000:]}")

    def check_alive(self) -> None:
        rc = self.proc.poll()
        assert rc is None, f"the Streams application exited with {rc}\n{self.tail()}"
        assert "ERROR" not in self.states(), f"the Streams application failed\n{self.tail()}"

    def wait_running(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while "RUNNING" not in self.states():
            self.check_alive()
            assert time.monotonic() < deadline, f"not RUNNING in {timeout_s:.0f} s\n{self.tail()}"
            time.sleep(0.1)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def stop(self, timeout_s: float = 30.0) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout_s)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()


class WordCountRun:
    """The topics, input and application runs of one test."""

    def __init__(self, bootstrap: str, replication: int, workdir: Path) -> None:
        self.bootstrap = bootstrap
        self.replication = replication
        self.workdir = workdir
        self.app_id = unique_topic("wordcount")
        self.input = f"{self.app_id}-lines"
        self.output = f"{self.app_id}-counts-out"
        self.repartition = f"{self.app_id}-words-repartition"
        self.changelog = f"{self.app_id}-counts-changelog"
        self.state_dir = workdir / "state"
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        self.expected: Counter[str] = Counter()
        self.produced = 0
        self.runs: list[StreamsProcess] = []
        self.open_at_kills: list[dict[str, int]] = []
        self.classpath = project_classpath(APP_DIR, "streams-app")

    def create_topics(self) -> None:
        futs = self.admin.create_topics(
            [NewTopic(t, PARTITIONS, self.replication) for t in (self.input, self.output)],
            operation_timeout=30, request_timeout=30)
        for f in futs.values():
            f.result(timeout=40)

    def produce(self, part: list[str], rate: float | None = None) -> None:
        """``part`` with an idempotent producer; ``rate`` lines/s, else at once."""
        p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                      "acks": "all", "linger.ms": 5, "log_level": 0})
        errors: list[str] = []

        def acked(err: object, _msg: object) -> None:
            if err is not None:
                errors.append(str(err))

        if rate is not None:  # the producer id first, so that the rate holds from line 0
            p.produce(self.input, key=b"warm-up", value=b"")
            assert p.flush(30) == 0, "no producer id in 30 s"
        t0 = time.monotonic()
        for i, line in enumerate(part):
            if rate is not None:
                delay = t0 + i / rate - time.monotonic()
                if delay > 0:
                    p.poll(delay)
            p.produce(self.input, key=f"line-{self.produced + i}".encode(), value=line.encode(),
                      on_delivery=acked)
            p.poll(0)
        assert p.flush(30) == 0, "input not all delivered in 30 s"
        assert not errors, f"input production failed: {errors[:3]}"
        self.produced += len(part) + (rate is not None)
        for line in part:
            self.expected.update(line.split())

    def start_app(self) -> StreamsProcess:
        cmd = [java_bin(), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
               "-cp", self.classpath, MAIN, self.bootstrap, self.app_id, str(self.state_dir),
               self.input, self.output, str(self.replication)]
        app = StreamsProcess(self.workdir, len(self.runs) + 1, cmd)
        self.runs.append(app)
        return app

    def committed_input(self) -> int:
        """Input lines the application has committed as consumed (0 while unknown)."""
        with contextlib.suppress(Exception):  # no offsets yet, or the group rebalancing
            return sum(max(o, 0) for o in self.group_offsets(self.input).values())
        return 0

    def wait_committed_beyond(self, app: StreamsProcess, floor: int,
                              timeout_s: float = 60.0) -> None:
        """Until ``app`` has committed a transaction that consumed input past ``floor``."""
        deadline = time.monotonic() + timeout_s
        while self.committed_input() <= floor:
            app.check_alive()
            assert time.monotonic() < deadline, \
                f"no input committed beyond {floor} in {timeout_s:.0f} s\n{app.tail()}"
            time.sleep(0.2)

    def produce_while_running(self, app: StreamsProcess, part: list[str]) -> None:
        """Produce ``part`` at ``PART_RATE`` while ``app`` runs, kill -9 it once it
        has committed some of the part (it is processing, and more input is on its
        way) and a transaction of it holds records, then finish the part."""
        errors: list[BaseException] = []
        before = self.produced

        def run() -> None:
            try:
                self.produce(part, rate=PART_RATE)
            except BaseException as e:  # noqa: BLE001 - re-raised below
                errors.append(e)

        producer = threading.Thread(target=run, name="input-producer")
        producer.start()
        self.wait_committed_beyond(app, before + 1)  # the warm-up line and some of the part
        deadline = time.monotonic() + 30
        while not self.open_transactions():  # kill it while a transaction holds records
            app.check_alive()
            assert time.monotonic() < deadline, f"no transaction open in 30 s\n{app.tail()}"
        assert producer.is_alive(), "the input part was produced before the kill"
        app.kill()
        self.open_at_kills.append(self.open_transactions())
        producer.join(60)
        assert not producer.is_alive() and not errors, f"input producer: {errors}"

    def open_transactions(self) -> dict[str, int]:
        """{partition: records above its last stable offset} of the internal topics and
        the output: what an open transaction has written there."""
        topics = (self.repartition, self.changelog, self.output)
        tps = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
        ends = []
        for level in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
            futs = self.admin.list_offsets({tp: OffsetSpec.latest() for tp in tps},
                                           isolation_level=level, request_timeout=30)
            ends.append({f"{tp.topic}-{tp.partition}": f.result(timeout=30).offset
                         for tp, f in futs.items()})
        lso, hw = ends
        return {tp: hw[tp] - lso[tp] for tp in hw if hw[tp] > lso[tp]}

    def group_offsets(self, topic: str, stable: bool = False) -> dict[int, int]:
        """The application's committed offsets; ``stable``: the broker refuses
        (UNSTABLE_OFFSET_COMMIT) while a transaction holds offsets not yet committed."""
        req = ConsumerGroupTopicPartitions(
            self.app_id, [TopicPartition(topic, p) for p in range(PARTITIONS)])
        res = self.admin.list_consumer_group_offsets([req], require_stable=stable)
        got = res[self.app_id].result(timeout=30)
        return {tp.partition: tp.offset for tp in got.topic_partitions}

    def wait_input_consumed(self, app: StreamsProcess) -> dict[str, dict[int, int]]:
        """Until the application's committed offsets are the end offsets of the
        input (the first sub-topology is done) and of the repartition topic (the
        counting one is done too); returns those ends."""
        ends = {self.input: list_offsets(self.bootstrap, self.input, PARTITIONS, committed=False)}
        assert sum(ends[self.input].values()) == self.produced, \
            f"input ends {ends} != {self.produced} lines"
        deadline = time.monotonic() + DONE_TIMEOUT_S
        got: dict[str, dict[int, int]] = {}
        while True:
            app.check_alive()
            with contextlib.suppress(Exception):  # the group may be rebalancing
                got = {t: self.group_offsets(t) for t in (self.input, self.repartition)}
                if got[self.input] == ends[self.input]:
                    ends[self.repartition] = list_offsets(
                        self.bootstrap, self.repartition, PARTITIONS, committed=False)
                    if got[self.repartition] == ends[self.repartition]:
                        return ends
            assert time.monotonic() < deadline, (
                f"committed offsets {got} != ends {ends} after {DONE_TIMEOUT_S:.0f} s\n"
                f"{app.tail()}")
            time.sleep(0.3)

    def read_counts(self, topic: str, committed: bool = True) -> dict[int, list[tuple[str, int]]]:
        """(word, count) records of ``topic`` (read_committed, else read_uncommitted)."""
        ends = list_offsets(self.bootstrap, topic, PARTITIONS, committed=committed)
        recs = read_confluent(self.bootstrap, topic, PARTITIONS, committed=committed, ends=ends)
        return {p: [((r.key or b"").decode(), struct.unpack(">q", r.value)[0]) for r in rs]
                for p, rs in recs.items()}

    def log_start_offsets(self, topic: str) -> dict[int, int]:
        futs = self.admin.list_offsets({TopicPartition(topic, p): OffsetSpec.earliest()
                                        for p in range(PARTITIONS)}, request_timeout=30)
        return {tp.partition: f.result(timeout=30).offset for tp, f in futs.items()}

    def topic_config(self, topic: str, key: str) -> str:
        res = ConfigResource(ConfigResource.Type.TOPIC, topic)
        entries = self.admin.describe_configs([res])[res].result(timeout=30)
        return str(entries[key].value)

    def leaders_and_rf(self, topic: str) -> tuple[dict[int, int], set[int]]:
        md = self.admin.list_topics(topic, timeout=10).topics[topic]
        assert md.error is None, f"{topic}: {md.error}"
        return ({p.id: p.leader for p in md.partitions.values()},
                {len(p.replicas) for p in md.partitions.values()})

    def close(self) -> None:
        for app in self.runs:
            app.close()


@pytest.fixture(params=TARGETS)
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Deployment | KafkaReference]:
    """A single kcompat broker, the session's 3-broker kcompat cluster at
    replication factor 3, or the session's reference Apache Kafka 4.4.0."""
    if request.param == "kafka":
        yield request.getfixturevalue("kafka_reference")
    elif request.param == "kcompat-rf3":
        with request.getfixturevalue("cluster_pool").holding("rf3") as cluster:
            yield Deployment.of_cluster(cluster, "rf3")
    else:
        b = Broker(tmp_path_factory.mktemp("streams-broker"), extra_args=TXN_BROKER_ARGS)
        b.start()
        try:
            yield Deployment.single(b)
        finally:
            b.close()


def test_wordcount_exactly_once_across_kill9(target: Deployment | KafkaReference,
                                             tmp_path: Path) -> None:
    replication = target.replication if isinstance(target, Deployment) else 1
    wc = WordCountRun(target.bootstrap, replication, tmp_path)
    t0 = time.monotonic()
    phases: list[str] = []

    def phase(name: str) -> None:
        phases.append(f"{name} {time.monotonic() - t0:.1f}s")

    try:
        wc.create_topics()
        wc.produce(lines(1, LINES_PER_PART))

        # Run 1: count part 1, then kill -9 while part 2 streams in.
        app = wc.start_app()
        app.wait_running()
        phase("run 1 RUNNING")
        wc.wait_committed_beyond(app, 0)
        phase("committed")
        wc.produce_while_running(app, lines(2, LINES_PER_PART))
        phase("killed")

        # Run 2: same state dir; kill -9 again while part 3 streams in.
        floor = wc.committed_input()
        app = wc.start_app()
        app.wait_running()
        phase("run 2 RUNNING")
        wc.wait_committed_beyond(app, floor)
        phase(f"committed {floor}->{wc.committed_input()}")
        wc.produce_while_running(app, lines(3, LINES_PER_PART))
        phase("killed")

        # Run 3: wiped state dir; until the input is consumed, then SIGTERM.
        shutil.rmtree(wc.state_dir)
        app = wc.start_app()
        app.wait_running()
        phase("run 3 RUNNING")
        ends = wc.wait_input_consumed(app)
        phase("input consumed")
        rc = app.stop()  # the JVM exits 143 on SIGTERM once its shutdown hook is done
        assert rc in (0, 143) and app.states()[-1] == "NOT_RUNNING", \
            f"the Streams application did not close cleanly (exit {rc})\n{app.tail()}"
        assert {t: wc.group_offsets(t, stable=True) for t in ends} == ends
        phase("stopped")

        # Every word's counts, one by one, exactly once.
        updates: dict[str, list[int]] = {}
        for recs in wc.read_counts(wc.output).values():
            for word, count in recs:
                updates.setdefault(word, []).append(count)
        uncommitted = sum(len(r) for r in wc.read_counts(wc.output, committed=False).values())
        committed = sum(len(u) for u in updates.values())
        phase(f"output {committed} committed + {uncommitted - committed} aborted")
        # The kills interrupted transactions that had written records (the driver
        # kills when it sees one open; it may have ended in between, hardly twice).
        assert any(wc.open_at_kills), "no kill left a transaction open"
        assert set(updates) == set(wc.expected), f"words {sorted(updates)}"
        wrong = {w: (n, updates[w][:3], updates[w][-3:], len(updates[w]))
                 for w, n in wc.expected.items() if updates[w] != list(range(1, n + 1))}
        assert not wrong, f"counts not 1..total (word: total, first, last, updates): {wrong}"

        # Streams' internal topics: created by it, with its configs and our replication.
        changelog, repartition = wc.changelog, wc.repartition
        assert wc.topic_config(changelog, "cleanup.policy") == "compact"
        # A repartition topic keeps records until Streams deletes them, in 50 MiB segments.
        assert {key: wc.topic_config(repartition, key) for key in (
            "cleanup.policy", "retention.ms", "segment.bytes", "message.timestamp.type")} == {
            "cleanup.policy": "delete", "retention.ms": "-1", "segment.bytes": "52428800",
            "message.timestamp.type": "CreateTime"}
        last: dict[str, int] = {}
        for recs in wc.read_counts(changelog).values():
            last.update(recs)
        assert last == dict(wc.expected), "changelog's last value per word != its total"
        # Streams deleted (DeleteRecords) repartition records it had consumed (after
        # a commit, at most once a second: a partition may not have been purged).
        starts = wc.log_start_offsets(repartition)
        assert any(starts.values()) and all(
            starts[p] <= ends[repartition][p] for p in range(PARTITIONS)), \
            f"repartition log start offsets {starts}, committed {ends[repartition]}"
        leaders: set[int] = set()
        for topic in (changelog, repartition):
            by_partition, rfs = wc.leaders_and_rf(topic)
            assert len(by_partition) == PARTITIONS and rfs == {replication}, (topic, rfs)
            leaders.update(by_partition.values())
        if replication > 1:  # led by several brokers: not all by any one coordinator
            group = wc.admin.describe_consumer_groups([wc.app_id])[wc.app_id].result(timeout=30)
            assert len(leaders) > 1 and leaders - {group.coordinator.id}, \
                f"internal partitions led by {leaders}, group coordinator {group.coordinator.id}"
        phase("checked")
    except BaseException:
        for app in wc.runs:
            print(app.tail())
        raise
    finally:
        print(f"[{target!r}] " + ", ".join(phases))
        wc.close()
