"""``kcompat groups list|describe|reset-offsets|delete`` — kafka-consumer-groups.sh in small.

``describe`` joins three answers: DescribeGroups (state, members and their
assignments), OffsetFetch (committed offsets) and ListOffsets (log end
offsets); lag = log end offset - committed offset. ``reset-offsets`` works
like Kafka's tool: it prints the plan and changes nothing unless ``--execute``
is given, and it refuses while the group has members (they would overwrite it).

Share groups (KIP-932): ``list`` shows every group type ListGroups v5 reports
(``--type share`` asks for share groups only). ``describe`` first asks the
group's coordinator with ShareGroupDescribe (over ``_kio``; kafka-python has
no share APIs): a share group is shown with its members and their assignments.
A group that is no share group (GROUP_ID_NOT_FOUND) is described as a classic
one. Its partitions come from DescribeShareGroupOffsets v1 (API 90) at the
same coordinator: the start offset (the first record not yet acknowledged for
good) and the lag (records from there to the high watermark not yet
acknowledged), or none for a partition the group has not started (-1 in the
answer). API 90 carries no in-flight or archived counts, so neither does this
(``kafka-share-groups.sh --describe --offsets`` shows the same two columns).
"""

from __future__ import annotations

import argparse
from typing import Any

from kcompat.cli._common import (
    CliError,
    add_client_args,
    admin_client,
    print_json,
    print_table,
)

INACTIVE_STATES = ("Empty", "Dead")
GROUP_TYPES = ("classic", "consumer", "share")


def register(sub: Any) -> None:
    groups = sub.add_parser("groups", help="list, describe, reset and delete consumer groups")
    gsub = groups.add_subparsers(dest="groups_command", required=True, metavar="COMMAND")

    p = gsub.add_parser("list", help="list consumer and share groups")
    p.add_argument("--type", action="append", choices=GROUP_TYPES, dest="types",
                   help="only groups of this type (repeatable; ListGroups v5)")
    add_client_args(p)
    p.set_defaults(func=cmd_list)

    p = gsub.add_parser("describe", help="members, committed offsets and lag of a group")
    p.add_argument("group")
    add_client_args(p)
    p.set_defaults(func=cmd_describe)

    p = gsub.add_parser("reset-offsets", help="move a group's committed offsets (dry run "
                                              "unless --execute)")
    p.add_argument("group")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, action="append", metavar="N",
                   help="only this partition (repeatable; default all)")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int, metavar="N")
    to.add_argument("--to-timestamp", type=int, metavar="MS",
                    help="first offset with a timestamp >= MS (epoch milliseconds)")
    to.add_argument("--shift-by", type=int, metavar="N", help="committed offset + N (may be < 0)")
    p.add_argument("--execute", action="store_true", help="apply the plan (default: dry run)")
    add_client_args(p)
    p.set_defaults(func=cmd_reset)

    p = gsub.add_parser("delete", help="delete groups and their committed offsets")
    p.add_argument("groups", nargs="+", metavar="GROUP")
    add_client_args(p)
    p.set_defaults(func=cmd_delete)


def cmd_list(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        groups = sorted(admin.list_groups(types_filter=args.types), key=lambda g: g["group_id"])
    rows = [{"group": g["group_id"], "type": g.get("group_type") or None,
             "state": g.get("group_state") or None,
             "protocol_type": g.get("protocol_type") or None} for g in groups]
    if args.json:
        print_json(rows)
    else:
        print_table(["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE"],
                    [(r["group"], r["type"], r["state"], r["protocol_type"]) for r in rows])
    return 0


def _describe(admin: Any, group_id: str) -> dict[str, Any]:
    from kafka.admin import OffsetSpec

    info = admin.describe_groups([group_id])[group_id]
    committed = admin.list_group_offsets({group_id: None}).get(group_id, {})
    if info["group_state"] == "Dead" and not committed:
        raise CliError(f"unknown group {group_id!r}")
    owner: dict[Any, dict[str, Any]] = {}
    for member in info["members"]:
        assignment = member.get("member_assignment") or {}
        for entry in assignment.get("assigned_partitions", []):
            for p in entry["partitions"]:
                owner[(entry["topic"], p)] = member
    from kafka import TopicPartition

    tps = sorted({TopicPartition(t, p) for t, p in owner} | set(committed))
    ends = admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in tps}) if tps else {}
    partitions = []
    for tp in tps:
        current = committed[tp].offset if tp in committed else None
        end = ends[tp].offset if tp in ends else None
        member = owner.get((tp.topic, tp.partition), {})
        partitions.append({
            "topic": tp.topic, "partition": tp.partition, "current_offset": current,
            "log_end_offset": end,
            "lag": max(end - current, 0) if current is not None and end is not None else None,
            "consumer_id": member.get("member_id"), "host": member.get("client_host"),
            "client_id": member.get("client_id")})
    return {"group": group_id, "state": info["group_state"],
            "protocol_type": info["protocol_type"], "protocol": info["protocol_data"],
            "members": len(info["members"]), "partitions": partitions}


def _describe_share(args: argparse.Namespace, group_id: str) -> dict[str, Any] | None:
    """ShareGroupDescribe at the group's coordinator, with its partitions' share offsets
    (DescribeShareGroupOffsets); None if it is no share group."""
    from kio.schema.errors import ErrorCode
    from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
    from kio.schema.types import GroupId

    from kcompat.cli._common import client_config
    from kcompat.cli._kio import Cluster, error_name

    client_config(args)  # validates --bootstrap-server
    cluster = Cluster.for_args(args, args.timeout_ms / 1000)
    try:
        coordinator = cluster.coordinator(group_id)
        (g,) = coordinator.call(ShareGroupDescribeRequest(
            group_ids=(GroupId(group_id),), include_authorized_operations=False)).groups
        if g.error_code == ErrorCode.group_id_not_found:
            return None
        if g.error_code != ErrorCode.none:
            raise CliError(f"cannot describe share group {group_id!r}: "
                           f"{error_name(g.error_code)}")
        offsets = _share_offsets(coordinator, group_id)
    finally:
        cluster.close()
    members = [{"member_id": m.member_id, "member_epoch": int(m.member_epoch),
                "client_id": m.client_id, "host": m.client_host,
                "subscribed_topics": list(m.subscribed_topic_names),
                "assignment": [{"topic": tp.topic_name, "partitions": sorted(tp.partitions)}
                               for tp in m.assignment.topic_partitions]} for m in g.members]
    return {"group": group_id, "type": "share", "state": g.group_state,
            "group_epoch": int(g.group_epoch), "assignment_epoch": int(g.assignment_epoch),
            "assignor": g.assignor_name, "members": members, "offsets": offsets}


def _share_offsets(coordinator: Any, group_id: str) -> list[dict[str, Any]]:
    """DescribeShareGroupOffsets v1 of every topic the group has share state for: per
    partition its start offset and lag (None where the answer says -1: not started,
    or the lag unknown) and its error, sorted by topic and partition."""
    from kio.schema.describe_share_group_offsets.v1 import request as offsets_request
    from kio.schema.errors import ErrorCode
    from kio.schema.types import GroupId

    from kcompat.cli._kio import error_name

    request = offsets_request.DescribeShareGroupOffsetsRequest(groups=(
        offsets_request.DescribeShareGroupOffsetsRequestGroup(group_id=GroupId(group_id),
                                                              topics=None),))
    (g,) = coordinator.call(request).groups
    if g.error_code == ErrorCode.group_id_not_found:  # deleted since it was described
        return []
    if g.error_code != ErrorCode.none:
        raise CliError(f"cannot read the share offsets of {group_id!r}: "
                       f"{error_name(g.error_code)}")
    rows = [{"topic": t.topic_name, "partition": int(p.partition_index),
             "start_offset": int(p.start_offset) if p.start_offset >= 0 else None,
             "lag": int(p.lag) if p.lag >= 0 else None,
             "error": None if p.error_code == ErrorCode.none else error_name(p.error_code)}
            for t in g.topics for p in t.partitions]
    return sorted(rows, key=lambda r: (r["topic"], r["partition"]))


def _print_share(d: dict[str, Any]) -> None:
    total_lag = sum(o["lag"] or 0 for o in d["offsets"])
    print(f"Group: {d['group']}  Type: share  State: {d['state']}  "
          f"Members: {len(d['members'])}  GroupEpoch: {d['group_epoch']}  "
          f"AssignmentEpoch: {d['assignment_epoch']}  Assignor: {d['assignor']}  "
          f"TotalLag: {total_lag}")
    errors = any(o["error"] for o in d["offsets"])  # an ERROR column only when needed
    print_table(["TOPIC", "PARTITION", "START-OFFSET", "LAG", *(["ERROR"] if errors else [])],
                [(o["topic"], o["partition"], o["start_offset"], o["lag"],
                  *([o["error"]] if errors else [])) for o in d["offsets"]])
    rows = [(a["topic"], ",".join(map(str, a["partitions"])), m["member_id"], m["member_epoch"],
             m["host"], m["client_id"])
            for m in d["members"] for a in (m["assignment"] or [{"topic": None,
                                                                 "partitions": []}])]
    if rows:
        print()
        print_table(["TOPIC", "PARTITIONS", "MEMBER-ID", "MEMBER-EPOCH", "HOST", "CLIENT-ID"],
                    rows)


def cmd_describe(args: argparse.Namespace) -> int:
    share = _describe_share(args, args.group)
    if share is not None:
        if args.json:
            print_json(share)
        else:
            _print_share(share)
        return 0
    with admin_client(args) as admin:
        d = _describe(admin, args.group)
    if args.json:
        print_json(d)
        return 0
    total_lag = sum(p["lag"] or 0 for p in d["partitions"])
    print(f"Group: {d['group']}  State: {d['state']}  Members: {d['members']}  "
          f"TotalLag: {total_lag}")
    print_table(["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                 "HOST", "CLIENT-ID"],
                [(p["topic"], p["partition"], p["current_offset"], p["log_end_offset"], p["lag"],
                  p["consumer_id"], p["host"], p["client_id"]) for p in d["partitions"]])
    return 0


def _targets(admin: Any, args: argparse.Namespace, tps: list[Any],
             committed: dict[Any, Any]) -> dict[Any, int]:
    from kafka.admin import OffsetSpec

    starts = admin.list_partition_offsets({tp: OffsetSpec.EARLIEST for tp in tps})
    ends = admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in tps})
    by_time = (admin.list_partition_offsets({tp: args.to_timestamp for tp in tps})
               if args.to_timestamp is not None else {})
    out = {}
    for tp in tps:
        low, high = starts[tp].offset, ends[tp].offset
        if args.to_earliest:
            target = low
        elif args.to_latest:
            target = high
        elif args.to_offset is not None:
            target = args.to_offset
        elif args.to_timestamp is not None:
            hit = by_time.get(tp)
            target = hit.offset if hit is not None and hit.offset >= 0 else high
        else:
            base = committed[tp].offset if tp in committed else low
            target = base + args.shift_by
        out[tp] = min(max(target, low), high)
    return out


def cmd_reset(args: argparse.Namespace) -> int:
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata

    with admin_client(args) as admin:
        topic = admin.describe_topics([args.topic])[0]
        if topic["error_code"]:
            raise CliError(f"unknown topic {args.topic!r}")
        known = {p["partition_index"] for p in topic["partitions"]}
        wanted = sorted(known) if args.partition is None else args.partition
        if any(p not in known for p in wanted):
            raise CliError(f"topic {args.topic!r} has partitions 0-{len(known) - 1} only")
        state = admin.describe_groups([args.group])[args.group]["group_state"]
        if state not in INACTIVE_STATES:
            raise CliError(f"group {args.group!r} is {state} with active members; "
                           "stop them before resetting its offsets")
        tps = [TopicPartition(args.topic, p) for p in wanted]
        committed = admin.list_group_offsets({args.group: None}).get(args.group, {})
        plan = _targets(admin, args, tps, committed)
        if args.execute:
            errors = admin.alter_group_offsets(
                args.group, {tp: OffsetAndMetadata(o, "", -1) for tp, o in plan.items()})
            bad = [(tp, e) for tp, e in errors.items() if e.__name__ != "NoError"]
            if bad:
                raise CliError(f"cannot reset {bad[0][0].topic}-{bad[0][0].partition}: "
                               f"{getattr(bad[0][1], 'message', bad[0][1])}")
    rows = [{"topic": tp.topic, "partition": tp.partition,
             "previous_offset": committed[tp].offset if tp in committed else None,
             "new_offset": o} for tp, o in sorted(plan.items())]
    if args.json:
        print_json({"group": args.group, "executed": args.execute, "partitions": rows})
        return 0
    print_table(["TOPIC", "PARTITION", "PREVIOUS-OFFSET", "NEW-OFFSET"],
                [(r["topic"], r["partition"], r["previous_offset"], r["new_offset"])
                 for r in rows])
    if not args.execute:
        print("(dry run: nothing changed; add --execute to apply)")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        results = admin.delete_groups(list(args.groups))
    failed = {g: str(r) for g, r in results.items() if str(r) != "OK"}
    for group, reason in failed.items():
        if reason == "GroupIdNotFoundError":
            raise CliError(f"unknown group {group!r}")
        if reason == "NonEmptyGroupError":
            raise CliError(f"group {group!r} has active members; stop them first")
        raise CliError(f"cannot delete group {group!r}: {reason}")
    if args.json:
        print_json({"deleted": list(args.groups)})
    else:
        for group in args.groups:
            print(f"deleted group {group}")
    return 0
