"""``kcompat cluster info`` — cluster id, controller, brokers and topic/group counts."""

from __future__ import annotations

import argparse
from typing import Any

from kcompat.cli._common import add_client_args, admin_client, print_json, print_table


def register(sub: Any) -> None:
    cluster = sub.add_parser("cluster", help="cluster information")
    csub = cluster.add_subparsers(dest="cluster_command", required=True, metavar="COMMAND")
    p = csub.add_parser("info", help="cluster id, controller, brokers, topic and group counts")
    add_client_args(p)
    p.set_defaults(func=cmd_info)


def cmd_info(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        cluster = admin.describe_cluster()
        topics = admin.describe_topics()
        groups = admin.list_groups()
    brokers = [{"node_id": b["broker_id"], "host": b["host"], "port": b["port"],
                "rack": b.get("rack")} for b in cluster["brokers"]]
    info = {"cluster_id": cluster["cluster_id"], "controller_id": cluster["controller_id"],
            "brokers": brokers, "topics": sum(1 for t in topics if not t["is_internal"]),
            "partitions": sum(len(t["partitions"]) for t in topics if not t["is_internal"]),
            "groups": len(groups)}
    if args.json:
        print_json(info)
        return 0
    print(f"Cluster: {info['cluster_id']}  Controller: {info['controller_id']}  "
          f"Topics: {info['topics']}  Partitions: {info['partitions']}  Groups: {info['groups']}")
    print_table(["NODE", "HOST", "PORT", "RACK"],
                [(b["node_id"], b["host"], b["port"], b["rack"]) for b in brokers])
    return 0
