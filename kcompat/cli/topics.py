"""``kcompat topics create|list|describe|alter|delete`` — kafka-topics.sh in small
(``topics reassign``: ``reassign``).

Each subcommand is one admin request (CreateTopics, Metadata, DescribeConfigs +
ListOffsets, CreatePartitions / IncrementalAlterConfigs, DeleteTopics); per-topic
error codes in the responses become one-line errors naming the topic.
"""

from __future__ import annotations

import argparse
from typing import Any

from kcompat.cli import reassign
from kcompat.cli._common import (
    CliError,
    add_client_args,
    admin_client,
    check_code,
    parse_pairs,
    print_json,
    print_table,
)

TOPIC_ALREADY_EXISTS = 36
UNKNOWN_TOPIC = 3


def register(sub: Any) -> None:
    topics = sub.add_parser("topics", help="create, list, describe, alter and delete topics")
    tsub = topics.add_subparsers(dest="topics_command", required=True, metavar="COMMAND")

    p = tsub.add_parser("create", help="create a topic")
    p.add_argument("topic")
    p.add_argument("--partitions", type=int, default=-1, help="default: num.partitions")
    p.add_argument("--replication-factor", type=int, default=-1)
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="topic config, e.g. retention.ms=86400000 (repeatable)")
    p.add_argument("--if-not-exists", action="store_true", help="succeed if it exists")
    p.add_argument("--view-of", metavar="SOURCE",
                   help="create a read-only filtered view of SOURCE (kc.view.of)")
    p.add_argument("--filter", metavar="EXPR",
                   help="the view's filter (kc.view.filter), e.g. \"region = 'eu'\"")
    add_client_args(p)
    p.set_defaults(func=cmd_create)

    p = tsub.add_parser("list", help="list topics")
    p.add_argument("--internal", action="store_true", help="include __consumer_offsets")
    add_client_args(p)
    p.set_defaults(func=cmd_list)

    p = tsub.add_parser("describe", help="partitions, offsets and configs of topics")
    p.add_argument("topics", nargs="+", metavar="TOPIC")
    add_client_args(p)
    p.set_defaults(func=cmd_describe)

    p = tsub.add_parser("alter", help="add partitions or change topic configs")
    p.add_argument("topic")
    p.add_argument("--partitions", type=int, help="new total partition count")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="set a topic config (repeatable)")
    p.add_argument("--delete-config", action="append", default=[], metavar="KEY",
                   help="revert a topic config to the broker default (repeatable)")
    add_client_args(p)
    p.set_defaults(func=cmd_alter)

    p = tsub.add_parser("delete", help="delete topics")
    p.add_argument("topics", nargs="+", metavar="TOPIC")
    p.add_argument("--if-exists", action="store_true", help="succeed if a topic is missing")
    add_client_args(p)
    p.set_defaults(func=cmd_delete)

    reassign.register_topics(tsub)


def cmd_create(args: argparse.Namespace) -> int:
    configs = dict(parse_pairs(args.config, "--config"))
    if (args.view_of is None) != (args.filter is None):
        raise CliError("a view needs both --view-of SOURCE and --filter EXPR", exit_code=2)
    if args.view_of is not None:
        configs.update({"kc.view.of": args.view_of, "kc.view.filter": args.filter})
    spec = {args.topic: {"num_partitions": args.partitions,
                         "replication_factor": args.replication_factor, "configs": configs}}
    with admin_client(args) as admin:
        response = admin.create_topics(spec, raise_errors=False)
        row = response["topics"][0]
        code = row["error_code"]
        existed = code == TOPIC_ALREADY_EXISTS and args.if_not_exists
        if not existed:
            check_code(code, row.get("error_message"), f"cannot create topic {args.topic!r}")
        if args.json:
            print_json({"topic": args.topic, "created": not existed,
                        "partitions": row.get("num_partitions")})
        elif existed:
            print(f"topic {args.topic} already exists")
        else:
            print(f"created topic {args.topic}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        topics = admin.describe_topics()
    rows = sorted((t["name"], len(t["partitions"]), t["is_internal"]) for t in topics
                  if args.internal or not t["is_internal"])
    if args.json:
        print_json([{"topic": n, "partitions": p, "internal": i} for n, p, i in rows])
    else:
        print_table(["TOPIC", "PARTITIONS"], [(n, p) for n, p, _i in rows])
    return 0


def _describe_one(admin: Any, topic: dict[str, Any]) -> dict[str, Any]:
    from kafka import TopicPartition
    from kafka.admin import ConfigResource, OffsetSpec

    name = topic["name"]
    tps = [TopicPartition(name, p["partition_index"]) for p in topic["partitions"]]
    starts = admin.list_partition_offsets({tp: OffsetSpec.EARLIEST for tp in tps})
    ends = admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in tps})
    described = admin.describe_configs([ConfigResource("TOPIC", name)])
    configs = {k: v["value"] for k, v in described.get("topic", {}).get(name, {}).items()}
    partitions = []
    for p in sorted(topic["partitions"], key=lambda p: p["partition_index"]):
        tp = TopicPartition(name, p["partition_index"])
        partitions.append({"partition": p["partition_index"], "leader": p["leader_id"],
                           "replicas": p["replica_nodes"], "isr": p["isr_nodes"],
                           "log_start_offset": starts[tp].offset,
                           "log_end_offset": ends[tp].offset})
    return {"topic": name, "topic_id": str(topic["topic_id"]), "internal": topic["is_internal"],
            "partitions": partitions, "configs": configs}


def cmd_describe(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        found = admin.describe_topics(list(args.topics))
        for t in found:
            if t["error_code"] == UNKNOWN_TOPIC:
                raise CliError(f"unknown topic {t['name']!r}")
            check_code(t["error_code"], None, f"cannot describe topic {t['name']!r}")
        described = [_describe_one(admin, t) for t in found]
    if args.json:
        print_json(described)
        return 0
    for i, d in enumerate(described):
        if i:
            print()
        configs = ",".join(f"{k}={v}" for k, v in sorted(d["configs"].items())) or "-"
        print(f"Topic: {d['topic']}  TopicId: {d['topic_id']}  "
              f"PartitionCount: {len(d['partitions'])}  Configs: {configs}")
        print_table(["PARTITION", "LEADER", "REPLICAS", "ISR", "START-OFFSET", "END-OFFSET"],
                    [(p["partition"], p["leader"], ",".join(map(str, p["replicas"])),
                      ",".join(map(str, p["isr"])), p["log_start_offset"], p["log_end_offset"])
                     for p in d["partitions"]])
    return 0


def cmd_alter(args: argparse.Namespace) -> int:
    from kafka.admin import AlterConfigOp, ConfigResource

    if args.partitions is None and not args.config and not args.delete_config:
        raise CliError("nothing to alter: give --partitions, --config or --delete-config", 2)
    changes: dict[str, Any] = {k: (AlterConfigOp.SET, v)
                               for k, v in parse_pairs(args.config, "--config")}
    changes.update({k: (AlterConfigOp.DELETE, None) for k in args.delete_config})
    with admin_client(args) as admin:
        if not admin.describe_topics([args.topic])[0]["error_code"] == 0:
            raise CliError(f"unknown topic {args.topic!r}")
        if args.partitions is not None:
            response = admin.create_partitions({args.topic: args.partitions}, raise_errors=False)
            for row in response.results:
                check_code(row.error_code, row.error_message,
                           f"cannot add partitions to {args.topic!r}")
        if changes:
            response = admin.alter_configs([ConfigResource("TOPIC", args.topic, configs=changes)],
                                           raise_on_unknown=False, incremental=True)
            outcome = str(response.get("topic", {}).get(args.topic, "OK"))
            if outcome != "OK":  # kafka-python renders an error as "[Error N] Name: message"
                detail = outcome.split(": ", 1)[-1]
                raise CliError(f"cannot alter configs of {args.topic!r}: {detail}")
    if args.json:
        print_json({"topic": args.topic, "partitions": args.partitions,
                    "set": dict(parse_pairs(args.config, "--config")),
                    "deleted": list(args.delete_config)})
    else:
        print(f"altered topic {args.topic}")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    deleted = []
    with admin_client(args) as admin:
        response = admin.delete_topics(list(args.topics), raise_errors=False)
        for row in response["topics"]:
            if row["error_code"] == UNKNOWN_TOPIC:
                if args.if_exists:
                    continue
                raise CliError(f"unknown topic {row['name']!r}")
            check_code(row["error_code"], row.get("error_message"),
                       f"cannot delete topic {row['name']!r}")
            deleted.append(row["name"])
    if args.json:
        print_json({"deleted": deleted})
    else:
        for name in deleted:
            print(f"deleted topic {name}")
    return 0
