"""The differential fuzzer's state machine: one random sequence, two brokers.

Theory of operation
-------------------
``machine_for(peers)`` makes a Hypothesis ``RuleBasedStateMachine`` whose
every rule is one client operation (``_ops``) done to each broker in turn —
Apache Kafka first, kcompat second — with the same arguments; the two
observations must be the same, or a difference ``_allowed`` documents. A
difference fails the rule, and Hypothesis shrinks the sequence to a minimal
one, printed as the rules to call: a regression test to write.

The machine's names are its own (a random prefix per sequence), from a small
pool so that sequences meet: three topics, two groups, and names no broker
may accept. It keeps a model only to settle: after a change both brokers
accepted (a topic created or deleted, partitions added) it waits until each
shows it, as a client would retry, so that what is compared is outcomes, not
timing. Records carry timestamps near now (retention sees them as new), the
same on both brokers.

Producers (``_producers``): an idempotent and a transactional one per
sequence, initialized, producing in order, again (a duplicate) and past a
gap, fenced by a re-initialization, adding partitions to a transaction,
committing or aborting it, offsets committed in it (AddOffsetsToTxn,
TxnOffsetCommit) read with and without require_stable, and READ_COMMITTED
fetches. Their ids and epochs
are each broker's own, kept per peer (``Peer.state``); after an EndTxn the
machine waits for the markers, as a READ_COMMITTED consumer does.

ACL changes (``_acls``, only on brokers with an authorizer: ``alice``): ACLs
for ``User:alice`` on the sequence's topics and groups (literal or by its
prefix, allowed or denied) made, deleted and listed, and alice's own
requests, which show what each authorizer decided.

Malformed Produce batches (``_bad_produce``): a wrong CRC, an unknown magic,
a record count that disagrees with the records, a codec id no codec has, no
records, the LogAppendTime bit set by the producer (also to a topic of the
sequence created with LogAppendTime); the partition's error is compared, and
what a Fetch reads after.

Classic group members (``_members``): two per group, each on its own
connection, joining, syncing (the leader with the partitions the machine
chose for each), heartbeating, committing in their generation or a stale
one, and leaving, so that rebalances happen; and DescribeGroups. A broker
holds a member's JoinGroup or SyncGroup until the others act: such a request
is pending (``_members.WAITING``), and when one broker answered it and the
other did not, the latter is awaited longer before the two are compared.

KIP-848 consumer-group members (``_consumers``): two in a group of their own,
with client-chosen ids (the same on both brokers), joining, heartbeating,
misbehaving (a fenced or previous epoch, an unknown id), committing with
their epoch, leaving; the group described, and settled (every member
heartbeats until nothing moves) before its assignment is compared.

Share-group members (``_shares``): two in a share group of their own, with
client-chosen ids, joining, heartbeating and leaving; the group described.
They read (``_share_fetch``): ``share_consume`` settles the group and polls
with ShareFetch until nothing more comes, acknowledging ACCEPT, RELEASE,
REJECT or by offset, at once (ShareAcknowledge) or on the next ShareFetch
(or not at all: sessions closed holding records),
one share session per member per broker, and compares the set of records
acquired with their delivery counts and every error;
``share_session_misuse`` sends wrong session epochs and acknowledgements.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from compat_tests.fuzz import _acls as acls
from compat_tests.fuzz import _bad_produce as bad
from compat_tests.fuzz import _consumers as consumers
from compat_tests.fuzz import _members as members
from compat_tests.fuzz import _ops as ops
from compat_tests.fuzz import _producers as producers
from compat_tests.fuzz import _share_fetch as share_fetch
from compat_tests.fuzz import _shares as shares
from compat_tests.fuzz._allowed import allowed
from compat_tests.fuzz._wire import CLOSED, Peer

#: a file to write differences to instead of failing (exploring: FUZZ_COLLECT)
COLLECT = os.environ.get("FUZZ_COLLECT")
#: hunting one difference (FUZZ_RAISE=op1,op2): only these operations' differences
#: fail the run, the others are written to FUZZ_COLLECT if set, else passed over
RAISE = frozenset(filter(None, os.environ.get("FUZZ_RAISE", "").split(",")))
SLOW_S = 1.0  # an operation pair slower than this is written down too when collecting
BAD_TOPIC_NAMES = ("bad name!", "x" * 250, ".", "..")
# (key, values): valid and invalid values of topic configs both brokers know
CONFIGS: dict[str, tuple[str, ...]] = {
    "cleanup.policy": ("delete", "compact", "compact,delete", "bogus"),
    "retention.ms": ("3600000", "-1", "abc", "-5"),
    "max.message.bytes": ("1000", "1048588", "-5"),
    "min.insync.replicas": ("1", "2", "0"),
    "segment.bytes": ("1048576", "16777216", "1"),
    "bogus.config.key": ("1",),
}
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations
LATEST, EARLIEST = -1, -2  # ListOffsets timestamps

small_records = st.lists(
    st.tuples(st.one_of(st.none(), st.binary(max_size=8)),
              st.one_of(st.none(), st.binary(max_size=64))),
    min_size=1, max_size=5)
config_pairs = st.sampled_from(sorted(CONFIGS)).flatmap(
    lambda key: st.tuples(st.just(key), st.sampled_from(CONFIGS[key])))


def operation(name: str) -> Callable[..., Any]:
    """The operation ``name`` of ``_ops``, ``_producers``, ``_members``,
    ``_bad_produce``, ``_acls`` or ``_consumers``."""
    return next(getattr(m, name) for m in (ops, producers, members, bad, acls, consumers, shares,
                                 share_fetch)
                if hasattr(m, name))


def machine_for(peers: Sequence[Peer], replication: Sequence[int] = (1, 2, -1),
                log: Callable[[str], None] | None = None,
                alice: Sequence[Peer] | None = None) -> type[RuleBasedStateMachine]:
    """A state machine class comparing ``peers`` (Kafka first); ``replication``:
    the replication factors a CreateTopics may ask for; ``alice``: the same
    brokers as ``User:alice`` (they have an authorizer), for the ACL rules."""
    with_acls = alice is not None

    class Differential(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            prefix = self.prefix = f"fz{uuid.uuid4().hex[:8]}"
            self.acls: set[acls.Binding] = set()  # the model: alice's ACLs both made
            self.topics = [f"{prefix}-{c}" for c in "abc"]
            self.groups = [f"{prefix}-g{i}" for i in (1, 2)]
            self.consumer_group = f"{prefix}-cg"  # KIP-848 members' (client-chosen ids)
            self.consumer_ids = [str(uuid.uuid4()) for _ in (0, 1)]
            self.share_group = f"{prefix}-sg"  # share members' (client-chosen ids)
            self.share_ids = [str(uuid.uuid4()) for _ in (0, 1)]
            self.transactional_id = f"{prefix}-tx"
            self.append_time_topic = f"{prefix}-lat"  # LogAppendTime, made on first use
            self.append_time_topic_made = False
            self.partitions: dict[str, int] = {}  # the model: topics both created
            self.timestamps: list[int] = []

        @initialize()
        def fresh_connections(self) -> None:
            """New connections, and the groups' coordinators found, as a
            client finds them before its first group request."""
            for peer in alice or ():
                peer.reset()
            for peer in peers:
                peer.reset()
                for group in (*self.groups, self.consumer_group, self.share_group):
                    ops.settle_group(peer, group)
                consumers.set_group_configs(peer, self.consumer_group)
                shares.set_group_configs(peer, self.share_group)

        # -- the comparison ---------------------------------------------------------------

        def both(self, op: str, *args: Any, member: tuple[str, int] | None = None,
                 who: Sequence[Peer] | None = None) -> Any:
            """``op`` done to each peer, their observations compared;
            ``member``: the (group, member) whose request it is, awaited
            longer where one broker answered it and another held it; ``who``:
            the peers to do it as (default: ``peers``, the super user)."""
            fn = operation(op)
            started = time.monotonic()
            seen = [fn(peer, *args) for peer in who or peers]
            if member is not None and members.WAITING in seen and len(set(map(repr, seen))) > 1:
                seen = [members.collect(peer, *member) if s == members.WAITING else s
                        for peer, s in zip(peers, seen, strict=True)]
            if COLLECT and time.monotonic() - started > SLOW_S:  # where a run's time goes
                with open(COLLECT, "a") as out:
                    out.write(f"slow {time.monotonic() - started:.1f} s: {op}{args!r}\n")
            first, *others = seen
            for peer, other in zip(peers[1:], others, strict=True):
                if other != first and allowed(op, args, first, other) is None:
                    if RAISE and op not in RAISE and not COLLECT:
                        continue
                    if COLLECT and (not RAISE or op not in RAISE):  # exploring: every difference written down, none raised
                        with open(COLLECT, "a") as out:
                            out.write(f"{op}{args!r}: {peers[0].name} {first!r}, "
                                      f"{peer.name} {other!r}\n")
                        continue
                    raise AssertionError(
                        f"{op}{args!r}: {peers[0].name} observed {first!r}, "
                        f"{peer.name} observed {other!r}")
            if log is not None:
                log(f"{op}{args!r} -> {first!r}")
            return first

        def settle(self, topic: str, partitions: int | None) -> None:
            for peer in peers:
                ops.settle_topic(peer, topic, partitions)

        # -- topics -----------------------------------------------------------------------

        def topic(self, data: st.DataObject) -> str:
            return data.draw(st.sampled_from(self.topics), label="topic")

        @rule(data=st.data(), partitions=st.sampled_from((1, 2, 3, 0, -1, -2)),
              replication=st.sampled_from(replication),
              configs=st.dictionaries(st.sampled_from(sorted(CONFIGS)), st.just(""),
                                      max_size=2),
              validate_only=st.booleans())
        def create_topic(self, data: st.DataObject, partitions: int, replication: int,
                         configs: dict[str, str], validate_only: bool) -> None:
            topic = self.topic(data)
            chosen = {k: data.draw(st.sampled_from(CONFIGS[k]), label=k) for k in configs}
            seen = self.both("create_topic", topic, partitions, replication, chosen,
                             validate_only)
            if seen[0] == "ok" and not validate_only:
                self.partitions[topic] = seen[1]
                self.settle(topic, seen[1])

        @rule(name=st.sampled_from(BAD_TOPIC_NAMES), partitions=st.sampled_from((1, 2)))
        def create_bad_topic(self, name: str, partitions: int) -> None:
            self.both("create_topic", name, partitions, 1, {}, False)

        @rule(data=st.data())
        def delete_topic(self, data: st.DataObject) -> None:
            topic = self.topic(data)
            if self.both("delete_topic", topic) == 0:
                self.partitions.pop(topic, None)
                self.settle(topic, None)
                for peer in peers:
                    ops.settle_offsets_gone(peer, self.groups, topic)

        @rule(data=st.data(), add=st.sampled_from((1, 2, 0, -1)), validate_only=st.booleans())
        def create_partitions(self, data: st.DataObject, add: int, validate_only: bool) -> None:
            topic = self.topic(data)
            count = self.partitions.get(topic, 1) + add
            if self.both("create_partitions", topic, count, validate_only) == 0 \
                    and not validate_only:
                self.partitions[topic] = count
                self.settle(topic, count)

        @rule(data=st.data())
        def metadata(self, data: st.DataObject) -> None:
            self.both("metadata", self.topic(data))

        @rule(data=st.data(), pair=config_pairs, op=st.sampled_from((SET, DELETE)),
              validate_only=st.booleans())
        def alter_config(self, data: st.DataObject, pair: tuple[str, str], op: int,
                         validate_only: bool) -> None:
            key, value = pair
            self.both("alter_config", self.topic(data), key, op,
                      value if op == SET else None, validate_only)

        @rule(data=st.data())
        def topic_overrides(self, data: st.DataObject) -> None:
            self.both("topic_overrides", self.topic(data))

        # -- records ----------------------------------------------------------------------

        @rule(data=st.data(), partition=st.integers(0, 3), records=small_records,
              compression=st.sampled_from((0, 1)), acks=st.sampled_from((-1, 1)))
        def produce(self, data: st.DataObject, partition: int,
                    records: list[tuple[bytes | None, bytes | None]], compression: int,
                    acks: int) -> None:
            timestamp = self.timestamp()
            topic = self.topic(data)
            seen = self.both("produce", topic, partition, records, timestamp, compression, acks)
            if acks == 1 and seen[0] == "ok":  # acknowledged before its replicas have it
                for peer in peers:
                    ops.settle_high_watermark(peer, topic, partition, seen[1] + len(records))

        def timestamp(self) -> int:
            timestamp = int(time.time() * 1000) - 60_000 + len(self.timestamps)
            self.timestamps.append(timestamp)
            return timestamp

        @rule(data=st.data(), partition=st.integers(0, 2), kind=st.sampled_from(bad.KINDS),
              records=small_records, to_append_time_topic=st.booleans())
        def produce_bad(self, data: st.DataObject, partition: int, kind: str,
                        records: list[tuple[bytes | None, bytes | None]],
                        to_append_time_topic: bool) -> None:
            if to_append_time_topic:
                topic, partition = self.append_time_topic, 0
                if not self.append_time_topic_made:
                    self.both("create_topic", topic, 1, -1,
                              {"message.timestamp.type": "LogAppendTime"}, False)
                    self.settle(topic, 1)
                    self.append_time_topic_made = True
            else:
                topic = self.topic(data)
            self.both("produce_bad", topic, partition, kind, records, self.timestamp())

        @rule(data=st.data(), partition=st.integers(0, 3), offset=st.integers(-1, 12))
        def fetch(self, data: st.DataObject, partition: int, offset: int) -> None:
            self.both("fetch", self.topic(data), partition, offset)

        @rule(data=st.data(), partition=st.integers(0, 3),
              which=st.sampled_from(("latest", "earliest", "a timestamp", "past the last")))
        def list_offsets(self, data: st.DataObject, partition: int, which: str) -> None:
            if which == "a timestamp" and self.timestamps:
                timestamp = data.draw(st.sampled_from(self.timestamps), label="timestamp")
            elif which == "past the last":
                timestamp = (self.timestamps[-1] if self.timestamps else 0) + 1
            else:
                timestamp = EARLIEST if which == "earliest" else LATEST
            self.both("list_offsets", self.topic(data), partition, timestamp)

        @rule(data=st.data(), partition=st.integers(0, 3), offset=st.integers(-1, 12))
        def delete_records(self, data: st.DataObject, partition: int, offset: int) -> None:
            self.both("delete_records", self.topic(data), partition, offset)

        # -- committed offsets ------------------------------------------------------------

        @rule(data=st.data(), partition=st.integers(0, 2), offset=st.integers(-1, 20),
              meta=st.sampled_from(("", "m", "x" * 100)))
        def commit_offset(self, data: st.DataObject, partition: int, offset: int,
                          meta: str) -> None:
            group = data.draw(st.sampled_from(self.groups), label="group")
            self.both("commit_offset", group, self.topic(data), partition, offset, meta)

        @rule(data=st.data(), partition=st.integers(0, 2), stable=st.booleans())
        def fetch_offset(self, data: st.DataObject, partition: int, stable: bool) -> None:
            group = data.draw(st.sampled_from(self.groups), label="group")
            self.both("fetch_offset", group, self.topic(data), partition, stable)

        @rule(data=st.data())
        def delete_group(self, data: st.DataObject) -> None:
            self.both("delete_group", data.draw(st.sampled_from(self.groups), label="group"))

        @rule(data=st.data(), partition=st.integers(0, 2))
        def offset_delete(self, data: st.DataObject, partition: int) -> None:
            # a classic group, the KIP-848 members' or the share members' group
            group = data.draw(st.sampled_from(
                (*self.groups, self.consumer_group, self.share_group)), label="group")
            self.both("offset_delete", group, self.topic(data), partition)

        # -- idempotent and transactional producers -------------------------------------

        @rule(transactional=st.booleans())
        def init_producer(self, transactional: bool) -> None:
            slot = "transactional" if transactional else "idempotent"
            seen = self.both("init_producer", slot,
                             self.transactional_id if transactional else None)
            if transactional and seen != ops.CLOSED and seen[0] == "ok":
                for peer in peers:  # an open transaction it ended is aborted
                    producers.settle_transaction(peer, "fenced")

        @rule(data=st.data(), slot=st.sampled_from(("idempotent", "transactional", "fenced")),
              mode=st.sampled_from((producers.NEXT, producers.NEXT, producers.DUPLICATE,
                                    producers.GAP)),
              partition=st.integers(0, 2), records=small_records)
        def produce_as(self, data: st.DataObject, slot: str, mode: str, partition: int,
                       records: list[tuple[bytes | None, bytes | None]]) -> None:
            self.both("produce_as", slot, mode, self.topic(data), partition, records,
                      self.timestamp())

        @rule(data=st.data(), partition=st.integers(0, 2))
        def add_partition(self, data: st.DataObject, partition: int) -> None:
            self.both("add_partition", self.topic(data), partition)

        @rule(data=st.data())
        def add_offsets(self, data: st.DataObject) -> None:
            self.both("add_offsets", self.group(data))

        @rule(data=st.data(), partition=st.integers(0, 2), offset=st.integers(-1, 20),
              as_member=st.booleans())
        def txn_offset_commit(self, data: st.DataObject, partition: int, offset: int,
                              as_member: bool) -> None:
            self.both("txn_offset_commit", self.group(data), self.topic(data), partition,
                      offset, as_member)

        @rule(commit=st.booleans())
        def end_txn(self, commit: bool) -> None:
            if self.both("end_txn", commit) == 0:
                for peer in peers:
                    producers.settle_transaction(peer)

        @rule(data=st.data(), partition=st.integers(0, 2), offset=st.integers(-1, 12))
        def fetch_committed(self, data: st.DataObject, partition: int, offset: int) -> None:
            self.both("fetch_committed", self.topic(data), partition, offset)

        # -- classic group members ------------------------------------------------------

        def group(self, data: st.DataObject) -> str:
            return data.draw(st.sampled_from(self.groups), label="group")

        @rule(data=st.data(), who=st.sampled_from((0, 1)))
        def join_group(self, data: st.DataObject, who: int) -> None:
            group = self.group(data)
            self.both("join_group", group, self.topics, who, member=(group, who))

        @rule(data=st.data(), who=st.sampled_from((0, 1)),
              chosen=st.sets(st.tuples(st.integers(0, 2), st.integers(0, 2)), max_size=3),
              theirs=st.sets(st.tuples(st.integers(0, 2), st.integers(0, 2)), max_size=2))
        def sync_group(self, data: st.DataObject, who: int, chosen: set[tuple[int, int]],
                       theirs: set[tuple[int, int]]) -> None:
            group = self.group(data)
            self.both("sync_group", group, self.assignment(chosen), self.assignment(theirs),
                      who, member=(group, who))

        def assignment(self, chosen: set[tuple[int, int]]) -> dict[str, list[int]]:
            partitions: dict[str, list[int]] = {}
            for topic, partition in sorted(chosen):
                partitions.setdefault(self.topics[topic], []).append(partition)
            return partitions

        @rule(data=st.data(), who=st.sampled_from((0, 1)))
        def heartbeat(self, data: st.DataObject, who: int) -> None:
            group = self.group(data)
            self.both("heartbeat", group, who, member=(group, who))

        @rule(data=st.data(), who=st.sampled_from((0, 1)))
        def leave_group(self, data: st.DataObject, who: int) -> None:
            group = self.group(data)
            self.both("leave_group", group, who, member=(group, who))

        @rule(data=st.data(), who=st.sampled_from((0, 1)), stale=st.booleans(),
              partition=st.integers(0, 2), offset=st.integers(0, 20))
        def commit_in_generation(self, data: st.DataObject, who: int, stale: bool,
                                 partition: int, offset: int) -> None:
            group = self.group(data)
            self.both("commit_in_generation", group, stale, self.topic(data), partition,
                      offset, who, member=(group, who))

        @rule(data=st.data())
        def describe_group(self, data: st.DataObject) -> None:
            self.both("describe_group", self.group(data))

        # -- KIP-848 consumer-group members ---------------------------------------------

        @rule(who=st.sampled_from((0, 1)),
              subscribed=st.sets(st.integers(0, 2), min_size=1, max_size=3))
        def consumer_join(self, who: int, subscribed: set[int]) -> None:
            self.both("consumer_join", self.consumer_group, self.consumer_ids[who], who,
                      [self.topics[t] for t in sorted(subscribed)], self.topics)

        @rule(who=st.sampled_from((0, 1)))
        def consumer_heartbeat(self, who: int) -> None:
            self.both("consumer_heartbeat", self.consumer_group, self.consumer_ids[who], who,
                      self.topics)

        @rule(who=st.sampled_from((0, 1)),
              subscribed=st.sets(st.integers(0, 2), min_size=1, max_size=3))
        def consumer_resubscribe(self, who: int, subscribed: set[int]) -> None:
            self.both("consumer_resubscribe", self.consumer_group, self.consumer_ids[who], who,
                      [self.topics[t] for t in sorted(subscribed)], self.topics)

        @rule(who=st.sampled_from((0, 1)), how=st.sampled_from(
            (consumers.FENCED, consumers.PREVIOUS, consumers.UNKNOWN)))
        def consumer_misbehave(self, who: int, how: str) -> None:
            self.both("consumer_misbehave", self.consumer_group, self.consumer_ids[who], who,
                      how, self.topics)

        @rule(who=st.sampled_from((0, 1)))
        def consumer_leave(self, who: int) -> None:
            self.both("consumer_leave", self.consumer_group, self.consumer_ids[who], who)

        @rule(data=st.data(), who=st.sampled_from((0, 1)), stale=st.booleans(),
              partition=st.integers(0, 2), offset=st.integers(0, 20))
        def consumer_commit(self, data: st.DataObject, who: int, stale: bool, partition: int,
                            offset: int) -> None:
            self.both("consumer_commit", self.consumer_group, self.consumer_ids[who], who,
                      stale, self.topic(data), partition, offset)

        @rule()
        def consumer_settle(self) -> None:
            self.both("consumer_settle", self.consumer_group, self.consumer_ids, self.topics)

        @rule()
        def consumer_describe(self) -> None:
            self.both("consumer_describe", self.consumer_group, self.consumer_ids)

        # -- share-group members --------------------------------------------------------

        @rule(who=st.sampled_from((0, 1)),
              subscribed=st.sets(st.integers(0, 2), min_size=1, max_size=3))
        def share_join(self, who: int, subscribed: set[int]) -> None:
            self.both("share_join", self.share_group, self.share_ids[who], who,
                      [self.topics[t] for t in sorted(subscribed)], self.topics)

        @rule(who=st.sampled_from((0, 1)))
        def share_heartbeat(self, who: int) -> None:
            self.both("share_heartbeat", self.share_group, self.share_ids[who], who,
                      self.topics)

        @rule(who=st.sampled_from((0, 1)))
        def share_leave(self, who: int) -> None:
            self.both("share_leave", self.share_group, self.share_ids[who], who)

        @rule()
        def share_describe(self) -> None:
            self.both("share_describe", self.share_group, self.share_ids)

        @rule(who=st.sampled_from((0, 1)),
              subscribed=st.sets(st.integers(0, 2), min_size=1, max_size=3),
              partition=st.integers(0, 2), records=st.one_of(st.none(), small_records),
              how=st.sampled_from(("accept", "release", "reject", "mixed")),
              piggyback=st.booleans(), close=st.booleans(),
              abandon=st.sampled_from((False, False, False, True)))
        def share_consume(self, who: int, subscribed: set[int], partition: int,
                          records: list[tuple[bytes | None, bytes | None]] | None, how: str,
                          piggyback: bool, close: bool, abandon: bool) -> None:
            """A share consumer's polls: ``who`` joins if it is not in the group
            (subscribed to a topic that exists: the first subscribed one is
            created if none does), records are produced to a subscribed topic,
            and the group consumes them until nothing more comes."""
            names = [self.topics[t] for t in sorted(subscribed)]
            present = [t for t in names if t in self.partitions]
            if not present:
                seen = self.both("create_topic", names[0], 2, 1, {}, False)
                if seen[0] != "ok":
                    return
                self.partitions[names[0]] = seen[1]
                self.settle(names[0], seen[1])
                present = [names[0]]
            if records:
                topic = present[partition % len(present)]
                self.both("produce", topic, partition % self.partitions[topic], records,
                          self.timestamp(), 0, -1)
            self.both("share_poll_join", self.share_group, self.share_ids[who], who, names,
                      self.topics)
            self.both("share_consume", self.share_group, self.share_ids, self.topics, how,
                      piggyback, close, abandon)

        @rule(who=st.sampled_from((0, 1)), how=st.sampled_from(share_fetch.MISUSES))
        def share_session_misuse(self, who: int, how: str) -> None:
            self.both("share_session_misuse", self.share_group, self.share_ids[who], who,
                      self.topics, how)

        # -- ACL changes, and alice's requests (brokers with an authorizer) -------------

        def acl_name(self, data: st.DataObject, on_group: bool, prefixed: bool) -> str:
            if prefixed:
                return f"{self.prefix}-"
            return self.group(data) if on_group else self.topic(data)

        def settle_acls(self) -> None:
            for peer in peers:
                acls.settle_acls(peer, self.prefix, self.acls)

        @precondition(lambda self: with_acls)
        @rule(data=st.data(), on_group=st.booleans(), prefixed=st.booleans(),
              operation=st.sampled_from((acls.READ, acls.WRITE, acls.DESCRIBE, acls.ALL)),
              permission=st.sampled_from((acls.ALLOW, acls.ALLOW, acls.DENY)))
        def create_acl(self, data: st.DataObject, on_group: bool, prefixed: bool,
                       operation: int, permission: int) -> None:
            kind = acls.GROUP if on_group else acls.TOPIC
            name = self.acl_name(data, on_group, prefixed)
            pattern = acls.PREFIXED if prefixed else acls.LITERAL
            if self.both("create_acl", kind, name, pattern, operation, permission) == 0:
                self.acls.add((kind, name, pattern, acls.ALICE, "*", operation, permission))
                self.settle_acls()

        @precondition(lambda self: with_acls)
        @rule(data=st.data(), on_group=st.booleans(), prefixed=st.booleans(),
              operation=st.sampled_from((acls.ANY, acls.READ, acls.WRITE, acls.ALL)),
              permission=st.sampled_from((acls.ANY, acls.ALLOW, acls.DENY)))
        def delete_acls(self, data: st.DataObject, on_group: bool, prefixed: bool,
                        operation: int, permission: int) -> None:
            kind = acls.GROUP if on_group else acls.TOPIC
            name = self.acl_name(data, on_group, prefixed)
            pattern = acls.PREFIXED if prefixed else acls.LITERAL
            seen = self.both("delete_acls", kind, name, pattern, operation, permission)
            if seen != CLOSED and seen[0] == 0:
                for _e, kind_, name_, pattern_, op, perm in seen[1]:
                    self.acls.discard((kind_, name_, pattern_, acls.ALICE, "*", op, perm))
                self.settle_acls()

        @precondition(lambda self: with_acls)
        @rule()
        def describe_acls(self) -> None:
            self.both("alice_acls", self.prefix)

        @precondition(lambda self: with_acls)
        @rule(data=st.data(), what=st.sampled_from((
            "metadata", "produce", "fetch", "list_offsets", "commit_offset", "fetch_offset",
            "describe_group")), partition=st.integers(0, 1), records=small_records)
        def as_alice(self, data: st.DataObject, what: str, partition: int,
                     records: list[tuple[bytes | None, bytes | None]]) -> None:
            topic = self.topic(data)
            args: tuple[Any, ...] = {
                "metadata": (topic,),
                "produce": (topic, partition, records, self.timestamp(), 0, -1),
                "fetch": (topic, partition, 0),
                "list_offsets": (topic, partition, LATEST),
                "commit_offset": (self.group(data), topic, partition, 5, ""),
                "fetch_offset": (self.group(data), topic, partition, False),
                "describe_group": (self.group(data),)}[what]
            self.both(what, *args, who=alice)

    return Differential
