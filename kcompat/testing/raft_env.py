"""An interactive Raft cluster for scripted tests: step by step, traced.

Theory of operation
-------------------
``RaftEnv`` holds N nodes (each a ``Raft`` over a ``MemoryStorage`` with its
own seeded ``Random``) and one FIFO inbox per node. Nothing happens unless a
command says so: ``process_ready`` runs one node's Ready through the contract
(persist, sync, queue messages, advance), ``deliver`` steps a node's inbox,
``stabilize`` alternates both until the cluster is quiet, ``run`` ticks
every live node and stabilizes, round after round. Every effect is
written to a trace, which is what the datadriven tests
(``tests/unit/raft/testdata``) compare. Messages between nodes on different
sides of a ``partition`` are dropped when sent and when delivered.

Liveness (for quiescent groups, ``quiesce=true``) is scripted too: each node
has the ``down`` set its core reads, changed only by ``suspect`` and
``revive`` (the runtime's liveness verdicts, given by hand here).

Membership: ``add_observer`` starts a node outside the voter set (configured
with the first nodes' voters, as a learner is given the bootstrap voters);
``add_voter`` / ``remove_voter`` ask a leader for a change; ``compact``
records the voter set at the snapshot point (``Raft.voters_at``). A status
line shows a node's voters when they are not the configured ones.
"""

from __future__ import annotations

from random import Random

from kcompat.raft import (
    ChangeRefused,
    Entry,
    Message,
    NotLeader,
    Raft,
    RaftConfig,
    Ready,
    Snapshot,
    SnapshotId,
    describe,
    persist_ready,
)
from kcompat.raft.types import describe_entry
from kcompat.testing.memory_storage import MemoryStorage


class RaftEnv:
    def __init__(self) -> None:
        self.configs: dict[int, RaftConfig] = {}
        self.nodes: dict[int, Raft] = {}
        self.storages: dict[int, MemoryStorage] = {}
        self.inbox: dict[int, list[Message]] = {}
        self.side: dict[int, int] = {}
        self.down: set[int] = set()
        self.liveness: dict[int, set[int]] = {}  # node -> the peers it holds down
        self.out: list[str] = []
        self.hw_seen: dict[int, int] = {}

    # -- set-up ------------------------------------------------------------------

    def add_nodes(self, count: int, **options: int | bool) -> None:
        voters = frozenset(range(1, count + 1))
        for node_id in sorted(voters):
            self._add(node_id, voters, options)

    def add_observer(self, node_id: int, **options: int | bool) -> None:
        """A node that is not a voter, told the voters of the cluster."""
        self._add(node_id, next(iter(self.configs.values())).voters, options)

    def _add(self, node_id: int, voters: frozenset[int], options: dict[str, int | bool]) -> None:
        self.configs[node_id] = RaftConfig(node_id, voters, **options)  # type: ignore[arg-type]
        self.storages[node_id] = MemoryStorage()
        self.inbox[node_id] = []
        self.liveness[node_id] = set()
        self._start(node_id)

    def _start(self, node_id: int, high_watermark: int = 0) -> None:
        self.nodes[node_id] = Raft(
            self.configs[node_id],
            self.storages[node_id],
            Random(node_id),
            high_watermark,
            down=self.liveness[node_id],
        )

    # -- driving -----------------------------------------------------------------

    def process_ready(self, node_id: int) -> bool:
        raft = self.nodes[node_id]
        if node_id in self.down or not raft.has_ready():
            return False
        ready = raft.ready()
        self.out.append(f"> {node_id} handling Ready")
        hw_changed = self.hw_seen.get(node_id, 0) != ready.high_watermark
        self.hw_seen[node_id] = ready.high_watermark
        self.out.extend("  " + line for line in format_ready(ready, hw_changed))
        persist_ready(self.storages[node_id], ready)
        for m in ready.messages:
            if self._connected(m.src, m.dst) and m.dst not in self.down:
                self.inbox[m.dst].append(m)
        raft.advance(ready)
        return True

    def deliver(self, node_id: int) -> bool:
        msgs, self.inbox[node_id] = self.inbox[node_id], []
        msgs = [m for m in msgs if self._connected(m.src, m.dst)]
        if not msgs or node_id in self.down:
            return False
        self.out.append(f"> {node_id} receiving messages")
        for m in msgs:
            self.out.append("  " + describe(m))
            self.nodes[node_id].step(m)
        return True

    def _connected(self, a: int, b: int) -> bool:
        return self.side.get(a, 0) == self.side.get(b, 0)

    def stabilize(self) -> None:
        busy = True
        while busy:
            busy = False
            for node_id in sorted(self.nodes):
                busy |= self.process_ready(node_id)
            for node_id in sorted(self.nodes):
                busy |= self.deliver(node_id)

    def tick(self, node_id: int, count: int = 1) -> None:
        for _ in range(count):
            self.nodes[node_id].tick()

    def run(self, ticks: int) -> None:
        """``ticks`` rounds of: every live node ticks once, then the cluster
        stabilizes (one clock, at one rate, on every node)."""
        for _ in range(ticks):
            for node_id in sorted(self.nodes):
                if node_id not in self.down:
                    self.nodes[node_id].tick()
            self.stabilize()

    def suspect(self, node_id: int, peer: int) -> None:
        """``node_id``'s runtime stopped hearing from ``peer``."""
        self.liveness[node_id].add(peer)
        self.nodes[node_id].suspect(peer)

    def revive(self, node_id: int, peer: int, restarted: bool = False) -> None:
        """``node_id``'s runtime hears ``peer`` again (or a new incarnation:
        ``restarted``)."""
        self.liveness[node_id].discard(peer)
        self.nodes[node_id].revive(peer, restarted)

    def propose(self, node_id: int, data: str, count: int = 1) -> None:
        result = self.nodes[node_id].propose(data.encode(), count)
        if isinstance(result, NotLeader):
            self.out.append(f"not leader (leader={result.leader} term={result.term})")
        else:
            self.out.append(f"proposed {describe_entry(result)}")

    def change(self, node_id: int, add: int | None = None, remove: int | None = None) -> None:
        """Ask ``node_id`` to add or remove a voter; the result goes to the trace."""
        raft = self.nodes[node_id]
        result: Entry | ChangeRefused
        if add is not None:
            result = raft.add_voter(add)
        else:
            assert remove is not None
            result = raft.remove_voter(remove)
        if isinstance(result, ChangeRefused):
            self.out.append(f"refused: {result.reason.name} (leader={result.leader})")
        else:
            self.out.append(f"proposed {describe_entry(result)}")

    def compact(self, node_id: int, end: int) -> None:
        raft = self.nodes[node_id]
        snapshot = Snapshot(SnapshotId(end, raft.log.term_at(end - 1)), f"state@{end}".encode(),
                            raft.voters_at(end))
        self.storages[node_id].compact(snapshot)
        self.storages[node_id].sync()
        raft.compact(snapshot.id)

    def crash(self, node_id: int) -> None:
        lost = self.storages[node_id].crash()
        self.down.add(node_id)
        self.inbox[node_id] = []
        self.out.append(f"crashed {node_id} (lost {lost} unsynced writes)")

    def restart(self, node_id: int) -> None:
        self.down.discard(node_id)
        self.liveness[node_id].clear()  # a new runtime has heard nobody yet
        # the runtime's high-watermark checkpoint survives (Kafka checkpoints it)
        self._start(node_id, self.hw_seen.get(node_id, 0))

    def partition(self, groups: list[list[int]]) -> None:
        self.side = {n: i + 1 for i, group in enumerate(groups) for n in group}

    # -- inspection --------------------------------------------------------------

    def status_lines(self) -> list[str]:
        lines = []
        for node_id in sorted(self.nodes):
            s = self.nodes[node_id].status()
            down = " (down)" if node_id in self.down else ""
            raft = self.nodes[node_id]
            down += " quiesced" if raft.quiesced else ""
            if raft.voters != raft.config.voters or not raft.is_voter:
                down += " voters=" + ",".join(str(v) for v in sorted(raft.voters))
                down += "" if raft.is_voter else " (observer)"
            lines.append(
                f"{node_id}: {s.role.value} term={s.term} vote={s.vote} leader={s.leader} "
                f"log=[{s.log_start},{s.log_end}) last_term={s.last_term} "
                f"hw={s.high_watermark}{down}"
            )
        return lines

    def log_lines(self, node_id: int) -> list[str]:
        storage = self.storages[node_id]
        snap = storage.snapshot_id()
        head = [f"snapshot {snap.end}/{snap.term}"] if snap.end else []
        entries = [describe_entry(e) for e in storage.all_entries()]
        return head + [" ".join(entries) if entries else "(empty)"]

    def take_output(self) -> str:
        text = "\n".join(self.out) if self.out else "ok"
        self.out = []
        return text


def format_ready(ready: Ready, hw_changed: bool = True) -> list[str]:
    lines = []
    if ready.hard_state is not None:
        lines.append(f"HardState term={ready.hard_state.term} vote={ready.hard_state.vote}")
    if ready.snapshot is not None:
        lines.append(f"Snapshot {ready.snapshot.id.end}/{ready.snapshot.id.term}")
    if ready.truncate_from is not None:
        lines.append(f"Truncate from {ready.truncate_from}")
    if ready.entries:
        lines.append("Entries: " + " ".join(describe_entry(e) for e in ready.entries))
    if hw_changed:
        lines.append(f"HW {ready.high_watermark}")
    lines.extend(describe(m) for m in ready.messages)
    return lines
