"""Consumer-group members for the broker simulator: the classic protocol under faults.

Theory of operation
-------------------
``MEMBERS`` consumers of the simulator's topic share the consumer group
``GROUP_ID`` through the real brokers' request handlers, as ``broker_sim``'s
other clients do: FindCoordinator; JoinGroup with the KIP-394 member-id
handshake; SyncGroup, where the member the coordinator names leader assigns
the partitions round-robin over the members it was given; a Heartbeat every
``HEARTBEAT_INTERVAL_S``; OffsetCommit of what each "consumed"; OffsetFetch of
every new assignment (where a consumer resumes); LeaveGroup. Member 0 is
static (KIP-345 ``group.instance.id``). Sessions are short
(``SESSION_TIMEOUT_MS``): the brokers get ``GROUP_CONFIGS``.

Faults, drawn from the workload's own ``Random`` so that adding it left the
nemesis's schedule as it was: a member is cut off from the cluster for
0.3-2 s (at times longer than its session: the coordinator removes it) and,
back, first commits what it had, as a consumer whose poll loop stalled; a
dynamic member leaves and, at times, commits once more as its old self; the
static member restarts (forgets its member id and joins under its instance
id, fencing its old id) and commits once as its old self. The nemesis's
crashes, restarts and network cuts move the coordinator under them all.

Every commit carries a value never committed before (``GroupLedger.value``),
so an offset read back names the commit that wrote it; values only grow. The
checks, Kafka's promises to a consumer (Kafka 4's classic group coordinator
answers a SyncGroup only once the assignment is written; a commit is checked
against the member and its generation, KIP-345 for static members):

* within one generation no partition is handed to two members (every
  SyncGroup answer is kept, by instance id for the static member), and no
  member is handed two assignments;
* a commit is refused (not acknowledged) when it names a generation older
  than one a SyncGroup already handed out, or the old id of a static member
  whose new id synced, before it was sent;
* a commit refused as fenced (``FENCED``: nothing was written) is never read
  back;
* no acknowledged commit is lost and committed offsets never go back: an
  OffsetFetch that starts after commit ``x`` of a partition was acknowledged
  reads ``x`` or a later commit — during the run and after every broker
  restarted;
* once the cluster healed (``settle``), the members run again, without
  faults, and within ``STABLE_WITHIN_S`` all hold, as confirmed by a
  heartbeat, assignments of one generation that cover every partition.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from random import Random
from typing import Any, Protocol

import trio
from kio.schema.errors import ErrorCode as E

from kcompat.group.consumer_protocol import (
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from kcompat.wire import codec
from kcompat.wire import versions as v

SimNode = Any  # a broker of the simulation (``broker_sim.SimNode``)


class BrokerSimulation(Protocol):
    """What the members use of ``broker_sim.BrokerSimulation`` (named
    structurally: the simulator imports this module)."""

    seed: int
    nodes: dict[int, SimNode]
    failures: list[str]

    def log(self, what: str) -> None: ...

    def live(self) -> list[SimNode]: ...

    async def request(self, node: SimNode, key: int, version: int, rng: Random | None = None,
                      **fields: Any) -> Any: ...

GROUP_ID = "cg"  # __consumer_offsets-0 (the committer's group is on partition 1)
MEMBERS = 3
STATIC_INSTANCE = "cg-static-0"
SESSION_TIMEOUT_MS = 1000
REBALANCE_TIMEOUT_MS = 1500
HEARTBEAT_INTERVAL_S = 0.25
STABLE_WITHIN_S = 15.0
GROUP_CONFIGS: tuple[tuple[str, object], ...] = (
    ("group.min.session.timeout.ms", 500), ("group.initial.rebalance.delay.ms", 200))
PROTOCOL = "roundrobin"
#: a commit answered so was checked and refused: nothing was written
FENCED = frozenset({E.illegal_generation, E.unknown_member_id, E.fenced_instance_id,
                    E.rebalance_in_progress})
#: the client must find the coordinator again
MOVED = frozenset({E.not_coordinator, E.coordinator_not_available})


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a commit says it comes from, and what it owns."""

    member_id: str
    generation: int
    instance_id: str | None
    partitions: frozenset[int]


@dataclass(eq=False)
class Member:
    index: int
    instance_id: str | None
    member_id: str = ""
    generation: int = -1
    assignment: frozenset[int] | None = None  # None: not synced in its generation
    confirmed: bool = False  # a heartbeat at this generation succeeded since
    coordinator: SimNode | None = None
    last_beat_s: float = 0.0
    zombie: Identity | None = None  # an old self that commits once more

    def identity(self) -> Identity:
        return Identity(self.member_id, self.generation, self.instance_id,
                        self.assignment or frozenset())

    def rejoin(self, forget_id: bool = False) -> None:
        if forget_id:
            self.member_id = ""
        self.assignment = None
        self.confirmed = False


@dataclass
class GroupLedger:
    """What the members were told; the checks over it (failures named in ``failures``)."""

    failures: list[str]
    assigned: dict[int, dict[str, frozenset[int]]] = field(default_factory=dict)
    generation_handed_out: int = -1  # the highest generation a SyncGroup answered
    static_owner: dict[str, str] = field(default_factory=dict)  # instance -> synced member id
    acked: dict[int, int] = field(default_factory=dict)  # partition -> highest acked commit
    refused: set[int] = field(default_factory=set)  # commits refused as fenced
    last_value: int = 0

    def value(self) -> int:
        self.last_value += 1
        return self.last_value

    def synced(self, who: Identity) -> None:
        """A SyncGroup answered ``who.partitions`` to ``who`` in ``who.generation``."""
        owner = who.instance_id or who.member_id
        handed = self.assigned.setdefault(who.generation, {})
        before = handed.get(owner)
        if before is not None and before != who.partitions:
            self.failures.append(f"group {GROUP_ID}: {owner} handed {sorted(before)} and "
                                 f"{sorted(who.partitions)} in generation {who.generation}")
        for other, theirs in handed.items():
            if other != owner and theirs & who.partitions:
                self.failures.append(
                    f"group {GROUP_ID}: partitions {sorted(theirs & who.partitions)} handed to "
                    f"{other} and {owner} in generation {who.generation}")
        handed[owner] = who.partitions
        self.generation_handed_out = max(self.generation_handed_out, who.generation)
        if who.instance_id is not None:
            self.static_owner[who.instance_id] = who.member_id

    def fenced(self, who: Identity) -> str | None:
        """Why a commit sent now by ``who`` must be refused, if it must."""
        if who.generation < self.generation_handed_out:
            return (f"generation {who.generation} after generation "
                    f"{self.generation_handed_out} was handed out")
        if who.instance_id is not None and self.static_owner.get(
                who.instance_id, who.member_id) != who.member_id:
            return (f"the old id {who.member_id} of {who.instance_id}, replaced by "
                    f"{self.static_owner[who.instance_id]}")
        return None

    def committed(self, who: Identity, partition: int, offset: int, code: E,
                  fenced: str | None) -> None:
        if code == E.none:
            if fenced is not None:
                self.failures.append(f"group {GROUP_ID}: commit {offset} of partition "
                                     f"{partition} acknowledged from {who.member_id}: {fenced}")
            self.acked[partition] = max(self.acked.get(partition, -1), offset)
        elif code in FENCED:
            self.refused.add(offset)

    def fetched(self, partition: int, floor: int, got: int, when: str) -> None:
        """An OffsetFetch that started after commit ``floor`` was acknowledged read ``got``."""
        if got < floor:
            self.failures.append(f"group {GROUP_ID}: OffsetFetch {when} read {got} for "
                                 f"partition {partition} after commit {floor} was "
                                 "acknowledged: an acknowledged commit was lost")
        if got in self.refused:
            self.failures.append(f"group {GROUP_ID}: commit {got} of partition {partition} "
                                 "was refused as fenced, yet OffsetFetch read it back")


class GroupWorkload:
    """The members of ``GROUP_ID`` in one simulation (see the module doc)."""

    def __init__(self, sim: BrokerSimulation, topic: str, partitions: int) -> None:
        self.sim = sim
        self.topic = topic
        self.partitions = partitions
        self.rng = Random(f"group members {sim.seed}")
        self.ledger = GroupLedger(sim.failures)
        self.members = [Member(i, STATIC_INSTANCE if i == 0 else None) for i in range(MEMBERS)]
        self.subscription = encode_subscription((topic,), version=0)

    # -- running ----------------------------------------------------------------

    async def run(self) -> None:
        """The chaos phase: the members with faults, until cancelled."""
        async with trio.open_nursery() as nursery:
            for m in self.members:
                nursery.start_soon(self._member, m, True)

    async def settle(self) -> None:
        """After healing: the members run without faults and must all be
        assigned in one generation; then every acknowledged commit reads back."""
        for m in self.members:
            m.zombie, m.coordinator, m.confirmed = None, None, False
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            for m in self.members:
                nursery.start_soon(self._member, m, False)
            while not self._stable():
                if trio.current_time() - start > STABLE_WITHIN_S:
                    self.sim.failures.append(
                        f"group {GROUP_ID} not stable {STABLE_WITHIN_S} s after healing: "
                        + ", ".join(f"{m.member_id or '-'} gen {m.generation} "
                                    f"{sorted(m.assignment or ())}"
                                    f"{'' if m.confirmed else ' unconfirmed'}"
                                    for m in self.members))
                    break
                await trio.sleep(0.2)
            else:
                self.sim.log(f"group {GROUP_ID} stable in generation "
                             f"{self.members[0].generation}")
            nursery.cancel_scope.cancel()
        await self._check_final_offsets()

    def _stable(self) -> bool:
        gens = {m.generation for m in self.members}
        owned: set[int] = set()
        for m in self.members:
            if m.assignment is None or not m.confirmed:
                return False
            owned |= m.assignment
        return len(gens) == 1 and owned == set(range(self.partitions))

    async def _check_final_offsets(self) -> None:
        everything = frozenset(range(self.partitions))
        for _ in range(50):
            node = await self._find_coordinator()
            if node is not None and await self._fetch(node, everything, "after healing"):
                return
            await trio.sleep(0.2)
        self.sim.failures.append(f"group {GROUP_ID}: no OffsetFetch answered after healing")

    async def _member(self, m: Member, faults: bool) -> None:
        while True:
            await trio.sleep(self.rng.uniform(0.03, 0.1))
            if m.coordinator is None or not m.coordinator.alive:
                m.coordinator = await self._find_coordinator()
                continue
            node = m.coordinator
            if m.zombie is not None and m.assignment is not None:
                zombie, m.zombie = m.zombie, None
                await self._commit(node, m, zombie)
            elif m.assignment is None:
                await self._join(node, m)
            elif trio.current_time() - m.last_beat_s >= HEARTBEAT_INTERVAL_S:
                await self._heartbeat(node, m)
            elif faults and (roll := self.rng.random()) < 0.1:
                await self._fault(node, m, roll / 0.1)
            elif faults:
                await self._commit(node, m, m.identity())

    async def _fault(self, node: SimNode, m: Member, roll: float) -> None:
        if roll < 0.4:  # a stalled poll loop (or a network cut): back, it commits first
            pause_s = self.rng.uniform(0.3, 2.0)
            self.sim.log(f"member {m.index} ({m.member_id}) cut off for {pause_s:.2f} s")
            await trio.sleep(pause_s)
            m.zombie = m.identity()
        elif m.instance_id is not None:  # the static member restarts
            self.sim.log(f"member {m.index} ({m.member_id}) restarts")
            m.zombie = m.identity()
            m.rejoin(forget_id=True)
        else:
            old = m.identity()
            await self._leave(node, m)
            if self.rng.random() < 0.5:
                await self._commit(node, m, old)
            await trio.sleep(self.rng.uniform(0.0, 0.5))

    # -- requests -----------------------------------------------------------------

    async def _request(self, node: SimNode, key: int, version: int, **fields: Any) -> Any:
        return await self.sim.request(node, key, version, rng=self.rng, **fields)

    async def _find_coordinator(self) -> SimNode | None:
        live = self.sim.live()
        if not live:
            return None
        r = await self._request(self.rng.choice(live), v.FIND_COORDINATOR, 4, key_type=0,
                                coordinator_keys=(GROUP_ID,))
        if r is None or r.coordinators[0].error_code != E.none:
            return None
        return self.sim.nodes.get(r.coordinators[0].node_id)

    def _answered(self, m: Member, code: E | None) -> None:
        """What a member does about an answer of the group's coordinator. One
        that must rejoin at times leaves a commit of its old self behind, sent
        once it synced again (an asynchronous commit the network delayed)."""
        if code is None or code in MOVED:
            m.coordinator = None
            return
        if code in FENCED and m.assignment and m.zombie is None and self.rng.random() < 0.3:
            m.zombie = m.identity()
        if code in (E.unknown_member_id, E.fenced_instance_id):
            m.rejoin(forget_id=True)
        elif code in (E.illegal_generation, E.rebalance_in_progress):
            m.rejoin()

    async def _join(self, node: SimNode, m: Member) -> None:
        m.confirmed = False
        r = None
        for _ in range(2):  # KIP-394: a new dynamic member first learns its id
            m_join = codec.request_module(v.JOIN_GROUP, 5)
            r = await self._request(
                node, v.JOIN_GROUP, 5, group_id=GROUP_ID,
                session_timeout=datetime.timedelta(milliseconds=SESSION_TIMEOUT_MS),
                rebalance_timeout=datetime.timedelta(milliseconds=REBALANCE_TIMEOUT_MS),
                member_id=m.member_id, group_instance_id=m.instance_id, protocol_type="consumer",
                protocols=(m_join.JoinGroupRequestProtocol(name=PROTOCOL,
                                                           metadata=self.subscription),))
            if r is None or r.error_code != E.member_id_required:
                break
            m.member_id = r.member_id
        if r is None or r.error_code != E.none:
            self._answered(m, None if r is None else r.error_code)
            return
        m.member_id, m.generation = r.member_id, r.generation_id
        assignments = self._assign(sorted(x.member_id for x in r.members), m.generation) if (
            r.leader == r.member_id) else {}
        m_sync = codec.request_module(v.SYNC_GROUP, 3)
        s = await self._request(
            node, v.SYNC_GROUP, 3, group_id=GROUP_ID, generation_id=m.generation,
            member_id=m.member_id, group_instance_id=m.instance_id,
            assignments=tuple(m_sync.SyncGroupRequestAssignment(member_id=mid, assignment=a)
                              for mid, a in assignments.items()))
        if s is None or s.error_code != E.none:
            self._answered(m, None if s is None else s.error_code)
            return
        assigned = decode_assignment(bytes(s.assignment)) or ()
        m.assignment = frozenset(p for t, ps in assigned if t == self.topic for p in ps)
        m.last_beat_s = trio.current_time()
        self.ledger.synced(m.identity())
        self.sim.log(f"member {m.index} ({m.member_id}) generation {m.generation}: "
                     f"{sorted(m.assignment)}")
        if m.assignment:  # where the consumer resumes
            await self._fetch(node, m.assignment, f"of member {m.index} on its assignment")

    def _assign(self, member_ids: list[str], generation: int) -> dict[str, bytes]:
        """Round-robin, turned by the generation: owners change across rebalances."""
        owned: dict[str, list[int]] = {mid: [] for mid in member_ids}
        for p in range(self.partitions):
            owned[member_ids[(p + generation) % len(member_ids)]].append(p)
        return {mid: encode_assignment(((self.topic, tuple(ps)),) if ps else ())
                for mid, ps in owned.items()}

    async def _heartbeat(self, node: SimNode, m: Member) -> None:
        m.last_beat_s = trio.current_time()
        r = await self._request(node, v.HEARTBEAT, 3, group_id=GROUP_ID,
                                generation_id=m.generation, member_id=m.member_id,
                                group_instance_id=m.instance_id)
        if r is not None and r.error_code == E.none:
            m.confirmed = True
        self._answered(m, None if r is None else r.error_code)

    async def _leave(self, node: SimNode, m: Member) -> None:
        m_leave = codec.request_module(v.LEAVE_GROUP, 3)
        self.sim.log(f"member {m.index} ({m.member_id}) leaves")
        await self._request(node, v.LEAVE_GROUP, 3, group_id=GROUP_ID, members=(
            m_leave.MemberIdentity(member_id=m.member_id, group_instance_id=m.instance_id),))
        m.rejoin(forget_id=True)

    async def _commit(self, node: SimNode, m: Member, who: Identity) -> None:
        """Commit a new position of each partition ``who`` owns, as ``who``."""
        if not who.partitions or not who.member_id:
            return
        offsets = {p: self.ledger.value() for p in sorted(who.partitions)}
        fenced = self.ledger.fenced(who)
        m_commit = codec.request_module(v.OFFSET_COMMIT, 8)
        r = await self._request(
            node, v.OFFSET_COMMIT, 8, group_id=GROUP_ID,
            generation_id_or_member_epoch=who.generation, member_id=who.member_id,
            group_instance_id=who.instance_id, topics=(m_commit.OffsetCommitRequestTopic(
                name=self.topic, partitions=tuple(codec.build(
                    m_commit.OffsetCommitRequestPartition, partition_index=p,
                    committed_offset=offset, committed_leader_epoch=-1, committed_metadata="")
                    for p, offset in offsets.items())),))
        codes = {p.partition_index: p.error_code for p in r.topics[0].partitions} if r else {}
        for p, offset in offsets.items():
            if p in codes:
                self.ledger.committed(who, p, offset, codes[p], fenced)
        if who == m.identity():
            self._answered(m, next(iter(codes.values())) if codes else None)
        self.sim.log(f"member {m.index} commit {offsets} as {who.member_id} "
                     f"gen {who.generation}: {sorted({c.name for c in codes.values()})}")

    async def _fetch(self, node: SimNode, partitions: frozenset[int], when: str) -> bool:
        floors = {p: self.ledger.acked.get(p, -1) for p in partitions}
        m_fetch = codec.request_module(v.OFFSET_FETCH, 7)
        r = await self._request(node, v.OFFSET_FETCH, 7, group_id=GROUP_ID,
                                require_stable=False, topics=(m_fetch.OffsetFetchRequestTopic(
                                    name=self.topic, partition_indexes=tuple(sorted(partitions))),))
        if r is None or r.error_code != E.none:
            return False
        for part in r.topics[0].partitions:
            if part.error_code == E.none:
                self.ledger.fetched(part.partition_index, floors[part.partition_index],
                                    part.committed_offset, when)
        return True

