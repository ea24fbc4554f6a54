"""The seeded broker-level simulator: whole brokers, simulated disks and network.

Theory of operation
-------------------
Where ``simulator`` runs bare Raft cores, this runs 1 or 3 real ``Broker``s —
the Multi-Raft driver, the partition-log storage adapter, the controller, the
group and transaction coordinators, the request handlers — in one trio run
on a ``MockClock`` that jumps to the next timer, so simulated seconds cost
milliseconds. Each broker's disk is a ``MemoryFileStore`` and its peer links a
``SimLink`` on a simulated network that delays, reorders, drops and
partitions frames. One seed picks the cluster size, the fault rates and the
schedule; trio's own scheduling randomness is seeded with it too.

Clients are tasks that call the request handlers directly, as a connection
would, each request running in its broker's task tree (a crash cancels it
and the client sees a lost connection):

* a producer: acks=all batches of unique values to the partitions' leaders;
* an idempotent producer: the same, retrying a batch until acknowledged;
* a committer: simple-consumer OffsetCommits of an increasing offset through
  the group coordinator, and OffsetFetches;
* a transactional producer: InitProducerId, AddPartitionsToTxn, Produce,
  EndTxn commit or abort, re-initialising after anything unclear;
* a delaying producer: idempotent batches of one record with ``kc-delay-ms``,
  retried until acknowledged (delayed delivery, ``delays``);
* a failing consumer's producer: idempotent batches of one record to the retry
  topic, as a first failure (retried there) or a second one (a dead letter);
* three members of a consumer group (``group_workload``): JoinGroup,
  SyncGroup, Heartbeat, OffsetCommit, OffsetFetch and LeaveGroup of the
  classic protocol, one of them static; they are cut off from the cluster
  past their sessions, leave, restart, and commit as their fenced old selves.

The nemesis crashes brokers (their task tree is cancelled and their store
``crash``es: unsynced writes lost, torn or garbled), restarts them, and cuts
and heals network links. With ``disk_faults`` it also breaks and heals
brokers' disks (``MemoryFileStore.faults``): a full disk (ENOSPC, short
writes), EIO on every write (half of it written first) or on every fsync —
of the whole disk or of one partition's directory. A broker restarted by the
nemesis gets a healed disk. Before the final restart every disk heals and the
cluster must converge with the same processes: a broker recovers from a disk
fault without a restart, and the checks below run then too. Then every broker restarts, the network heals, and
all replicas must converge (liveness). The checks:

* no acknowledged produce is lost: the answered offset holds the value on
  every replica, and the replicas' logs agree;
* an idempotent producer's retries never write a batch twice;
* committed group offsets never go backwards: no OffsetFetch answers less
  than an OffsetCommit acknowledged before it started;
* no transaction is both committed and aborted: its records carry one
  outcome on every partition, the one EndTxn acknowledged, if any;
* every acknowledged delayed record is delivered exactly once, with
  ``kc-scheduled-offset`` naming its acknowledged offset, where only an empty
  batch (its hole) is stored; no delayed record is delivered twice;
* every acknowledged retry lands once in the retry topic (``kc-attempt: 1``)
  and every acknowledged second failure once in the dead-letter topic;
* consumer-group membership (``group_workload.GroupLedger``): no partition
  handed to two members in one generation; a commit of a fenced member
  (older generation, replaced static member) refused, and a refused one never
  read back; no acknowledged commit lost or overtaken by an older one; once
  healed, the group stable with every partition assigned.
* no broker task fails with an exception;
* with disk faults, once the disks heal and before any restart: every
  segment file holds whole CRC-clean batches to its end (no torn tail).

A failure raises ``SimFailure`` (the Raft simulator's) naming the seed and the replay command::

    python -m kcompat.testing.broker_sim --seed N [--verbose]

Time: the brokers read ``time.time``/``time_ns``/``monotonic``; during a run
these follow the simulated clock, so timeouts (sessions, transactions, broker
liveness) expire in simulated time; ``uuid4`` draws from the seed. A seed
replays the same schedule in any process, alone or after others
(``deterministic_trio``: trio's scheduling choices seeded, its ties no longer
broken by memory addresses, threads run inline; ``test_replay_is_deterministic``).
"""

from __future__ import annotations

import argparse
import datetime
import errno
import logging
import sys
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from random import Random
from typing import Any

import trio
import trio.testing
from kio.schema.errors import ErrorCode as E

from kcompat.broker.config import broker_config
from kcompat.broker.controller import admin
from kcompat.broker.handlers import HANDLERS
from kcompat.broker.host.broker import Broker
from kcompat.broker.host.context import RequestContext
from kcompat.broker.replication.transport import Link
from kcompat.log.files import LOG_SUFFIX, offset_path
from kcompat.raft import NO_NODE
from kcompat.testing.deterministic_trio import replayable
from kcompat.testing.group_workload import GROUP_CONFIGS, GroupWorkload
from kcompat.testing.memory_store import DiskFaults, MemoryFileStore
from kcompat.testing.simulator import SimFailure
from kcompat.wire import codec
from kcompat.wire import versions as v
from kcompat.wire.batch import compute_crc, iter_headers
from kcompat.wire.records import decode_batch, encode_batch, marker_aborts

TOPIC = "t"
RETRY_TOPIC = "t.retry"  # kc.retry.of=t, one attempt: a second failure is a dead letter
DLQ_TOPIC = "t.dlq"
RETRY_CONFIGS = {"kc.retry.of": TOPIC, "kc.retry.max.attempts": "1",
                 "kc.retry.backoff.ms": "200"}
PARTITIONS = 2
GROUP = "g"
TXN_ID = "tx"
REQUEST_TIMEOUT_S = 3.0
WALL_BASE_S = 1_790_000_000.0  # the simulated wall clock at the start of every run


def replay_command(seed: int, disk_faults: bool = False) -> str:
    # a set of strings iterates in the order of the process's hash seed
    return (f"PYTHONHASHSEED=0 .venv/bin/python -m kcompat.testing.broker_sim --seed {seed}"
            " --verbose"
            + (" --disk-faults" if disk_faults else ""))


@dataclass(frozen=True, slots=True)
class BrokerSimOptions:
    chaos_s: float = 3.0
    recovery_s: float = 30.0
    disk_faults: bool = False  # the nemesis also fills and breaks disks
    configs: tuple[tuple[str, object], ...] = ()  # more broker configs (scenarios)


@dataclass(eq=False)
class SimNode:
    node_id: int
    store: MemoryFileStore
    broker: Broker | None = None
    nursery: trio.Nursery | None = None
    scope: trio.CancelScope | None = None
    stopped: trio.Event = field(default_factory=trio.Event)
    incarnation: int = 0

    @property
    def alive(self) -> bool:
        return self.broker is not None


class SimLink:
    """A peer link on the simulated network (``transport.Link``)."""

    def __init__(self, sim: BrokerSimulation, src: int, dst: int) -> None:
        self.sim, self.src, self.dst = sim, src, dst

    def send(self, frame: bytes, urgent: bool = False) -> None:
        self.sim.deliver(self.src, self.dst, frame)  # (no queue here to go ahead in)

    async def run(self) -> None:
        await trio.sleep_forever()


class BrokerSimulation:
    def __init__(self, seed: int, options: BrokerSimOptions | None = None,
                 verbose: bool = False) -> None:
        self.seed = seed
        self.options = options or BrokerSimOptions()
        self.verbose = verbose
        self.rng = rng = Random(seed)
        self.size = rng.choice([1, 3, 3])
        self.loss = rng.choice([0.0, 0.02, 0.1])
        self.crash_rate = rng.choice([0.0, 0.3, 0.6])  # crashes per simulated second
        self.garble = rng.choice([0.0, 0.5])
        self.lost_replies = rng.choice([0.0, 0.05, 0.2])
        self.nodes = {i: SimNode(i, MemoryFileStore(f"/sim/n{i}"))
                      for i in range(1, self.size + 1)}
        self.cut: set[frozenset[int]] = set()
        self.trace: list[str] = []
        self.failures: list[str] = []
        self.acked: list[tuple[int, int, bytes]] = []  # partition, offset, value
        self.committed = -1  # highest acknowledged OffsetCommit
        self.txn_values: dict[int, set[bytes]] = {}  # txn number -> acked values
        self.txn_outcome: dict[int, bool] = {}  # txn number -> acked commit / abort
        self.delayed: list[tuple[int, int, bytes]] = []  # partition, hole offset, value
        self.moved: list[tuple[str, bytes]] = []  # where an acknowledged retry must land
        self.group = GroupWorkload(self, TOPIC, PARTITIONS)  # consumer-group members
        self._root: trio.Nursery | None = None

    @classmethod
    def lone(cls, seed: int = 1, options: BrokerSimOptions | None = None) -> BrokerSimulation:
        """One broker on a perfect network (a scenario's own faults only)."""
        sim = cls(seed, options)
        sim.size = 1
        sim.nodes = {1: SimNode(1, MemoryFileStore("/sim/n1"))}
        sim.loss = sim.lost_replies = sim.crash_rate = 0.0
        return sim

    # -- the run ------------------------------------------------------------------

    def run(self, scenario: Callable[[BrokerSimulation], Awaitable[None]] | None = None
            ) -> None:
        """One seeded run; with ``scenario``, instead of the clients, the
        nemesis and the checks: boot, create the topics, await ``scenario``."""
        clocks = time.time, time.time_ns, time.monotonic, uuid.uuid4
        ids = Random(self.seed)
        uuid.uuid4 = lambda: uuid.UUID(int=ids.getrandbits(128), version=4)
        # the brokers' wall and monotonic clocks follow the simulated one
        time.time = lambda: WALL_BASE_S + trio.current_time()
        time.time_ns = lambda: int((WALL_BASE_S + trio.current_time()) * 1e9)
        time.monotonic = trio.current_time
        try:
            main = self._main if scenario is None else partial(self._scenario, scenario)
            with replayable(self.seed):  # trio's scheduling choices, made replayable
                trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
        except SimFailure:
            raise
        except BaseException as e:  # a broker task failed: report it with the seed
            detail = "".join(traceback.format_exception(e))
            self._fail(f"unexpected {type(e).__name__}: {e}\n{detail[-3000:]}")
        finally:
            time.time, time.time_ns, time.monotonic, uuid.uuid4 = clocks
        if self.failures:
            self._fail("; ".join(self.failures[:3]))

    def _fail(self, what: str) -> None:
        tail = "\n".join(self.trace[-30:]) if self.verbose else ""
        raise SimFailure(f"broker sim seed {self.seed} (size {self.size}): {what}\n"
                         f"replay: {replay_command(self.seed, self.options.disk_faults)}\n{tail}")

    def log(self, what: str) -> None:
        self.trace.append(f"{trio.current_time():9.3f} {what}")
        if self.verbose:
            print(self.trace[-1], file=sys.stderr)

    async def _scenario(self, scenario: Callable[[BrokerSimulation], Awaitable[None]]
                        ) -> None:
        async with trio.open_nursery() as root:
            self._root = root
            for node in self.nodes.values():
                await self.boot(node)
            if not await self._create_topic():
                self.failures.append("could not create the topic")
            else:
                await scenario(self)
            root.cancel_scope.cancel()

    async def _main(self) -> None:
        async with trio.open_nursery() as root:
            self._root = root
            for node in self.nodes.values():
                await self.boot(node)
            if not await self._create_topic():
                self.failures.append("could not create the topic")
                root.cancel_scope.cancel()
                return
            async with trio.open_nursery() as clients:
                clients.start_soon(self._producer)
                clients.start_soon(self._idempotent_producer)
                clients.start_soon(self._committer)
                clients.start_soon(self._transactor)
                clients.start_soon(self._delayer)
                clients.start_soon(self._retrier)
                clients.start_soon(self.group.run)
                clients.start_soon(self._nemesis)
                await trio.sleep(self.options.chaos_s)
                clients.cancel_scope.cancel()
            if self.options.disk_faults and not await self._recover_in_place():
                root.cancel_scope.cancel()
                return
            self.cut.clear()
            self.log("heal: every broker restarts")
            for node in self.nodes.values():
                if node.alive:
                    await self.crash(node)
                await self.boot(node)
            if await self._settle() and await self._delivered() and await self._settle():
                self._check_logs()
                self._check_moves()
                await self._check_final_offset()
                await self.group.settle()
            root.cancel_scope.cancel()

    async def _recover_in_place(self) -> bool:
        """Disks and network heal, crashed brokers come back; the brokers that
        lived through disk faults must converge without a restart."""
        for node in self.nodes.values():
            node.store.faults = DiskFaults()
        self.cut.clear()
        self.log("disks and network healed")
        for node in self.nodes.values():
            if not node.alive:
                await self.boot(node)
        if not (await self._settle() and await self._delivered() and await self._settle()):
            return False
        self._check_logs()
        self._check_moves()
        self._check_whole_logs()
        return not self.failures

    def _check_whole_logs(self) -> None:
        """Every segment file of every hosted partition holds whole, CRC-clean
        batches to its last byte: no failed write left a torn tail behind."""
        for node in self.nodes.values():
            if node.broker is None:
                continue
            for group in node.broker.cluster.groups.values():
                plog = group.storage.plog
                for base in plog.segment_base_offsets:
                    path = offset_path(plog.directory, base, LOG_SUFFIX)
                    data = node.store.read(path)
                    end = 0
                    for pos, h in iter_headers(data):
                        if compute_crc(memoryview(data)[pos:pos + h.size]) != h.crc:
                            break
                        end = pos + h.size
                    if end != len(data):
                        self.failures.append(f"node {node.node_id}: {path} is torn at {end} "
                                             f"of {len(data)} bytes")

    # -- brokers ------------------------------------------------------------------

    async def boot(self, node: SimNode) -> None:
        voters = ",".join(f"{i}@sim:{9000 + i}" for i in self.nodes) if self.size > 1 else ""
        cfg = broker_config.load(None, {
            "node.id": node.node_id, "log.dirs": f"/sim/n{node.node_id}", "host": "sim",
            "port": 9000 + node.node_id, "controller.quorum.voters": voters,
            "offsets.topic.num.partitions": 2, "transaction.state.log.num.partitions": 2,
            "kc.schedule.topic.num.partitions": 2, "kc.schedule.snapshot.min.records": 20,
            "offsets.topic.replication.factor": self.size,
            "transaction.state.log.replication.factor": self.size,
            "kc.schedule.topic.replication.factor": self.size,
            "default.replication.factor": self.size, "auto.create.topics.enable": False,
            "kcompat.raft.tick.ms": 100, **dict(GROUP_CONFIGS), **dict(self.options.configs),
        }, {})
        node.store.now_ms = int(trio.current_time() * 1000)
        node.store.faults = DiskFaults()  # a restarted broker's disk is healed
        broker = Broker(cfg, store=node.store,
                        links=lambda n, _h, _p: self._link(node.node_id, n),
                        rng=Random(self.rng.random()))
        node.incarnation += 1
        node.stopped = trio.Event()
        assert self._root is not None
        await self._root.start(self._supervise, node, broker)
        self.log(f"node {node.node_id} up (incarnation {node.incarnation})")

    def _link(self, src: int, dst: int) -> Link:
        return SimLink(self, src, dst)

    async def _supervise(self, node: SimNode, broker: Broker,
                         task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            with trio.CancelScope() as scope:
                node.scope = scope
                async with trio.open_nursery() as nursery:
                    node.nursery = nursery
                    nursery.start_soon(broker.state.flusher.run)
                    broker.start_services(nursery)
                    await nursery.start(broker.cluster.run)
                    node.broker = broker
                    task_status.started()
        except Exception as e:
            self.failures.append(f"node {node.node_id} failed: {type(e).__name__}: {e}")
            logging.getLogger("kcompat.sim").exception("node %d failed", node.node_id)
            raise SimFailure(self.failures[-1]) from e
        finally:
            node.broker = node.nursery = node.scope = None
            node.stopped.set()

    async def crash(self, node: SimNode) -> None:
        """Power cut: the broker's tasks die, its disk loses what was not synced."""
        if node.scope is not None:
            node.scope.cancel()
        await node.stopped.wait()
        node.store.crash(self.rng, self.garble)
        self.log(f"node {node.node_id} crashed")

    def deliver(self, src: int, dst: int, frame: bytes) -> None:
        if frozenset((src, dst)) in self.cut or self.rng.random() < self.loss:
            return
        target = self.nodes[dst]
        incarnation = target.incarnation
        delay = self.rng.uniform(0.0005, 0.02)

        async def later() -> None:
            await trio.sleep(delay)
            scope = target.scope  # a crashing broker's tasks take no frame (its nursery is closing)
            if target.broker is not None and target.incarnation == incarnation and (
                    scope is not None and not scope.cancel_called):
                target.broker.cluster.receive(frame[4:])  # as the frame reader hands it on

        assert self._root is not None
        self._root.start_soon(later)

    # -- requests -----------------------------------------------------------------

    async def request(self, node: SimNode, key: int, version: int, rng: Random | None = None,
                      timeout_s: float = REQUEST_TIMEOUT_S, **fields: Any) -> Any:
        """One request handled by ``node``; None if it crashed or did not answer
        within ``timeout_s`` (or its answer was lost, drawn from ``rng``, the
        simulation's unless told)."""
        broker, nursery, scope = node.broker, node.nursery, node.scope
        if broker is None or nursery is None or scope is None or scope.cancel_called:
            return None  # crashed, or crashing: the connection is gone
        request = codec.build(codec.request_class(key, version), **fields)
        ctx = RequestContext(broker, key, version, 1, "sim", "sim")
        answer: list[Any] = []
        done = trio.Event()

        async def handle() -> None:
            try:
                answer.append(await HANDLERS[key](ctx, request))
            finally:
                done.set()

        nursery.start_soon(handle)
        with trio.move_on_after(timeout_s):
            await done.wait()
        if answer and (rng or self.rng).random() < self.lost_replies:
            return None  # handled, but the connection dropped before the answer came
        return answer[0] if answer else None

    def live(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.alive]

    def any_node(self) -> SimNode | None:
        live = self.live()
        return self.rng.choice(live) if live else None

    def leader_of(self, topic: str, index: int) -> SimNode | None:
        """Where a client's Metadata would send it (a random live broker's view)."""
        node = self.any_node()
        if node is None or node.broker is None:
            return None
        rt = node.broker.cluster
        if (topic, index) not in rt.assignments:
            return None
        leader = rt.partition_view(topic, index)[0]
        return self.nodes.get(leader) if leader != NO_NODE else None

    async def coordinator(self, key: str, key_type: int) -> SimNode | None:
        node = self.any_node()
        if node is None:
            return None
        r = await self.request(node, v.FIND_COORDINATOR, 4, key_type=key_type,
                               coordinator_keys=(key,))
        if r is None or r.coordinators[0].error_code != E.none:
            return None
        return self.nodes.get(r.coordinators[0].node_id)

    async def produce(self, node: SimNode, index: int, value: bytes,
                      producer: tuple[int, int, int] | None = None,
                      transactional: bool = False,
                      headers: tuple[tuple[str, bytes], ...] = (),
                      topic: str = TOPIC, acks: int = -1) -> tuple[E, int]:
        """One batch of one record (acks=all unless told); ``producer`` is
        (id, epoch, sequence)."""
        pid, epoch, seq = producer if producer is not None else (-1, -1, -1)
        now = time.time_ns() // 1_000_000
        records = encode_batch([(None, value, headers, now)], producer_id=pid,
                               producer_epoch=epoch,
                               base_sequence=seq, transactional=transactional)
        m = codec.request_module(v.PRODUCE, 9)
        r = await self.request(
            node, v.PRODUCE, 9, transactional_id=TXN_ID if transactional else None, acks=acks,
            timeout=datetime.timedelta(seconds=2), topic_data=(m.TopicProduceData(
                name=topic, partition_data=(m.PartitionProduceData(
                    index=index, records=records),)),))
        if r is None:
            return E.request_timed_out, -1
        p = r.responses[0].partition_responses[0]
        return p.error_code, p.base_offset

    async def _pause(self) -> None:
        await trio.sleep(self.rng.uniform(0.01, 0.1))

    async def _create_topic(self) -> bool:
        wanted = [(TOPIC, {}), (RETRY_TOPIC, RETRY_CONFIGS)]
        with trio.move_on_after(30):
            while wanted:
                for node in self.live():
                    if node.broker is None or not node.broker.cluster.is_controller:
                        continue
                    name, configs = wanted[0]
                    try:
                        if name not in node.broker.state.topics:
                            await admin.create_topic(node.broker.controller, name, PARTITIONS,
                                                     self.size, dict(configs))
                        self.log(f"topic {name} created")
                        wanted.pop(0)
                        break
                    except Exception as e:  # not the controller any more, timeouts
                        self.log(f"create topic: {e!r}")
                else:
                    await trio.sleep(0.1)
        return not wanted

    # -- clients ------------------------------------------------------------------

    async def _producer(self) -> None:
        n = 0
        while True:
            await self._pause()
            index = self.rng.randrange(PARTITIONS)
            node = self.leader_of(TOPIC, index)
            if node is None:
                continue
            n += 1
            value = b"p%d" % n
            error, offset = await self.produce(node, index, value)
            if error == E.none:
                self.acked.append((index, offset, value))
                self.log(f"{value.decode()} at {TOPIC}-{index}@{offset}")

    async def _idempotent_producer(self, prefix: bytes = b"i", delayed: bool = False,
                                   topic: str = TOPIC) -> None:
        """Retries a batch until it is acknowledged (the same sequence number),
        starting over with a new producer id when the broker says it must.
        ``delayed``: every record asks for delivery 0.05-2 s later. To the
        retry topic: a first failure (retried there) or a second (a dead
        letter), at random."""
        pid = epoch = -1
        seqs = [0] * PARTITIONS
        n = 0
        while True:
            await self._pause()
            node = self.any_node()
            if pid < 0 and node is not None:
                r = await self.request(node, v.INIT_PRODUCER_ID, 4, transactional_id=None,
                                       transaction_timeout=datetime.timedelta(seconds=60),
                                       producer_id=-1, producer_epoch=-1)
                if r is not None and r.error_code == E.none:
                    pid, epoch, seqs = r.producer_id, r.producer_epoch, [0] * PARTITIONS
                continue
            index = self.rng.randrange(PARTITIONS)
            n += 1
            value = b"%s%d" % (prefix, n)
            headers: tuple[tuple[str, bytes], ...] = (
                (("kc-delay-ms", b"%d" % self.rng.randint(50, 2000)),) if delayed else ())
            landing = RETRY_TOPIC
            if topic == RETRY_TOPIC and self.rng.random() < 0.5:
                value, headers, landing = b"q" + value[1:], (("kc-attempt", b"1"),), DLQ_TOPIC
            while pid >= 0:
                leader = self.leader_of(topic, index)
                if leader is not None:
                    error, offset = await self.produce(leader, index, value,
                                                       (pid, epoch, seqs[index]),
                                                       headers=headers, topic=topic)
                    if error == E.none:
                        seqs[index] += 1
                        if topic == RETRY_TOPIC:
                            self.moved.append((landing, value))
                        else:
                            (self.delayed if delayed else self.acked).append(
                                (index, offset, value))
                        self.log(f"{value.decode()} at {TOPIC}-{index}@{offset}")
                        break
                    if error in (E.out_of_order_sequence_number, E.unknown_producer_id,
                                 E.invalid_producer_epoch, E.producer_fenced):
                        self.log(f"{value.decode()}: {error.name}, new producer id")
                        pid = -1
                        break
                await self._pause()

    async def _delayer(self) -> None:
        await self._idempotent_producer(b"d", delayed=True)

    async def _retrier(self) -> None:
        await self._idempotent_producer(b"r", topic=RETRY_TOPIC)

    async def _committer(self) -> None:
        offset = 0
        m = codec.request_module(v.OFFSET_COMMIT, 8)
        while True:
            await self._pause()
            node = await self.coordinator(GROUP, 0)
            if node is None:
                continue
            if self.rng.random() < 0.6:
                offset += 1
                r = await self.request(
                    node, v.OFFSET_COMMIT, 8, group_id=GROUP, generation_id_or_member_epoch=-1,
                    member_id="", group_instance_id=None, topics=(m.OffsetCommitRequestTopic(
                        name=TOPIC, partitions=(codec.build(
                            m.OffsetCommitRequestPartition, partition_index=0,
                            committed_offset=offset, committed_leader_epoch=-1,
                            committed_metadata=""),)),))
                if r is not None and r.topics[0].partitions[0].error_code == E.none:
                    self.committed = offset
                    self.log(f"committed {offset}")
                continue
            floor = self.committed
            got = await self.fetch_offset(node)
            if got is not None and got < floor:
                self.failures.append(f"OffsetFetch answered {got} after commit {floor} was "
                                     "acknowledged: committed offsets went back")

    async def fetch_offset(self, node: SimNode) -> int | None:
        m = codec.request_module(v.OFFSET_FETCH, 7)
        r = await self.request(node, v.OFFSET_FETCH, 7, group_id=GROUP, require_stable=False,
                               topics=(m.OffsetFetchRequestTopic(name=TOPIC,
                                                                 partition_indexes=(0,)),))
        if r is None or r.error_code != E.none:
            return None
        part = r.topics[0].partitions[0]
        return part.committed_offset if part.error_code == E.none else None

    async def _transactor(self) -> None:
        pid = epoch = -1
        number = 0
        while True:
            await self._pause()
            node = await self.coordinator(TXN_ID, 1)
            if node is None:
                continue
            if pid < 0:
                r = await self.request(node, v.INIT_PRODUCER_ID, 4, transactional_id=TXN_ID,
                                       transaction_timeout=datetime.timedelta(seconds=60),
                                       producer_id=-1, producer_epoch=-1)
                if r is None or r.error_code != E.none:
                    continue
                pid, epoch = r.producer_id, r.producer_epoch
                seqs = [0] * PARTITIONS
            number += 1
            parts = sorted(self.rng.sample(range(PARTITIONS), self.rng.randint(1, PARTITIONS)))
            clean = await self._add_partitions(node, pid, epoch, parts)
            values = self.txn_values.setdefault(number, set())
            for index in parts if clean else ():
                leader = self.leader_of(TOPIC, index)
                value = b"x%d-%d" % (number, index)
                error = E.request_timed_out
                if leader is not None:
                    error, _ = await self.produce(leader, index, value, (pid, epoch, seqs[index]),
                                                  transactional=True)
                if error != E.none:
                    clean = False
                    break
                seqs[index] += 1
                values.add(value)
            commit = clean and self.rng.random() < 0.6
            r = await self.request(node, v.END_TXN, 3, transactional_id=TXN_ID, producer_id=pid,
                                   producer_epoch=epoch, committed=commit)
            if r is not None and r.error_code == E.none:
                self.txn_outcome[number] = commit
                self.log(f"txn {number} {'committed' if commit else 'aborted'}")
            if not clean or r is None or r.error_code != E.none:
                pid = -1  # start over with a new epoch (completes or aborts the open one)

    async def _add_partitions(self, node: SimNode, pid: int, epoch: int,
                              parts: list[int]) -> bool:
        m = codec.request_module(v.ADD_PARTITIONS_TO_TXN, 3)
        r = await self.request(node, v.ADD_PARTITIONS_TO_TXN, 3,
                               v3_and_below_transactional_id=TXN_ID,
                               v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
                               v3_and_below_topics=(m.AddPartitionsToTxnTopic(
                                   name=TOPIC, partitions=tuple(parts)),))
        if r is None:
            return False
        results = r.results_by_topic_v3_and_below[0].results_by_partition
        return all(p.partition_error_code == E.none for p in results)

    async def _nemesis(self) -> None:
        rng = self.rng
        while True:
            await trio.sleep(rng.uniform(0.05, 0.5))
            roll = rng.random()
            down = [n for n in self.nodes.values() if not n.alive]
            if roll < self.crash_rate * 0.3 and len(down) < (self.size + 1) // 2:
                victim = rng.choice(self.live())
                await self.crash(victim)
            elif roll < 0.5 and down:
                await self.boot(rng.choice(down))
            elif roll < 0.6 and self.size > 1:
                a, b = rng.sample(sorted(self.nodes), 2)
                self.cut.add(frozenset((a, b)))
                self.log(f"cut {a}-{b}")
            elif roll < 0.75 and self.cut:
                self.cut.clear()
                self.log("network healed")
            elif self.options.disk_faults and roll < 0.85:
                self._break_disk(rng.choice(list(self.nodes.values())))
            elif self.options.disk_faults and roll < 0.95:
                node = rng.choice(list(self.nodes.values()))
                if node.store.faults != DiskFaults():
                    node.store.faults = DiskFaults()
                    self.log(f"node {node.node_id}: disk healed")

    def _break_disk(self, node: SimNode) -> None:
        """A full disk, or EIO on writes or fsyncs: the whole disk or one
        partition's directory of the produced topic."""
        rng = self.rng
        where = rng.choice(["", f"/{TOPIC}-{rng.randrange(PARTITIONS)}/"])
        kind = rng.choice(["full", "eio-write", "eio-sync"])
        faults = DiskFaults(paths=f"/sim/n{node.node_id}{where}" if where else "",
                            short=rng.random() < 0.7)
        if kind == "full":
            faults.capacity = node.store.used_bytes() + rng.randrange(0, 4096)
        elif kind == "eio-write":
            faults.write_errno = errno.EIO
        else:
            faults.sync_errno = errno.EIO
        node.store.faults = faults
        self.log(f"node {node.node_id}: disk fault {kind} on {faults.paths or 'the whole disk'}")

    # -- the checks ---------------------------------------------------------------

    def _groups(self) -> list[tuple[str, int]]:
        names = [(t, i) for i in range(PARTITIONS) for t in (TOPIC, RETRY_TOPIC, DLQ_TOPIC)]
        return names + [(internal, i) for i in range(2) for internal in (
            "__consumer_offsets", "__transaction_state", "__kc_schedule")]

    def _values(self, topic: str) -> list[tuple[bytes | None, dict[str, bytes | None]]]:
        """(value, headers) of every record of ``topic`` its leaders hold."""
        out = []
        for index in range(PARTITIONS):
            leader = self.leader_of(topic, index)
            part = leader.broker.state.partition(topic, index) if (
                leader is not None and leader.broker is not None) else None
            if part is not None:
                out += [(r.value, dict(r.headers)) for raw, h in part.log.batches(
                    part.log.log_start_offset, part.high_watermark) if not h.is_control
                        for r in decode_batch(raw)]
        return out

    async def _delivered(self) -> bool:
        """Wait until every acknowledged delayed record is in its partition."""
        deadline = trio.current_time() + self.options.recovery_s
        while trio.current_time() < deadline:
            found = set()
            for index in range(PARTITIONS):
                leader = self.leader_of(TOPIC, index)
                part = leader.broker.state.partition(TOPIC, index) if (
                    leader is not None and leader.broker is not None) else None
                if part is not None:
                    found |= {r.value for raw, _h in part.log.batches(
                        part.log.log_start_offset, part.high_watermark)
                        for r in decode_batch(raw)}
            missing = [v for _i, _o, v in self.delayed if v not in found]
            landed = {t: {v for v, _h in self._values(t)} for t in (RETRY_TOPIC, DLQ_TOPIC)}
            missing += [v for t, v in self.moved if v not in landed[t]]
            if not missing:
                self.log(f"{len(self.delayed)} delayed records delivered, "
                         f"{len(self.moved)} retries and dead letters moved")
                return True
            await trio.sleep(0.5)
        self.failures.append(f"acknowledged delayed records never delivered: {missing[:5]}")
        return False

    async def _settle(self) -> bool:
        """Every partition has a leader and every replica holds its whole log."""
        deadline = trio.current_time() + self.options.recovery_s
        while trio.current_time() < deadline:
            await trio.sleep(0.2)
            if all(self._converged(t, i) for t, i in self._groups()):
                self.log("converged")
                return True
        stuck = [f"{t}-{i}" for t, i in self._groups() if not self._converged(t, i)]
        self.failures.append(f"no convergence within {self.options.recovery_s} s "
                             f"after healing: {stuck}")
        return False

    def _converged(self, topic: str, index: int) -> bool:
        ends = set()
        for node in self.nodes.values():
            broker = node.broker
            if broker is None:
                return False
            if topic not in broker.state.topics and broker.cluster.caught_up:
                continue  # never created (no client reached its coordinator)
            group = broker.cluster.group_of(topic, index)
            if group is None:
                if (topic, index) in broker.cluster.assignments:
                    continue  # not a replica here
                return False
            if group.is_leader and group.machine is not None and not group.serving:
                return False  # a coordinator still loading
            ends.add((group.storage.plog.log_end_offset, group.hw))
        return len(ends) <= 1 and all(end == hw for end, hw in ends)

    def _check_moves(self) -> None:
        """Retries and dead letters: replicas agree, each acknowledged one once."""
        for topic in (RETRY_TOPIC, DLQ_TOPIC):
            for index in range(PARTITIONS):
                logs = self._replica_logs(index, topic)
                if any(log != logs[0] for log in logs):
                    self.failures.append(f"replicas of {topic}-{index} disagree")
        for topic, attempt_header in ((RETRY_TOPIC, "kc-attempt"),
                                      (DLQ_TOPIC, "kc-dlq-attempts")):
            counts: dict[bytes | None, int] = {}
            for value, headers in self._values(topic):
                counts[value] = counts.get(value, 0) + 1
                if headers.get(attempt_header) != b"1":
                    self.failures.append(f"{value!r} in {topic} with {attempt_header} "
                                         f"{headers.get(attempt_header)!r}")
            for landing, value in self.moved:
                if landing == topic and counts.get(value) != 1:
                    self.failures.append(f"moved record {value!r} written "
                                         f"{counts.get(value, 0)} times to {topic}")

    def _replica_logs(self, index: int, topic: str = TOPIC) -> list[list[tuple[int, bytes]]]:
        logs = []
        for node in self.nodes.values():
            assert node.broker is not None
            part = node.broker.state.partition(topic, index)
            if part is None:
                continue
            plog = part.log
            logs.append([(h.base_offset, bytes(raw)) for raw, h in
                         plog.batches(plog.log_start_offset, plog.log_end_offset)])
        return logs

    def _check_logs(self) -> None:
        outcomes: dict[bytes, set[bool]] = {}
        for index in range(PARTITIONS):
            logs = self._replica_logs(index)
            if any(log != logs[0] for log in logs):
                self.failures.append(f"replicas of {TOPIC}-{index} disagree")
            batches = dict(logs[0]) if logs else {}
            copies: dict[bytes, int] = {}
            holes: dict[bytes, bytes | None] = {}  # delivered value -> kc-scheduled-offset
            for raw in batches.values():
                for record in decode_batch(raw):
                    if record.value is not None and record.value[:1] in (b"i", b"d"):
                        copies[record.value] = copies.get(record.value, 0) + 1
                        holes[record.value] = dict(record.headers).get("kc-scheduled-offset")
            for copied, count in copies.items():
                if count > 1:
                    what = "delayed record" if copied[:1] == b"d" else "idempotent produce"
                    self.failures.append(f"{what} {copied!r} written {count} "
                                         f"times to {TOPIC}-{index}")
            for p, offset, value in self.delayed:
                found = batches.get(offset)
                if p != index:
                    continue
                if found is None or decode_batch(found):
                    self.failures.append(f"delayed produce {value!r} acknowledged at "
                                         f"{TOPIC}-{index}@{offset}, where no empty batch is")
                if holes.get(value) != b"%d" % offset:
                    self.failures.append(f"delayed produce {value!r} acknowledged at {offset} "
                                         f"delivered with hole {holes.get(value)!r}")
            for p, offset, value in self.acked:
                if p != index:
                    continue
                found = batches.get(offset)
                if found is None or decode_batch(found)[0].value != value:
                    self.failures.append(f"acknowledged produce lost: {value!r} at "
                                         f"{TOPIC}-{index} offset {offset}")
            self._collect_outcomes(batches, outcomes)
        for value, seen in outcomes.items():
            if len(seen) > 1:
                self.failures.append(f"transactional record {value!r} both committed and "
                                     "aborted")
        for number, values in self.txn_values.items():
            results = {o for value in values for o in outcomes.get(value, ())}
            if len(results) > 1:
                self.failures.append(f"transaction {number} both committed and aborted")
            acked = self.txn_outcome.get(number)
            if acked is True and any(outcomes.get(value) != {True} for value in values):
                self.failures.append(f"transaction {number} was committed, its records "
                                     f"are not: {sorted(values)}")
            if acked is False and True in results:
                self.failures.append(f"transaction {number} was aborted, a record of it "
                                     "is committed")

    @staticmethod
    def _collect_outcomes(batches: dict[int, bytes], outcomes: dict[bytes, set[bool]]) -> None:
        """Which marker closed each transactional record (True: commit)."""
        pending: dict[int, list[bytes]] = {}
        for _offset, raw in sorted(batches.items()):
            for _pos, h in iter_headers(raw):
                if not h.is_transactional:
                    continue
                if h.is_control:
                    commit = not marker_aborts(raw)
                    for value in pending.pop(h.producer_id, []):
                        outcomes.setdefault(value, set()).add(commit)
                else:
                    pending.setdefault(h.producer_id, []).extend(
                        r.value for r in decode_batch(raw) if r.value is not None)

    async def _check_final_offset(self) -> None:
        for _ in range(50):
            node = await self.coordinator(GROUP, 0)
            got = await self.fetch_offset(node) if node is not None else None
            if got is not None:
                if got < self.committed:
                    self.failures.append(f"committed offset {self.committed} came back as "
                                         f"{got} after the restart")
                return
            await trio.sleep(0.2)
        self.failures.append("the group coordinator did not answer after healing")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--disk-faults", action="store_true",
                        help="the nemesis also fills and breaks disks")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    for seed in range(args.seed, args.seed + args.seeds):
        try:
            BrokerSimulation(seed, BrokerSimOptions(disk_faults=args.disk_faults),
                             verbose=args.verbose).run()
        except SimFailure as failure:
            print(failure, file=sys.stderr)
            return 1
    print(f"{args.seeds} seed(s) from {args.seed}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
