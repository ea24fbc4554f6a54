"""A share-state write that lands behind a claim it did not see is answered
FENCED_STATE_EPOCH, not success (``ShareService.check_committed``).

The state partition's leader checks a write's generation before proposing it
(``check_write``) against the claims it applied or is making. A claim that a
former leader of the state partition proposed and that is still uncommitted
in the log escapes that check: the write passes, is proposed after the claim
and, once committed, ignored (its generation is the old one). Answered as a
success, its holder tells its consumers their acknowledgements counted, while
the claim's holder, reading the state without them, delivers the records
again (seen once in ``tests/chaos/test_share_group_chaos.py``: records a
member had acknowledged, the acknowledgement answered, were acquired by
another member at delivery 2).

Staged on one broker of the broker simulator, deterministically: the claim is
proposed straight into the state partition's log and, without a checkpoint
between, the holder's write is appended through the leader's own path, so
the check sees what a new leader sees — a claim in its log, not applied.
"""

from __future__ import annotations

from typing import Any

import trio
from kio.schema.errors import ErrorCode as E

from kcompat.broker.groups.shares import ShareError
from kcompat.broker.replication.storage import now_ms
from kcompat.broker.storage.append import append_internal
from kcompat.group.share_state import (
    SHARE_STATE_TOPIC,
    claim_value,
    encode_key,
    state_value,
)
from kcompat.testing.broker_sim import TOPIC, BrokerSimulation
from kcompat.wire.records import encode_batch

KEY = ("g", TOPIC, 0)


async def _held(broker: Any) -> Any:
    for _ in range(100):
        try:
            return await broker.shares.held_machine(KEY)
        except ShareError:
            await trio.sleep(0.2)  # the state topic being created
    raise AssertionError("the share key was never claimed")


def _state_record(held: Any, seq: int) -> bytes:
    state = held.machine.snapshot()
    return encode_batch([(encode_key(KEY), state_value(held.generation, seq, state, True), (),
                          now_ms())])


def _propose(broker: Any, index: int, batch: bytes) -> None:
    """Into the state partition's log, as a former leader's claim got there:
    no check, no wait."""
    rt = broker.cluster
    group = rt.group_of(SHARE_STATE_TOPIC, index)
    meta = rt.state.topics[SHARE_STATE_TOPIC]
    result = append_internal(group.part, memoryview(batch), meta.configs,
                             rt.state.broker_defaults, now_ms(),
                             lambda view, header, now: rt.propose_batch(group, view, header,
                                                                         now))
    assert result.error == E.none, result.message


def test_a_write_behind_an_uncommitted_claim_is_fenced_not_answered_ok() -> None:
    sim = BrokerSimulation.lone(5)
    seen: dict[str, Any] = {}

    async def scenario(sim: BrokerSimulation) -> None:
        broker = sim.nodes[1].broker
        assert broker is not None
        held = await _held(broker)
        index, calls = held.state_index, broker.calls
        slog = broker.shares.logs[index]
        # the holder's writes count while nobody claims the key
        seen["before"] = (await calls.append_locally(
            SHARE_STATE_TOPIC, index, _state_record(held, held.seq + 1), 5.0))[0]
        held.seq += 1
        _propose(broker, index, encode_batch([(encode_key(KEY), claim_value("other"), (),
                                               now_ms())]))
        seen["generation_at_check"] = (slog.generation(KEY), held.generation)
        seen["behind"] = (await calls.append_locally(
            SHARE_STATE_TOPIC, index, _state_record(held, held.seq + 1), 5.0))[0]
        seen["generation_after"] = slog.generation(KEY)
        seen["held_after"] = broker.shares.held.get(KEY) is held

    sim.run(scenario)
    assert seen["before"] == E.none
    old, _ = seen["generation_at_check"]
    assert seen["generation_at_check"] == (old, old), "the claim was applied before the write"
    assert seen["generation_after"] > old  # the claim counted, the write did not
    assert seen["behind"] == E.fenced_state_epoch
    assert not seen["held_after"]  # the holder learnt it (as a replica, at apply)
