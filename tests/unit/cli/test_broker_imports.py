"""``kcompat broker`` stays lean: a broker process does not carry the Kafka
client the other commands are built on, and a node's supervisor does not
carry the broker (tens of MiB each, per process); nothing loads the YAML
parser unless a YAML config file is read or a shard's is written."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from kcompat.__main__ import main
sys.argv = ["kcompat", *sys.argv[1:]]
code = main()
loaded = [m for m in ("kcompat.cli.topics", "kcompat.cli.cluster", "trio",
                      "kcompat.broker.node.server", "yaml") if m in sys.modules]
print("LOADED", *loaded)
sys.exit(code)
"""


def _loaded(*argv: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    line = next(x for x in out.splitlines() if x.startswith("LOADED"))
    return line.split()[1:]


def test_the_broker_command_loads_neither_client_commands_nor_trio_before_it_runs() -> None:
    assert _loaded("broker", "--print-config") == []


def test_a_client_command_still_finds_every_command() -> None:
    out = subprocess.run([sys.executable, "-m", "kcompat", "--help"], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    for command in ("broker", "topics", "produce", "consume", "groups", "cluster"):
        assert command in out, out


def test_the_broker_loads_the_http_stack_only_to_serve_the_admin_port() -> None:
    """hypercorn and starlette (about 85 ms of a start, 5 MiB) come with
    ``kcompat.broker.http.serve``, which the node imports only once an admin
    socket is bound: a broker with ``admin.port`` off or taken never loads them."""
    probe = ("import sys, kcompat.broker.node.server; "
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'hypercorn', 'starlette'}))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.split() == ["[]"]
    served = probe.replace("kcompat.broker.node.server", "kcompat.broker.http.serve")
    out = subprocess.run([sys.executable, "-c", served], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip() == "['hypercorn', 'starlette']"
