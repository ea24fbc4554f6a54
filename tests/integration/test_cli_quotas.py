"""``kcompat quotas describe|alter`` against a real broker process: values set
for a user, a client id and their defaults are described back (exactly, and by
type), removed, validated only, and Kafka's refusals come back as one line."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from compat_tests._broker import REPO_ROOT, Broker


def kcompat(broker: Broker, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kcompat", *args, "--bootstrap-server",
                           broker.bootstrap], capture_output=True, text=True, cwd=REPO_ROOT,
                          timeout=60)


def described(broker: Broker, *args: str) -> list[dict[str, Any]]:
    run = kcompat(broker, "quotas", "describe", "--json", *args)
    assert run.returncode == 0, run.stderr
    return list(json.loads(run.stdout))


def test_alter_describe_and_remove(broker: Broker) -> None:
    run = kcompat(broker, "quotas", "alter", "--user", "alice", "--client-id", "app",
                  "--add", "producer_byte_rate=1048576", "--add", "consumer_byte_rate=2e6")
    assert run.returncode == 0, run.stderr
    assert "altered the quotas of user=alice,client-id=app" in run.stdout
    assert kcompat(broker, "quotas", "alter", "--user-default",
                   "--add", "request_percentage=50").returncode == 0
    assert described(broker, "--user", "alice", "--client-id", "app", "--strict") == [
        {"entity": "user=alice,client-id=app", "key": "consumer_byte_rate", "value": 2e6},
        {"entity": "user=alice,client-id=app", "key": "producer_byte_rate", "value": 1048576}]
    assert described(broker, "--user-default") == [
        {"entity": "user=<default>", "key": "request_percentage", "value": 50}]
    assert len(described(broker)) == 3  # every entity
    run = kcompat(broker, "quotas", "alter", "--user", "alice", "--client-id", "app",
                  "--delete", "consumer_byte_rate", "--validate-only")
    assert run.returncode == 0 and "validated" in run.stdout
    assert len(described(broker, "--user", "alice", "--client-id", "app", "--strict")) == 2
    assert kcompat(broker, "quotas", "alter", "--user", "alice", "--client-id", "app",
                   "--delete", "consumer_byte_rate").returncode == 0
    assert [q["key"] for q in described(broker, "--user", "alice", "--client-id", "app",
                                        "--strict")] == ["producer_byte_rate"]


def test_refusals_are_one_line(broker: Broker) -> None:
    run = kcompat(broker, "quotas", "alter", "--ip", "10.0.0.1", "--add",
                  "producer_byte_rate=5")
    assert run.returncode == 1
    assert run.stderr.count("\n") == 1 and "producer_byte_rate" in run.stderr
    run = kcompat(broker, "quotas", "alter", "--user", "bob")
    assert run.returncode == 2 and "nothing to alter" in run.stderr
    run = kcompat(broker, "quotas", "alter", "--add", "producer_byte_rate=5")
    assert run.returncode == 2 and "name the entity" in run.stderr
    run = kcompat(broker, "quotas", "alter", "--user", "bob", "--add", "producer_byte_rate=x")
    assert run.returncode == 2 and "must be a number" in run.stderr
