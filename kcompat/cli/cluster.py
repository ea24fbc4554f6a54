"""``kcompat cluster info`` — cluster id, controller, brokers and topic/group counts,
each broker's machine and shard (a node of several shards, ``kcompat.cores``, is
several brokers on one machine), and each node's part in the metadata quorum
(DescribeQuorum): ``controller`` (the quorum's leader), ``voter``, or
``observer`` (a broker-only node).
``cluster rebalance|decommission|unregister``: ``reassign``. ``cluster add-voter|remove-voter
NODE``: AddRaftVoter / RemoveRaftVoter (KIP-853) through any broker."""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any

from kcompat.cli import reassign
from kcompat.cli._common import CliError, add_client_args, admin_client, print_json, print_table
from kcompat.cli._kio import Cluster, error_name

VOTER_TIMEOUT_MS = 30_000


def register(sub: Any) -> None:
    cluster = sub.add_parser("cluster", help="cluster information")
    csub = cluster.add_subparsers(dest="cluster_command", required=True, metavar="COMMAND")
    p = csub.add_parser("info", help="cluster id, controller, brokers, topic and group counts")
    add_client_args(p)
    p.set_defaults(func=cmd_info)
    reassign.register_cluster(csub)
    for verb, what in (("add-voter", "make a broker that follows the metadata log (a broker-only "
                        "node) a voter of the metadata quorum"),
                       ("remove-voter", "remove a voter from the metadata quorum (replace a "
                        "dead controller)")):
        p = csub.add_parser(verb, help=what)
        p.add_argument("node", type=int, metavar="NODE")
        add_client_args(p)
        p.set_defaults(func=cmd_voter, add=verb == "add-voter")


def cmd_info(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        cluster = admin.describe_cluster()
        topics = admin.describe_topics()
        groups = admin.list_groups()
        quorum = _quorum(admin)
    roles = _roles(quorum)
    brokers = [{"node_id": b["broker_id"], "host": b["host"], "port": b["port"],
                "rack": b.get("rack"), "role": roles.get(b["broker_id"])}
               for b in cluster["brokers"]]
    for b, (machine, shard) in zip(brokers, _machines(args, brokers), strict=True):
        b["machine"], b["shard"] = machine, shard
    info = {"cluster_id": cluster["cluster_id"], "controller_id": cluster["controller_id"],
            "brokers": brokers, "topics": sum(1 for t in topics if not t["is_internal"]),
            "partitions": sum(len(t["partitions"]) for t in topics if not t["is_internal"]),
            "groups": len(groups), "quorum": quorum}
    if args.json:
        print_json(info)
        return 0
    print(f"Cluster: {info['cluster_id']}  Controller: {info['controller_id']}  "
          f"Topics: {info['topics']}  Partitions: {info['partitions']}  Groups: {info['groups']}")
    print_table(["MACHINE", "SHARD", "NODE", "HOST", "PORT", "RACK", "ROLE"],
                [(b["machine"], b["shard"], b["node_id"], b["host"], b["port"], b["rack"],
                  b["role"])
                 for b in sorted(brokers, key=lambda b: (b["machine"], b["shard"] or 0))])
    return 0


def _machines(args: argparse.Namespace, brokers: list[dict[str, Any]]
              ) -> list[tuple[str, int | None]]:
    """Each broker's machine and shard (``reassign.machines``)."""
    kio = Cluster.for_args(args, args.timeout_ms / 1000 + 5)
    kio.addresses.update({b["node_id"]: (b["host"], b["port"]) for b in brokers})
    try:
        found = reassign.machines(kio, [b["node_id"] for b in brokers])
    finally:
        kio.close()
    return [found[b["node_id"]] for b in brokers]


def cmd_voter(args: argparse.Namespace) -> int:
    """AddRaftVoter / RemoveRaftVoter (KIP-853) through any broker."""
    from kio.schema.add_raft_voter.v1 import request as add_req
    from kio.schema.remove_raft_voter.v0 import request as remove_req
    from kio.static.primitive import i32, i32Timedelta

    timeout_ms = max(args.timeout_ms, VOTER_TIMEOUT_MS)  # a new voter may need to catch up
    kio = Cluster.for_args(args, timeout_ms / 1000 + 5)
    try:
        if args.add:
            answer = kio.bootstrap.call(add_req.AddRaftVoterRequest(
                cluster_id=None, timeout=i32Timedelta.parse(timedelta(milliseconds=timeout_ms)),
                voter_id=i32(args.node), voter_directory_id=None, listeners=()))
        else:
            answer = kio.bootstrap.call(remove_req.RemoveRaftVoterRequest(
                cluster_id=None, voter_id=i32(args.node), voter_directory_id=None))
    finally:
        kio.close()
    verb = "add" if args.add else "remove"
    if answer.error_code != 0:
        raise CliError(f"cannot {verb} voter {args.node}: {error_name(answer.error_code)}: "
                       f"{answer.error_message or ''}")
    if args.json:
        print_json({"node": args.node, "voter": args.add})
    else:
        print(f"node {args.node} {'is now a voter' if args.add else 'is no longer a voter'} "
              f"of the metadata quorum")
    return 0


def _quorum(admin: Any) -> dict[str, Any] | None:
    """The metadata quorum's leader, voters and observers; None while it has no leader."""
    try:
        part = admin.describe_metadata_quorum()["topics"][0]["partitions"][0]
    except Exception:  # noqa: BLE001 - an election running: leave the roles out
        return None
    if part.get("error_code", 0) != 0:
        return None
    return {"leader": part["leader_id"],
            "voters": sorted(v["replica_id"] for v in part["current_voters"]),
            "observers": sorted(o["replica_id"] for o in part["observers"])}


def _roles(quorum: dict[str, Any] | None) -> dict[int, str]:
    if quorum is None:
        return {}
    roles = dict.fromkeys(quorum["observers"], "observer")
    roles.update(dict.fromkeys(quorum["voters"], "voter"))
    roles[quorum["leader"]] = "controller"
    return roles
