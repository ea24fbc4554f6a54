"""Moving replicas: ``kcompat topics reassign`` and ``kcompat cluster
rebalance|decommission`` (kafka-reassign-partitions.sh and the core of
Cruise Control, in small).

Theory of operation
-------------------
Everything goes through AlterPartitionReassignments and
ListPartitionReassignments (kio's entities over ``_kio``; kafka-python has
neither): a reassignment starts on the controller and the partition's leader
moves the Raft voters one at a time (``kcompat.broker.controller.
reassignment``). ``topics reassign`` takes one partition's replicas, a plan
file in Kafka's reassignment JSON (``{"version": 1, "partitions": [{"topic",
"partition", "replicas"}]}``, what ``kafka-reassign-partitions --generate``
prints) or ``--cancel``; ``--list`` shows what is moving. ``cluster
rebalance`` reads the layout (Metadata) and the partition sizes
(DescribeLogDirs of every broker), computes a balanced plan (``_balance``)
and prints it with the spread before and after — a dry run unless
``--execute``. ``cluster decommission NODE`` is the same plan with NODE
drained, executed at once; it waits (unless ``--no-wait``) until nothing is
moving, elects the plan's preferred leaders (ElectLeaders) rather than leave
them to the next leader balance check, and then fences the node for good
(UnregisterBroker, as ``cluster unregister NODE`` and ``kafka-cluster.sh
unregister`` do): no new replica goes there, and the process can be stopped —
restarted, it registers again.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from kio.schema.alter_partition_reassignments.v1 import request as alter
from kio.schema.describe_configs.v4 import request as configs
from kio.schema.describe_log_dirs.v4 import request as log_dirs
from kio.schema.elect_leaders.v2 import request as elect
from kio.schema.list_partition_reassignments.v0 import request as listing
from kio.schema.metadata.v12 import request as metadata
from kio.schema.types import BrokerId, TopicName
from kio.schema.unregister_broker.v0 import request as unregister_req
from kio.static.primitive import i8, i32, i32Timedelta

from kcompat.cli import _balance
from kcompat.cli._common import CliError, add_client_args, print_json, print_table
from kcompat.cli._kio import Cluster, error_name

RESOURCE_BROKER = 4  # DescribeConfigs' BROKER resource type

Key = tuple[str, int]
WAIT_POLL_S = 0.5


def register_topics(tsub: Any) -> None:
    p = tsub.add_parser("reassign", help="move a topic's partition replicas to other brokers")
    p.add_argument("topic", nargs="?", help="the topic (with --partition and --replicas)")
    p.add_argument("--partition", type=int, help="the partition to move")
    p.add_argument("--replicas", metavar="IDS", help="the new replicas, e.g. 2,3,4 (the first "
                   "is the preferred leader)")
    p.add_argument("--plan", type=Path, metavar="FILE",
                   help="Kafka's reassignment JSON ({\"version\":1,\"partitions\":[...]})")
    p.add_argument("--cancel", action="store_true",
                   help="cancel the partition's reassignment (back to its original replicas)")
    p.add_argument("--list", action="store_true", help="show the reassignments in progress")
    p.add_argument("--wait", action="store_true", help="return once nothing asked is moving")
    add_client_args(p)
    p.set_defaults(func=cmd_reassign)


def register_cluster(csub: Any) -> None:
    p = csub.add_parser("rebalance", help="spread replicas and leaders evenly over the brokers "
                        "(dry run unless --execute)")
    p.add_argument("--execute", action="store_true", help="start the moves")
    p.add_argument("--wait", action="store_true", help="with --execute: until they are done")
    p.add_argument("--brokers", metavar="IDS", help="the brokers to spread over (default: all)")
    add_client_args(p)
    p.set_defaults(func=cmd_rebalance)

    p = csub.add_parser("decommission", help="move every replica off a broker, then fence it "
                        "for good (unregister); it can then be stopped")
    p.add_argument("node", type=int, metavar="NODE")
    p.add_argument("--no-wait", action="store_true", help="start the moves and return "
                   "(the broker stays registered)")
    add_client_args(p)
    p.set_defaults(func=cmd_decommission)

    p = csub.add_parser("unregister", help="fence a broker for good (UnregisterBroker): no new "
                        "replicas there; its replicas stay (decommission moves them first)")
    p.add_argument("node", type=int, metavar="NODE")
    add_client_args(p)
    p.set_defaults(func=cmd_unregister)


# -- requests ---------------------------------------------------------------------------


def _connect(args: argparse.Namespace) -> Cluster:
    return Cluster.for_args(args, args.timeout_ms / 1000)


def layout(kio: Cluster) -> tuple[dict[Key, list[int]], dict[int, str | None]]:
    """Every partition's replicas (Metadata v12 of all topics) and the brokers (rack)."""
    answer = kio.bootstrap.call(metadata.MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    kio.addresses.update({b.node_id: (b.host, b.port) for b in answer.brokers})
    parts = {(t.name, int(p.partition_index)): [int(r) for r in p.replica_nodes]
             for t in answer.topics if t.error_code == 0 and t.name for p in t.partitions}
    return parts, {int(b.node_id): b.rack for b in answer.brokers}


def machines(kio: Cluster, brokers: list[int]) -> dict[int, tuple[str, int | None]]:
    """Each broker's machine and shard: ``kcompat.machine.id`` and
    ``kcompat.shard`` by DescribeConfigs to the broker itself. A broker that
    has neither (Kafka's) or does not answer is a machine of its own, no shard."""
    keys = ("kcompat.machine.id", "kcompat.shard")
    out: dict[int, tuple[str, int | None]] = {}
    for node in brokers:
        values: dict[str, str | None] = {}
        try:
            answer = kio.node(node).call(configs.DescribeConfigsRequest(resources=(
                configs.DescribeConfigsResource(resource_type=i8(RESOURCE_BROKER),
                                                resource_name=str(node),
                                                configuration_keys=keys),)))
            if answer.results[0].error_code == 0:
                values = {c.name: c.value for c in answer.results[0].configs}
        except CliError:
            pass  # unreachable: a machine of its own
        shard = int(values.get("kcompat.shard") or -1)
        out[node] = (values.get("kcompat.machine.id") or str(node), shard if shard >= 0 else None)
    return out


def sizes(kio: Cluster, brokers: list[int]) -> dict[Key, int]:
    """Each partition's size in bytes: the largest of its replicas' (DescribeLogDirs)."""
    out: dict[Key, int] = {}
    for node in brokers:
        try:
            answer = kio.node(node).call(log_dirs.DescribeLogDirsRequest(topics=None))
        except CliError:
            continue  # a broker that cannot answer: its replicas count as empty
        for result in answer.results:
            for topic in result.topics:
                for p in topic.partitions:
                    key = (topic.name, int(p.partition_index))
                    out[key] = max(out.get(key, 0), int(p.partition_size))
    return out


def start(kio: Cluster, moves: dict[Key, list[int] | None]) -> None:
    """AlterPartitionReassignments for ``moves`` (None: cancel); CliError
    naming every partition refused."""
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), replicas in sorted(moves.items(), key=lambda kv: kv[0]):
        by_topic.setdefault(topic, []).append(alter.ReassignablePartition(
            partition_index=i32(index),
            replicas=None if replicas is None else tuple(BrokerId(r) for r in replicas)))
    answer = kio.bootstrap.call(alter.AlterPartitionReassignmentsRequest(topics=tuple(
        alter.ReassignableTopic(name=TopicName(t), partitions=tuple(ps)) for t, ps in by_topic.items())))
    if answer.error_code != 0:
        raise CliError(f"reassignment refused: {error_name(answer.error_code)}: "
                       f"{answer.error_message or ''}")
    refused = [f"{t.name}-{p.partition_index}: {error_name(p.error_code)}: "
               f"{p.error_message or ''}"
               for t in answer.responses for p in t.partitions if p.error_code != 0]
    if refused:
        raise CliError("reassignment refused for " + "; ".join(refused))


def ongoing(kio: Cluster) -> dict[Key, dict[str, list[int]]]:
    answer = kio.bootstrap.call(listing.ListPartitionReassignmentsRequest(topics=None))
    if answer.error_code != 0:
        raise CliError(f"cannot list reassignments: {error_name(answer.error_code)}")
    return {(t.name, int(p.partition_index)): {
        "replicas": list(p.replicas), "adding": list(p.adding_replicas),
        "removing": list(p.removing_replicas)} for t in answer.topics for p in t.partitions}


def wait_done(kio: Cluster, keys: set[Key], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        left = keys & set(ongoing(kio))
        if not left:
            return
        if time.monotonic() >= deadline:
            raise CliError(f"still moving after {timeout_s:g} s: "
                           + ", ".join(f"{t}-{i}" for t, i in sorted(left)))
        time.sleep(WAIT_POLL_S)


def elect_preferred(kio: Cluster, keys: set[Key], timeout_s: float) -> None:
    """ElectLeaders (PREFERRED) for ``keys``, so the leaders follow the plan's
    first replicas now rather than at the next leader balance check (a
    partition it could not move yet is left to that check)."""
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(keys):
        by_topic.setdefault(topic, []).append(index)
    kio.bootstrap.call(elect.ElectLeadersRequest(
        election_type=i8(0), timeout=i32Timedelta.parse(timedelta(seconds=timeout_s)),
        topic_partitions=tuple(elect.TopicPartitions(
            topic=TopicName(t), partitions=tuple(i32(i) for i in ps))
            for t, ps in by_topic.items())), timeout_s=timeout_s + 5)


# -- commands ---------------------------------------------------------------------------


def _asked(args: argparse.Namespace) -> dict[Key, list[int] | None]:
    if args.plan is not None:
        try:
            doc = json.loads(args.plan.read_text())
            return {(str(p["topic"]), int(p["partition"])): [int(r) for r in p["replicas"]]
                    for p in doc["partitions"]}
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise CliError(f"{args.plan}: not a reassignment plan ({e})", 2) from e
    if args.topic is None or args.partition is None:
        raise CliError("give TOPIC --partition N with --replicas or --cancel, or --plan FILE, "
                       "or --list", 2)
    if args.cancel:
        return {(args.topic, args.partition): None}
    if not args.replicas:
        raise CliError("give --replicas IDS (or --cancel)", 2)
    try:
        return {(args.topic, args.partition): [int(x) for x in args.replicas.split(",")]}
    except ValueError:
        raise CliError(f"--replicas {args.replicas!r}: not a list of broker ids", 2) from None


def _print_ongoing(args: argparse.Namespace, found: dict[Key, dict[str, list[int]]]) -> None:
    if args.json:
        print_json([{"topic": t, "partition": i, **v} for (t, i), v in sorted(found.items())])
    else:
        print_table(["TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"],
                    [(t, i, _ids(v["replicas"]), _ids(v["adding"]), _ids(v["removing"]))
                     for (t, i), v in sorted(found.items())])


def _ids(ids: list[int]) -> str:
    return ",".join(map(str, ids)) or "-"


def cmd_reassign(args: argparse.Namespace) -> int:
    kio = _connect(args)
    try:
        if args.list:
            _print_ongoing(args, ongoing(kio))
            return 0
        moves = _asked(args)
        start(kio, moves)
        if args.wait:
            wait_done(kio, set(moves), max(60.0, args.timeout_ms / 1000))
    finally:
        kio.close()
    if args.json:
        print_json({"started": [{"topic": t, "partition": i, "replicas": r}
                                for (t, i), r in sorted(moves.items())], "done": args.wait})
    else:
        verb = "moved" if args.wait else "started moving"
        for (t, i), r in sorted(moves.items()):
            print(f"{verb} {t}-{i} to " + ("its original replicas" if r is None else _ids(r)))
    return 0


def _plan(args: argparse.Namespace, kio: Cluster, drain: tuple[int, ...] = ()
          ) -> tuple[dict[Key, list[int]], dict[Key, list[int]], list[int], dict[Key, int]]:
    parts, racks = layout(kio)
    brokers = sorted(racks)
    if getattr(args, "brokers", None):
        brokers = [int(x) for x in args.brokers.split(",")]
    for node in drain:
        if node not in racks:
            raise CliError(f"broker {node} is not in the cluster metadata")
    found = sizes(kio, sorted(racks))
    where = {node: machine for node, (machine, _shard) in machines(kio, sorted(racks)).items()}
    try:
        moves = _balance.plan(parts, brokers, found, drain, where)
    except ValueError as e:
        raise CliError(str(e)) from None
    return parts, moves, [b for b in brokers if b not in drain], found


def _report(args: argparse.Namespace, parts: dict[Key, list[int]], moves: dict[Key, list[int]],
            brokers: list[int], found: dict[Key, int], executed: bool) -> None:
    after = {**parts, **moves}
    every = sorted(set(brokers) | {b for r in parts.values() for b in r})
    before_s, after_s = _balance.spread(parts, every, found), _balance.spread(after, every, found)
    doc = {"version": 1, "partitions": [{"topic": t, "partition": i, "replicas": r}
                                        for (t, i), r in sorted(moves.items())]}
    if args.json:
        print_json({"plan": doc, "executed": executed,
                    "before": before_s.__dict__, "after": after_s.__dict__})
        return
    print(f"spread before: {before_s.text()}")
    print(f"spread after:  {after_s.text()}")
    if not moves:
        print("balanced already: nothing to move")
        return
    print_table(["TOPIC", "PARTITION", "FROM", "TO"],
                [(t, i, _ids(parts[(t, i)]), _ids(r)) for (t, i), r in sorted(moves.items())])
    if not executed:
        print("dry run: nothing moved (--execute starts the moves); the plan as "
              "kafka-reassign-partitions JSON:")
        print(json.dumps(doc))


def cmd_rebalance(args: argparse.Namespace) -> int:
    kio = _connect(args)
    try:
        parts, moves, brokers, found = _plan(args, kio)
        if args.execute and moves:
            start(kio, dict(moves))
            if args.wait:
                wait_done(kio, set(moves), max(120.0, args.timeout_ms / 1000))
                elect_preferred(kio, set(moves), 30.0)
        _report(args, parts, moves, brokers, found, args.execute)
    finally:
        kio.close()
    return 0


def unregister(kio: Cluster, node: int) -> None:
    answer = kio.bootstrap.call(unregister_req.UnregisterBrokerRequest(broker_id=BrokerId(node)))
    if answer.error_code != 0:
        raise CliError(f"cannot unregister broker {node}: {error_name(answer.error_code)}: "
                       f"{answer.error_message or ''}")


def cmd_unregister(args: argparse.Namespace) -> int:
    kio = _connect(args)
    try:
        unregister(kio, args.node)
    finally:
        kio.close()
    if args.json:
        print_json({"node": args.node, "unregistered": True})
    else:
        print(f"broker {args.node} is unregistered (fenced until it restarts)")
    return 0


def cmd_decommission(args: argparse.Namespace) -> int:
    kio = _connect(args)
    try:
        parts, moves, brokers, found = _plan(args, kio, drain=(args.node,))
        if moves:
            start(kio, dict(moves))
            if not args.no_wait:
                wait_done(kio, set(moves), max(300.0, args.timeout_ms / 1000))
                elect_preferred(kio, set(moves), 30.0)
        _report(args, parts, moves, brokers, found, True)
        if not args.no_wait:
            unregister(kio, args.node)
    finally:
        kio.close()
    if not args.json:
        if args.no_wait:
            print(f"broker {args.node} is being drained: run decommission again (without "
                  "--no-wait) to fence it once nothing is moving")
        else:
            print(f"broker {args.node} holds no replicas and is unregistered (fenced): stop it")
    return 0
