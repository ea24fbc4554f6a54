"""``kcompat consume --group``: the commit made on exit for the printed
records survives a rebalance of any length up to ``COMMIT_WAIT_S`` (the
client rejoins through polls, then the commit is made again), and a rebalance
that outlasts it fails the command with the client's error."""

from __future__ import annotations

from typing import Any

import kafka.errors as ke
import pytest

from kcompat.cli import consume


class Rejoining:
    """A consumer whose group rejoin takes ``polls`` polls: each commit
    before that is refused as kafka-python refuses it while rebalancing."""

    def __init__(self, polls: int, error: type[Exception]) -> None:
        self.polls_needed = polls
        self.error = error
        self.polls = 0
        self.committed: list[dict[Any, Any]] = []

    def commit(self, offsets: dict[Any, Any]) -> None:
        if self.polls < self.polls_needed:
            raise self.error()
        self.committed.append(offsets)

    def poll(self, timeout_ms: int, max_records: int) -> dict[Any, Any]:
        assert max_records == 1  # a rejoining poll prints nothing, commits nothing else
        self.polls += 1
        return {}


@pytest.mark.parametrize("error", [ke.RebalanceInProgressError, ke.CommitFailedError])
def test_the_commit_is_made_once_a_long_rejoin_is_over(error: type[Exception]) -> None:
    consumer = Rejoining(polls=40, error=error)
    consume._commit(consumer, {"tp": 7})
    assert consumer.committed == [{"tp": 7}]
    assert consumer.polls == 40


def test_a_rejoin_longer_than_the_wait_fails_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(consume, "COMMIT_WAIT_S", 0.0)
    consumer = Rejoining(polls=1, error=ke.RebalanceInProgressError)
    with pytest.raises(ke.RebalanceInProgressError):
        consume._commit(consumer, {"tp": 7})
    assert consumer.committed == []
