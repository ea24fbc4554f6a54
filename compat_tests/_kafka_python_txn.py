"""A kafka-python 3.0.12 fault that the transaction suites work around.

kafka-python's sender takes the next transactional request (AddOffsetsToTxn,
AddPartitionsToTxn, TxnOffsetCommit, EndTxn) off its queue, notes the
coordinator it goes to, and waits for that connection (``await_ready``). In
3.0.12 ``await_ready`` no longer answers False for a node it cannot reach: it
raises. The sender catches that, asks for a new FindCoordinator and leaves its
loop, but it puts the request back on the queue only when it has no target
node, and it has one: the coordinator it noted. The request is gone, and the
application waits in ``send_offsets_to_transaction`` or ``commit_transaction``
forever (they wait without a bound). It happens whenever the coordinator is
unreachable at the moment the request is taken: a broker killed between the
application's call and the sender's turn (one copy across a kill -9 in about
sixty). A request already sent when the broker dies is retried properly
(its future fails with a connection error); and Apache Kafka would see the same
hang, as nothing the broker answers is involved.

``keep_requests_across_a_dead_coordinator`` puts the request back as the Java
client does (``maybeFindCoordinatorAndRetry``): when the sender asks for a
coordinator lookup for a request whose coordinator it knew, it will not queue
that request again itself.
"""

from __future__ import annotations

from typing import Any

import kafka

#: the version whose sender drops the request (``Sender._maybe_send_pending_request``)
DROPPING_VERSION = "3.0.12"


def keep_requests_across_a_dead_coordinator(producer: Any) -> Any:
    """``producer`` (a transactional KafkaProducer) with the dropped request kept;
    raises on another kafka-python version, whose sender must be read again."""
    if kafka.__version__ != DROPPING_VERSION:
        raise RuntimeError(
            f"kafka-python {kafka.__version__}: check whether its sender still drops a "
            f"transactional request when the coordinator is unreachable "
            f"(compat_tests/_kafka_python_txn.py, written for {DROPPING_VERSION})")
    manager = producer._transaction_manager
    lookup = manager.lookup_coordinator_for_request

    def lookup_and_keep(handler: Any) -> None:
        # the sender's three callers: no coordinator known (it queues the request
        # again itself), await_ready False (never, in this version) and await_ready
        # raising with the coordinator known (it does not)
        known = manager.coordinator(handler.coordinator_type) is not None
        lookup(handler)
        if known:
            manager.retry(handler)

    manager.lookup_coordinator_for_request = lookup_and_keep
    return producer
