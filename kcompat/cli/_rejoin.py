"""A kafka-python 3.0.12 consumer fault that ``kcompat consume --group`` works around.

kafka-python runs a group join (JoinGroup, then SyncGroup) as a task of its
network thread. ``poll(timeout_ms=N)`` waits for that task at most N ms and
leaves it running when the time is up; the next poll waits for the same task
if the coordinator still says the member must rejoin (``need_rejoin``). Only
that wait marks the member STABLE and turns its heartbeat back on.

``need_rejoin`` is not always still true by then. A leader whose assignment was
made from older metadata rejoins when the new metadata arrives (its assignment
snapshot differs from the metadata snapshot). That rejoin's JoinGroup answer
makes the leader assign again, which sets the assignment snapshot equal to the
metadata snapshot: from then on ``need_rejoin`` says False. If the poll that
started the rejoin gave up before that answer, no later poll waits for the
task. The member stays REBALANCING for good: every commit is refused on the
client side ("the consumer is undergoing a rebalance"), and its heartbeat stays
off. The Java consumer asks ``rejoinNeededOrPending()``: a join in flight counts
as a reason to go on with it. A CLI consumer meets this when the topic's
metadata reaches it just after its first assignment (it looked the topic up
before subscribing, so its first snapshot lacks it) and the second join
outlasts what is left of a 200 ms poll: beside three CPU burners, one run in
about five.

``finish_pending_joins`` gives the consumer's coordinator the Java rule: a join
task that no poll has waited for keeps ``need_rejoin`` true, so the next poll
goes on with it. If the task has already finished, that poll starts one more
join (kafka-python replaces a finished task instead of reading it): one extra
rebalance of the group, after which the member is STABLE.
"""

from __future__ import annotations

from typing import Any


def finish_pending_joins(consumer: Any) -> Any:
    """``consumer`` (a KafkaConsumer) whose polls go on with a join no poll has
    waited for. A client without the join task (another kafka-python) is left
    as it is."""
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is None or not hasattr(coordinator, "_join_task"):
        return consumer
    need_rejoin = coordinator.need_rejoin

    def need_rejoin_or_pending() -> bool:
        return coordinator._join_task is not None or need_rejoin()

    coordinator.need_rejoin = need_rejoin_or_pending
    return consumer
