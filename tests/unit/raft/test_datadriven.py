"""Scripted Raft interactions: tests/unit/raft/testdata/*.txt (REWRITE=1 to regenerate).

Commands (node ids are 1..n):
  add-nodes <n> [pre_vote=bool] [check_quorum=bool] [election_timeout_ticks=int]
  campaign <id> | tick <id> [count] | propose <id> <data> [count=n]
  run <ticks> [trace=false]  (every live node ticks, then stabilize, per tick)
  process-ready <id>... | deliver <id>... | stabilize
  status | log <id> | partition <ids,..> <ids,..> | heal
  transfer-leadership <from> <to> | compact <id> <end> | crash <id> | restart <id>
  add-observer <id> | add-voter <leader> <id> | remove-voter <leader> <id>
"""

from __future__ import annotations

from pathlib import Path

import pytest
from raft_datadriven import run_file

from kcompat.testing.raft_env import RaftEnv

TESTDATA = Path(__file__).parent / "testdata"


def _value(text: str) -> int | bool:
    if text in ("true", "false"):
        return text == "true"
    return int(text)


def _handler(env: RaftEnv):  # type: ignore[no-untyped-def]
    def handle(cmd: str, args: list[str], kwargs: dict[str, str]) -> str:
        ids = [int(a) for a in args if a.isdigit()]
        if cmd == "add-nodes":
            env.add_nodes(ids[0], **{k: _value(v) for k, v in kwargs.items()})
            env.out.extend(env.status_lines())
        elif cmd == "campaign":
            env.nodes[ids[0]].campaign()
        elif cmd == "tick":
            env.tick(ids[0], ids[1] if len(ids) > 1 else 1)
        elif cmd == "propose":
            env.propose(ids[0], args[1], int(kwargs.get("count", "1")))
        elif cmd == "run":
            mark = len(env.out)
            env.run(ids[0])
            if kwargs.get("trace") == "false":
                del env.out[mark:]
        elif cmd == "process-ready":
            for i in ids:
                env.process_ready(i)
        elif cmd == "deliver":
            for i in ids:
                env.deliver(i)
        elif cmd == "stabilize":
            env.stabilize()
        elif cmd == "status":
            env.out.extend(env.status_lines())
        elif cmd == "log":
            for i in ids:
                env.out.extend(f"{i}: {line}" for line in env.log_lines(i))
        elif cmd == "partition":
            env.partition([[int(x) for x in a.split(",")] for a in args])
        elif cmd == "heal":
            env.partition([])
        elif cmd == "transfer-leadership":
            env.out.append(f"transfer {env.nodes[ids[0]].transfer_leadership(ids[1])}")
        elif cmd == "compact":
            env.compact(ids[0], ids[1])
        elif cmd == "crash":
            env.crash(ids[0])
        elif cmd == "restart":
            env.restart(ids[0])
        elif cmd == "add-observer":
            env.add_observer(ids[0], **{k: _value(v) for k, v in kwargs.items()})
            env.out.extend(env.status_lines())
        elif cmd == "add-voter":
            env.change(ids[0], add=ids[1])
        elif cmd == "remove-voter":
            env.change(ids[0], remove=ids[1])
        else:
            raise AssertionError(f"unknown command {cmd}")
        return env.take_output()

    return handle


@pytest.mark.parametrize("path", sorted(TESTDATA.glob("*.txt")), ids=lambda p: p.stem)
def test_datadriven(path: Path) -> None:
    run_file(path, _handler(RaftEnv()))
