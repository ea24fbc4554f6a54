"""Differential: the share-group admin APIs (KIP-932) through the Java Admin client
(kafka-clients 4.4) on Apache Kafka 4.4 and on kcompat (``sbroker`` kinds ``single``
and ``rf3``), and Kafka's own ``kafka-share-groups.sh`` against both.

``ShareAdmin`` (compat_tests/java/clients) runs one scripted session: two share groups
ACCEPT the 10 records of partition 0, 5 more records go to each partition, and then
``listShareGroupOffsets`` (DescribeShareGroupOffsets v1: start offset and lag),
``describeShareGroups`` (ShareGroupDescribe), ``listGroups`` by type (ListGroups v5),
``alterShareGroupOffsets`` (a new consumer then reads p0 again from 0 at delivery
count 1), the same calls while that consumer is a member, ``deleteShareGroupOffsets``
and ``deleteShareGroups`` (DeleteGroups). Each step's result (a value, or the error
name and exception class) must be the same on both brokers, except what differs by
nature (``IGNORED``). The second group is left with its offsets for
``ShareGroupCommand --describe --offsets`` and ``--list``, whose tables must agree too.
"""

from __future__ import annotations

import copy
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from compat_tests._deployment import SINGLE_AND_RF3, Deployment
from compat_tests.java.conftest import PKG, JavaRun, run_java
from compat_tests.java.kafka_reference import KafkaReference

pytestmark = pytest.mark.timeout(120)

TOOL = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"

Observations = dict[str, Any]


def run_share_admin(bootstrap: str, topic: str, replication: int,
                    clients_cp: str) -> tuple[JavaRun, Observations]:
    run = run_java(clients_cp, f"{PKG}.ShareAdmin", bootstrap, topic, str(replication),
                   f"{topic}-g", f"{topic}-kept", timeout=100)
    final = [e for e in run.json_lines() if "observations" in e]
    assert run.returncode == 0 and final, run.explain()
    return run, final[-1]["observations"]


#: Steps whose start offsets the consumers' acknowledgements moved: Kafka answers the
#: start offset its share-partition last persisted, which lags its acknowledgements by
#: one write (FINDINGS.md S15), so only the lag is compared; kcompat's must be exact.
MOVED_BY_ACKS = {
    # p1 read but nothing of it acknowledged yet: no start offset, as Kafka (S12)
    "offsets_after_p0": {"p0": 10, "p1": None},
    "offsets_of_kept": {"p0": 10, "p1": None},
    "offsets_p1_only": {"p1": None},
    "offsets_after_member": {"p0": 15, "p1": 5},
}
#: Where kcompat answers otherwise than Kafka 4.4 (FINDINGS.md ids). A known difference
#: that disappears fails the test, so that FINDINGS.md gets updated.
KNOWN: dict[str, str] = {
}


def _epochs(d: dict[str, Any]) -> dict[str, Any]:
    """Group, assignment and member epochs as "all equal and positive" (Kafka bumps
    the group epoch more often than kcompat: FINDINGS.md S16)."""
    epochs = {d["group_epoch"], d["assignment_epoch"], *(m["member_epoch"] for m in d["members"])}
    members = [{k: v for k, v in m.items() if k != "member_epoch"} for m in d["members"]]
    return {**{k: v for k, v in d.items() if not k.endswith("epoch")}, "members": members,
            "epochs_agree": len(epochs) == 1 and min(epochs) > 0}


def normalize(obs: Observations) -> Observations:
    """Epochs as in ``_epochs``; leader epochs of every offsets step pulled out into one
    observation (present or absent); start offsets of ``MOVED_BY_ACKS`` steps dropped."""
    out: Observations = {}
    leader_epochs = set()
    for step, result in copy.deepcopy(obs).items():
        if step.startswith("describe") and isinstance(result, dict) and "state" in result:
            result = _epochs(result)
        if step.startswith("offsets") and isinstance(result, dict) and "error" not in result:
            for v in result.values():
                if isinstance(v, dict):
                    leader_epochs.add(v.pop("leader_epoch") is not None)
                    if step in MOVED_BY_ACKS:
                        v.pop("start")
        out[step] = result
    out["leader_epochs"] = sorted(leader_epochs)
    return out


def check_kcompat_start_offsets(obs: Observations) -> None:
    for step, want in MOVED_BY_ACKS.items():
        got = {p: (v or {}).get("start") for p, v in obs[step].items()}
        assert got == want, f"{step}: start offsets {got}, expected {want}"


def run_tool(reference_cp: str, bootstrap: str, *args: str) -> JavaRun:
    return run_java(reference_cp, TOOL, "--bootstrap-server", bootstrap, *args, timeout=60)


def tool_view(reference_cp: str, bootstrap: str, topic: str) -> Observations:
    """``--describe --offsets`` of the kept group (the header, then partition and lag of
    each row: start offsets differ by S15) and whether ``--list`` names the kept group
    and not the deleted one."""
    kept = f"{topic}-kept"
    with ThreadPoolExecutor(2) as pool:
        described = pool.submit(run_tool, reference_cp, bootstrap, "--describe", "--offsets",
                                "--group", kept)
        listed = pool.submit(run_tool, reference_cp, bootstrap, "--list")
        d, lst = described.result(), listed.result()
    assert d.returncode == 0, d.explain()
    assert lst.returncode == 0, lst.explain()
    rows = [re.split(r"\s+", ln.strip()) for ln in d.stdout.splitlines() if ln.strip()]
    assert rows and rows[0][:5] == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"], d.explain()
    assert all(r[:2] == [kept, topic] for r in rows[1:]), d.explain()
    names = {ln.strip() for ln in lst.stdout.splitlines()}
    return {"tool_header": rows[0], "tool_describe": [[r[2], *r[4:]] for r in rows[1:]],
            "tool_start_offsets": [r[3] for r in rows[1:]],
            "tool_lists_kept": kept in names, "tool_lists_deleted": f"{topic}-g" in names}


def run_all(bootstrap: str, topic: str, replication: int, clients_cp: str,
            reference_cp: str) -> Observations:
    _run, obs = run_share_admin(bootstrap, topic, replication, clients_cp)
    tool = tool_view(reference_cp, bootstrap, topic)
    return {**normalize(obs), **tool, "raw": obs}


@pytest.fixture(scope="module")
def kafka_observations(kafka_reference: KafkaReference, clients_cp: str,
                       reference_cp: str) -> Observations:
    topic = f"share-admin-{uuid.uuid4().hex[:10]}"
    t0 = time.monotonic()
    obs = run_all(kafka_reference.bootstrap, topic, 1, clients_cp, reference_cp)
    print(f"Apache Kafka {kafka_reference.version}: {time.monotonic() - t0:.1f} s")
    return obs


def test_scenario_on_reference_kafka(kafka_observations: Observations) -> None:
    """The scenario does what it says on Kafka itself, so the comparison compares
    something: both groups got p0's 10 records at delivery count 1, the lag is 5 on p0,
    altering p0 to 0 gives it back whole, a member blocks alter / delete, deleting the
    offsets empties the listing."""
    obs = kafka_observations
    first = [[0, i, 1] for i in range(10)]
    assert obs["consume_p0"] == [sorted(first, key=str)] * 2
    assert obs["offsets_after_p0"]["p0"] == {"lag": 5}
    assert obs["offsets_after_alter"]["p0"] == {"start": 0, "lag": 15}
    again = sorted([[0, i, 1] for i in range(15)] + [[1, i, 1] for i in range(5)], key=str)
    assert obs["consume_after_alter"] == again
    non_empty = ["NON_EMPTY_GROUP", "GroupNotEmptyException"]
    assert obs["alter_with_member"]["all"] == non_empty
    assert obs["delete_offsets_with_member"]["all"] == non_empty
    assert obs["delete_group_with_member"]["exception"] == "GroupNotEmptyException"
    assert obs["offsets_after_delete"] == {}
    assert obs["list_share_groups"] == {"group": ["SHARE", "EMPTY", "share"],
                                        "kept": ["SHARE", "EMPTY", "share"]}
    assert obs["delete_group"] == "ok"
    assert obs["tool_lists_kept"] and not obs["tool_lists_deleted"]


@pytest.mark.parametrize("sbroker", SINGLE_AND_RF3, indirect=True)
def test_share_admin_matches_kafka(sbroker: Deployment, topic: str, clients_cp: str,
                                   reference_cp: str, kafka_observations: Observations) -> None:
    want = kafka_observations
    t0 = time.monotonic()
    got = run_all(sbroker.bootstrap, topic, sbroker.replication, clients_cp, reference_cp)
    print(f"kcompat {sbroker.kind}: {time.monotonic() - t0:.1f} s")
    check_kcompat_start_offsets(got["raw"])
    assert got["tool_start_offsets"] == ["10", "-"]  # p1: nothing acknowledged yet (S12)
    steps = (want.keys() | got.keys()) - {"raw", "tool_start_offsets"}
    diffs = {k: (got.get(k), want.get(k)) for k in sorted(steps)
             if (got.get(k) == want.get(k)) == (k in KNOWN)}
    assert not diffs, "unexpected (kcompat, Kafka), or a known difference gone:\n" + "\n".join(
        f"{k} [{KNOWN.get(k, 'new')}]: {v}" for k, v in diffs.items())
