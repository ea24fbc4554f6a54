"""Share groups (KIP-932) keep their promises across kill -9, with real broker
processes and confluent-kafka ShareConsumer members (``compat_tests/_share_member.py``).

A 3-broker cluster (``CLUSTER_BROKER_ARGS``: 10 ``__share_group_state``
partitions, locks of 1 s allowed) serves a 2-partition topic at RF 3; an
idempotent acks=all producer sends ``RECORDS`` records (value ``i`` to
partition ``i % 2``) in chunks over ``PRODUCE_S`` seconds, so that the members
are busy all along. The share group reads from the earliest offset with 2 s
acquisition locks; three members (two acknowledge with ShareAcknowledge, one
on its next ShareFetch) RELEASE about 10 % of what they get while its delivery
count is below 3 and ACCEPT the rest. ``__share_group_state`` is created
beforehand by a throwaway member on another topic, so the first ShareFetches
of the run do not race its creation.

Two brokers are killed with SIGKILL mid-run and restarted after ``DOWN_S``
seconds on the same data dir and port:

1. at a third of the records accepted, the leader of partition 0 (the
   share-partition moves to a new leader, which claims the share key and
   rebuilds its machine from ``__share_group_state``);
2. at two thirds, the leader of the ``__share_group_state`` partition holding
   the share key ``group:topic:0`` (``partition_for``) — whichever broker
   leads it then (noted if it also leads partition 0): writes in flight to
   it time out and the key is claimed again.

The run ends once every record was ACCEPTed by some member and the share
state the brokers committed (``__share_group_state`` read back with a plain
consumer and folded with ``ShareStateLog``) has every offset of both
partitions finished. What ``kcompat/broker/groups/shares.py`` promises, checked per
record:

- at least once: every record ends acknowledged, and by a member's ACCEPT;
- an acquisition is durable before the records are returned, so no delivery
  count is handed out twice: each delivery a consumer saw has a count of its
  own, a later one (by the members' shared wall clock) a count greater than
  every earlier one, and a record still in the committed window has a count
  at least the highest one seen;
- an answered acknowledgement is never undone: at most one confirmed ACCEPT
  per record, and no delivery with a count above it. (An ACCEPT answered only
  after the record was handed out again — its lock ran out first — does not
  count: Kafka answers it NONE when another member's ACCEPT has moved the
  start offset past the record, as it skips acknowledgements below the start
  offset; kcompat does the same.) (An acknowledgement
  answered with an error has an unknown outcome — its write may have
  committed after the broker gave up waiting — so the record may or may not
  come back; both are fine.)

Last, no member may have died: a broker failover must give a ShareConsumer
only errors it retries. A member that dies is replaced at once (so the
promises above are still checked) and the test fails at the end with its
error.

Run with ``-s`` to see the kills, the deliveries unconfirmed at each, and
what the run redelivered.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from compat_tests._broker import unique_topic
from compat_tests._cluster import Cluster, diagnostics
from compat_tests._deployment import CLUSTER_BROKER_ARGS
from compat_tests._groups import unique_group, wait_for
from compat_tests._share import (
    Delivery,
    Ledger,
    ShareMember,
    require_share_apis,
    set_group_configs,
    stop_all,
)
from kcompat.broker.controller.internal_topics import partition_for
from kcompat.group.share_partition import RecordState, SharePartition
from kcompat.group.share_state import SHARE_STATE_TOPIC, ShareStateLog

RECORDS = 400
PARTITIONS = 2
PER_PARTITION = RECORDS // PARTITIONS
STATE_PARTITIONS = 10  # share.coordinator.state.topic.num.partitions in CLUSTER_BROKER_ARGS
PRODUCE_S = 10.0
CHUNKS = 40
DOWN_S = 3.0
FINISH_TIMEOUT_S = 25.0
GROUP_CONFIGS = {"share.auto.offset.reset": "earliest",
                 "share.record.lock.duration.ms": "2000",
                 # lock expiries after a kill count deliveries too: keep records
                 # from being archived before the random policy accepts them
                 "share.delivery.count.limit": "10"}
MEMBER_ACKS = ("commit", "poll", "commit")


class Trickle(threading.Thread):
    """Produces value ``i`` to partition ``i % PARTITIONS``, ``CHUNKS`` chunks
    spread over ``PRODUCE_S`` seconds (acks=all, idempotent)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.acked = 0
        self.errors: list[str] = []
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            self._produce()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.failure = e

    def _produce(self) -> None:
        def report(err, msg):  # type: ignore[no-untyped-def]
            if err is None:
                self.acked += 1
            else:
                self.errors.append(str(err))

        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                             "acks": "all", "linger.ms": 5, "message.timeout.ms": 60000,
                             "log_level": 0})
        per_chunk = RECORDS // CHUNKS
        started = time.monotonic()
        for c in range(CHUNKS):
            for i in range(c * per_chunk, (c + 1) * per_chunk):
                producer.produce(self.topic, value=str(i).encode(), partition=i % PARTITIONS,
                                 on_delivery=report)
            producer.poll(0)
            time.sleep(max(0.0, started + (c + 1) * PRODUCE_S / CHUNKS - time.monotonic()))
        assert producer.flush(60) == 0, "records still unacknowledged after 60 s"


@dataclass
class Crew:
    """The share members of the run; one that died is noted and replaced."""

    bootstrap: str
    topic: str
    group: str
    workdir: Path
    members: list[ShareMember] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)

    def start(self) -> Crew:
        for i, ack in enumerate(MEMBER_ACKS):
            self._spawn(f"m{i}", i, ack)
        return self

    def _spawn(self, name: str, seed: int, ack: str) -> None:
        self.members.append(ShareMember(
            self.bootstrap, self.topic, self.group, self.workdir / f"{name}.log", name,
            "--policy", "random", "--release-rate", "0.1", "--seed", str(seed), "--ack", ack))

    def tend(self) -> None:
        for m in list(self.members):
            if m.alive() or getattr(m, "replaced", False):
                continue
            m.replaced = True  # type: ignore[attr-defined]
            error = next((line for line in reversed(m.stderr_tail(3000).splitlines())
                          if "Error" in line or "Exception" in line), "no error line")
            self.crashes.append(f"{m.name} exited {m.proc.returncode} at "
                                f"{time.strftime('%H:%M:%S')}: {error}")
            ack = m.cmd[m.cmd.index("--ack") + 1]
            self._spawn(f"{m.name}r", len(self.members), ack)

    def ledger(self) -> Ledger:
        self.tend()
        return Ledger(self.members)

    def describe(self) -> str:
        return "\n".join(m.describe() for m in self.members)


def accepted(ledger: Ledger, confirmed: bool) -> set[str]:
    return {d.value for d in ledger.rows
            if d.decision == "A" and (d.settled_ms is not None or not confirmed)}


def committed_share_state(bootstrap: str, keys: dict[int, tuple[str, str, int]]
                          ) -> dict[int, SharePartition | None]:
    """Per data partition, the share-partition machine folded from its
    ``__share_group_state`` partition up to the high watermark (committed)."""
    indexes = {partition_for(":".join(map(str, k)), STATE_PARTITIONS) for k in keys.values()}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"st-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "log_level": 0})
    logs = {i: ShareStateLog() for i in indexes}
    try:
        ends = {i: consumer.get_watermark_offsets(TopicPartition(SHARE_STATE_TOPIC, i),
                                                  timeout=5)[1] for i in indexes}
        consumer.assign([TopicPartition(SHARE_STATE_TOPIC, i, OFFSET_BEGINNING)
                         for i in indexes])  # the log start: its leaders prune it
        done = {i for i, end in ends.items() if end <= 0}
        deadline = time.monotonic() + 10
        while done != indexes and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            i = msg.partition()
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF and msg.offset() >= ends[i]:
                    done.add(i)
                continue
            if msg.offset() < ends[i]:
                logs[i].apply(msg.key(), msg.value(), msg.offset())
        assert done == indexes, f"{SHARE_STATE_TOPIC} {sorted(indexes)} not read to {ends}"
    finally:
        consumer.close()
    return {p: logs[partition_for(":".join(map(str, k)), STATE_PARTITIONS)].machine(k)
            for p, k in keys.items()}


def unfinished(machines: dict[int, SharePartition | None]) -> list[str]:
    """Offsets the committed state does not have ACKNOWLEDGED (or below its
    start offset), per partition, as ``p0@12:AVAILABLE/2``."""
    out = []
    for p, machine in sorted(machines.items()):
        if machine is None:
            out.append(f"p{p}: no committed state")
            continue
        for offset in range(machine.start_offset, PER_PARTITION):
            rec = machine.record(offset)
            if rec is None or rec.state != RecordState.ACKNOWLEDGED:
                what = "unread" if rec is None else f"{rec.state.name}/{rec.delivery_count}"
                out.append(f"p{p}@{offset}:{what}")
    return out


def stale(d: Delivery, ds: list[Delivery]) -> bool:
    """An acknowledgement of ``d`` answered after the record was handed out
    again (with a higher count: its lock had run out first). It came too late
    to count: Kafka answers it INVALID_RECORD_STATE, or NONE once another
    member's ACCEPT moved the start offset past the record (it skips
    acknowledgements below the start offset) — so a confirmed one is no
    ACCEPT of this record's own."""
    return d.answered_ms is not None and any(
        e.count > d.count and e.ts_ms <= d.answered_ms for e in ds)


def count_problems(ledger: Ledger, machines: dict[int, SharePartition | None]) -> list[str]:
    """The delivery-count and ACCEPT promises, per record (see the module doc)."""
    problems: list[str] = []
    for value, ds in sorted(ledger.by_value().items(), key=lambda kv: int(kv[0])):
        seen = [(d.ts_ms % 100_000, d.member, d.count, d.decision,
                 "ok" if d.settled_ms is not None else "err" if d.failed else "-") for d in ds]
        counts = [d.count for d in ds]
        if len(set(counts)) != len(counts):
            problems.append(f"record {value}: a delivery count handed out twice: {seen}")
        for i, d in enumerate(ds):
            earlier = [e.count for e in ds[:i] if e.ts_ms < d.ts_ms]
            if earlier and d.count <= max(earlier):
                problems.append(f"record {value}: delivery count {d.count} after "
                                f"{max(earlier)}: {seen}")
                break
        accepts = [d for d in ds if d.decision == "A" and d.settled_ms is not None
                   and not stale(d, ds)]
        if len(accepts) > 1:
            problems.append(f"record {value}: ACCEPTed and confirmed {len(accepts)} times: "
                            f"{seen}")
        elif accepts and max(counts) > accepts[0].count:
            problems.append(f"record {value}: delivered again (count {max(counts)}) after its "
                            f"confirmed ACCEPT of count {accepts[0].count}: {seen}")
        machine = machines.get(int(value) % PARTITIONS)
        rec = None if machine is None else machine.record(int(value) // PARTITIONS)
        if rec is not None and rec.delivery_count < max(counts):
            problems.append(f"record {value}: committed delivery count {rec.delivery_count} "
                            f"below the {max(counts)} a consumer saw: {seen}")
    return problems


def create_share_state_topic(cluster: Cluster, workdir: Path) -> None:
    """A throwaway member's first ShareFetch makes a broker create
    ``__share_group_state``; wait until every partition has a leader."""
    topic = unique_topic("share-warmup")
    cluster.create_topic(topic, 1, 3)
    warm = ShareMember(cluster.bootstrap, topic, unique_group("warmup"),
                       workdir / "warmup.log", "warmup")
    try:
        cluster.wait_for_leaders(SHARE_STATE_TOPIC, STATE_PARTITIONS, timeout_s=30)
    finally:
        warm.kill9()


@pytest.mark.timeout(120)
def test_share_group_leaders_kill9(tmp_path: Path) -> None:
    started = time.monotonic()
    cluster = Cluster(tmp_path, extra_args=CLUSTER_BROKER_ARGS)
    topic, group = unique_topic("share-chaos"), unique_group("share-chaos")
    keys = {p: (group, topic, p) for p in range(PARTITIONS)}
    state_index = partition_for(f"{group}:{topic}:0", STATE_PARTITIONS)
    crew = Crew(cluster.bootstrap, topic, group, tmp_path)
    events: list[str] = []

    def note(text: str) -> None:
        events.append(f"{time.monotonic() - started:5.1f} s: {text}")

    def kill(victim: int, why: str) -> None:
        ledger = crew.ledger()
        flying = [(d.member, d.partition, d.offset, d.count) for d in ledger.rows
                  if d.settled_ms is None and not d.failed]
        cluster.brokers[victim].kill()
        killed = time.monotonic()
        note(f"kill -9 broker {victim}, {why}: {len(accepted(ledger, True))}/{RECORDS} "
             f"accepted, {trickle.acked} produced, {len(flying)} deliveries unconfirmed "
             f"{flying[:4]}")
        cluster.wait_for_leaders(topic, PARTITIONS, exclude=victim)
        time.sleep(max(0.0, killed + DOWN_S - time.monotonic()))
        cluster.brokers[victim].start()
        cluster.wait_for_brokers()
        note(f"broker {victim} back")

    def reached(n: int) -> None:
        wait_for(lambda: len(accepted(crew.ledger(), True)) >= n, 40.0,
                 lambda: f"{n} records never accepted:\n{crew.describe()}", interval=0.1)

    state: dict[str, object] = {}

    def finished() -> bool:
        """Every offset finished in the committed state, each by a member's
        ACCEPT; a finished record no member ever ACCEPTed is lost (the state
        is read first: an ACCEPT is logged before it leaves the member)."""
        machines = committed_share_state(cluster.live_bootstrap(), keys)
        state["machines"] = machines
        if unfinished(machines):
            return False
        ledger = crew.ledger()
        lost = sorted(set(map(str, range(RECORDS))) - accepted(ledger, False), key=int)
        handed = ledger.by_value()
        assert not lost, (
            f"{len(lost)} records lost: finished in the committed share state, never "
            f"ACCEPTed by a member: " + ", ".join(
                f"{v} (p{int(v) % PARTITIONS}@{int(v) // PARTITIONS}, deliveries "
                f"{[(d.member, d.count, d.decision) for d in handed.get(v, [])]})"
                for v in lost[:12]))
        return True

    def why_unfinished() -> str:
        left = unfinished(state["machines"]) if "machines" in state else []  # type: ignore[arg-type]
        handed = crew.ledger().by_value()
        seen = []
        for entry in left[:10]:  # p0@12:ACQUIRED/2 -> what the members saw of that record
            p, _, rest = entry[1:].partition("@")
            offset = rest.split(":")[0]
            value = str(int(offset) * PARTITIONS + int(p)) if offset.isdigit() else ""
            seen.append(f"{entry} value {value}: " + str([
                (d.member, d.count, d.decision, "ok" if d.settled_ms is not None else
                 "err" if d.failed else "-") for d in handed.get(value, [])]))
        return (f"{len(left)} offsets unfinished in the committed share state (an ACCEPT "
                f"answered ok must be there):\n  " + "\n  ".join(seen)
                + f"\n{crew.describe()}")

    try:
        with diagnostics(cluster):
            cluster.start()
            require_share_apis(cluster.bootstrap)
            cluster.create_topic(topic, PARTITIONS, 3)
            set_group_configs(cluster.bootstrap, group, GROUP_CONFIGS)
            create_share_state_topic(cluster, tmp_path)
            trickle = Trickle(cluster.bootstrap, topic)
            trickle.start()
            crew.start()
            note("members started")

            reached(RECORDS // 3)
            leaders = cluster.wait_for_leaders(topic, PARTITIONS)
            kill(leaders[0], f"leader of p0 (leaders {leaders})")

            reached(2 * RECORDS // 3)
            state_leaders = cluster.wait_for_leaders(SHARE_STATE_TOPIC, STATE_PARTITIONS)
            leaders = cluster.wait_for_leaders(topic, PARTITIONS)
            victim = state_leaders[state_index]
            kill(victim, f"leader of {SHARE_STATE_TOPIC}-{state_index} holding the key of p0"
                         + (" (and leader of p0)" if victim == leaders[0] else
                            f" (p0 led by {leaders[0]})"))

            trickle.join(60)
            assert trickle.failure is None, f"producer failed: {trickle.failure!r}"
            assert trickle.acked == RECORDS and not trickle.errors, trickle.errors[:5]
            wait_for(finished, FINISH_TIMEOUT_S, why_unfinished, interval=0.5)
            note("every record finished")
            stop_all(crew.members)
            ledger = Ledger(crew.members)
            for event in events:
                print("  " + event)
            again: dict[str, int] = defaultdict(int)
            for ds in ledger.by_value().values():
                for before, _after in zip(ds, ds[1:], strict=False):
                    confirmed = "ok" if before.settled_ms is not None else "unconfirmed"
                    again[f"after {before.decision} {confirmed}"] += 1
            unconfirmed = accepted(ledger, False) - accepted(ledger, True)
            print(f"  {len(ledger.rows)} deliveries of {RECORDS} records, per member "
                  f"{ledger.per_member()}; redeliveries {dict(again)}; max delivery count "
                  f"{max(d.count for d in ledger.rows)}; {len(unconfirmed)} records finished "
                  f"by an ACCEPT answered with an error")
            problems = count_problems(ledger, state["machines"])  # type: ignore[arg-type]
            assert not problems, (f"{len(problems)} records broke a promise:\n  "
                                  + "\n  ".join(problems[:20]))
            assert not crew.crashes, ("share members died during the failovers:\n  "
                                      + "\n  ".join(crew.crashes))
        print(f"  share-group chaos: {time.monotonic() - started:.1f} s")
    except BaseException:
        for event in events:
            print("  " + event)
        print(crew.describe())
        raise
    finally:
        stop_all(crew.members)
        cluster.close()
