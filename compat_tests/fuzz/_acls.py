"""The fuzzer's ACL changes, on brokers with an authorizer, and what they do.

The fuzzer's own connection is a super user (``User:ANONYMOUS`` on the
PLAINTEXT listener); a second identity, ``User:alice`` over SASL/PLAIN, has
no ACL until the sequence creates some. ACLs are made and deleted on the
sequence's own topics and groups (literal names, or the sequence's prefix),
for alice, allowing or denying READ, WRITE, DESCRIBE or ALL; what is
compared is CreateAcls' and DeleteAcls' errors, the bindings a delete
matched and alice's bindings as DescribeAcls lists them. Then alice's
requests (``_machine``: the ordinary operations done as alice) show what the
authorizer decided. ``settle_acls`` waits until DescribeAcls lists what both
brokers accepted: a broker's authorizer applies an ACL once it has the
metadata record, a moment after answering.
"""

from __future__ import annotations

import time
from typing import Any

from kafka.protocol.admin.acl import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)

from compat_tests.fuzz import _ops as ops
from compat_tests.fuzz._wire import CLOSED, Peer

Observation = Any
ALICE = "User:alice"
TOPIC, GROUP = 2, 3  # resource types
LITERAL, PREFIXED = 3, 4  # pattern types
ANY = 1  # any resource type, pattern type, operation or permission (a filter)
ALL, READ, WRITE, DESCRIBE = 2, 3, 4, 8  # operations
DENY, ALLOW = 2, 3
Binding = tuple[int, str, int, str, str, int, int]  # as DescribeAcls lists one


def create_acl(peer: Peer, resource_type: int, name: str, pattern: int, operation: int,
               permission: int) -> Observation:
    answer = peer.call(CreateAclsRequest, CreateAclsResponse, 3, {"creations": [
        {"resource_type": resource_type, "resource_name": name,
         "resource_pattern_type": pattern, "principal": ALICE, "host": "*",
         "operation": operation, "permission_type": permission}]})
    return answer if answer == CLOSED else answer["results"][0]["error_code"]


def delete_acls(peer: Peer, resource_type: int, name: str | None, pattern: int,
                operation: int, permission: int) -> Observation:
    """DeleteAcls of alice's bindings matching the filter: its error and the
    bindings it deleted (with each one's error), sorted."""
    answer = peer.call(DeleteAclsRequest, DeleteAclsResponse, 3, {"filters": [
        {"resource_type_filter": resource_type, "resource_name_filter": name,
         "pattern_type_filter": pattern, "principal_filter": ALICE, "host_filter": None,
         "operation": operation, "permission_type": permission}]})
    if answer == CLOSED:
        return CLOSED
    result = answer["filter_results"][0]
    return (result["error_code"], tuple(sorted(
        (m["error_code"], m["resource_type"], m["resource_name"], m["pattern_type"],
         m["operation"], m["permission_type"]) for m in result["matching_acls"])))


def alice_acls(peer: Peer, prefix: str) -> Observation:
    """DescribeAcls of alice's bindings on the sequence's names: its error and
    the bindings, sorted."""
    answer = peer.call(DescribeAclsRequest, DescribeAclsResponse, 3, {
        "resource_type_filter": ANY, "resource_name_filter": None, "pattern_type_filter": ANY,
        "principal_filter": ALICE, "host_filter": None, "operation": ANY,
        "permission_type": ANY})
    if answer == CLOSED:
        return CLOSED
    if answer["error_code"]:
        return ("error", answer["error_code"])
    return ("ok", tuple(sorted(
        (r["resource_type"], r["resource_name"], r["pattern_type"], a["principal"], a["host"],
         a["operation"], a["permission_type"])
        for r in answer["resources"] if r["resource_name"].startswith(prefix)
        for a in r["acls"])))


def settle_acls(peer: Peer, prefix: str, expected: set[Binding]) -> None:
    """Until DescribeAcls lists ``expected`` (what both brokers accepted)."""
    deadline = time.monotonic() + ops.SETTLE_S
    while (seen := alice_acls(peer, prefix)) != ("ok", tuple(sorted(expected))):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{peer.name}: ACLs {seen}, not {sorted(expected)}")
        time.sleep(0.05)
