"""kcat -G (librdkafka 2.0.2's balanced consumer) against a real kcompat broker: a
group member consumes a whole topic, its auto-committed offsets are visible through
kafka-python's admin client, and a second run resumes from them. Also in a 3-broker
cluster at replication factor 1 (conftest.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from kafka import KafkaAdminClient

from .._broker import unique_topic
from .._deployment import Deployment
from .._groups import produce_sync, unique_group, wait_for

pytestmark = pytest.mark.timeout(120)

CLIENT = "kcat -G"
KCAT = shutil.which("kcat") or "/usr/bin/kcat"



def kcat_group(bootstrap: str, home: Path, group: str, topic: str, count: int,
               *extra: str, timeout: float = 60.0) -> list[tuple[int, int, str]]:
    if not os.path.exists(KCAT):
        pytest.fail("kcat is not installed")
    cmd = [KCAT, "-b", bootstrap, "-X", "client.id=kcat", "-G", group, *extra,
           "-c", str(count), "-e", "-q", "-f", "%p %o %s\\n", topic]
    env = {**os.environ, "HOME": str(home)}
    env.pop("KCAT_CONFIG", None)
    env.pop("KAFKACAT_CONFIG", None)
    try:
        cp = subprocess.run(cmd, capture_output=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"{CLIENT}: `{' '.join(cmd)}` did not finish in {timeout}s; stdout "
            f"{(exc.stdout or b'')[-500:]!r} stderr {(exc.stderr or b'')[-2000:]!r}") from None
    assert cp.returncode == 0, (
        f"{CLIENT}: `{' '.join(cmd)}` exited {cp.returncode}; stderr "
        f"{cp.stderr.decode(errors='replace')[-2000:]}")
    rows = []
    for line in cp.stdout.decode().splitlines():
        p, o, v = line.split(" ", 2)
        rows.append((int(p), int(o), v))
    return rows


def group_offsets(bootstrap: str, group: str) -> dict[int, int]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    try:
        res = admin.list_group_offsets({group: None})
    finally:
        admin.close()
    return {tp.partition: om.offset for tp, om in res.get(group, {}).items()}


def test_kcat_group_consumes_all_and_commits(gbroker: Deployment, tmp_path: Path) -> None:
    from .._groups import create_topic

    bs = gbroker.bootstrap
    topic, group = unique_topic("kcat-group"), unique_group("kcat")
    create_topic(bs, topic, 3, gbroker.replication)
    acked = produce_sync(bs, topic, {p: [f"v{p}-{i:03d}".encode() for i in range(30)]
                                     for p in range(3)})
    rows = kcat_group(bs, tmp_path, group, topic, 90, "-o", "beginning")
    want = sorted((p, o, v.decode()) for v, (p, o) in acked.items())
    assert sorted(rows) == want, (
        f"{CLIENT}: consumed {len(rows)} records (distinct {len(set(rows))}), expected 90; "
        f"missing {sorted(set(want) - set(rows))[:5]}, unexpected {sorted(set(rows) - set(want))[:5]}")
    wait_for(lambda: group_offsets(bs, group) == {0: 30, 1: 30, 2: 30}, 15,
             lambda: f"{CLIENT}: kafka-python list_group_offsets shows "
                     f"{group_offsets(bs, group)}, expected {{0: 30, 1: 30, 2: 30}} "
                     f"(kcat auto-commits on close)")
    # A second member of the same group starts at the committed offsets (no -o: with -G,
    # kcat applies -o to every assigned partition, overriding the committed offset).
    more = produce_sync(bs, topic, {p: [f"w{p}-{i:03d}".encode() for i in range(5)]
                                    for p in range(3)})
    rows2 = kcat_group(bs, tmp_path, group, topic, 15)
    want2 = sorted((p, o, v.decode()) for v, (p, o) in more.items())
    assert sorted(rows2) == want2, (
        f"{CLIENT}: second run consumed {sorted(rows2)[:6]}... ({len(rows2)} records), "
        f"expected only the 15 records after the committed offsets {sorted(want2)[:6]}...")
    wait_for(lambda: group_offsets(bs, group) == {0: 35, 1: 35, 2: 35}, 15,
             lambda: f"{CLIENT}: committed after second run {group_offsets(bs, group)}")
