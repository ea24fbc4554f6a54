"""Share groups' dead letters, copied to their DLQ topic (KIP-1191).

Theory of operation
-------------------
A share-partition's machine archives a record it gives up on (REJECTed, or
released at ``share.delivery.count.limit``) and hands it over as a
``DeadLetter``. When the group names a dead-letter topic
(``errors.deadletterqueue.topic.name``), ``send`` copies those records there
— with KIP-1191's context headers, and the record's key, value and headers
when ``errors.deadletterqueue.copy.record.enable`` — *before* the archive is
made durable (``shares``): a crash in between dead-letters them again (at
least once, never lost). A write that fails keeps them for the next change.
A DLQ topic that is missing (auto-created when
``errors.deadletterqueue.auto.create.topics.enable``) or not enabled for
groups (``errors.deadletterqueue.group.enable``) leaves them archived, with a
warning, as Kafka does.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode
from prometheus_client import Counter

from kcompat.broker.config.topic_config import effective
from kcompat.broker.controller.admin import auto_create
from kcompat.broker.groups.share_writes import Held
from kcompat.broker.replication.storage import now_ms
from kcompat.group.share_partition import DELIVERY_LIMIT, REJECTED
from kcompat.log.partition_log import OffsetOutOfRange
from kcompat.wire import batch as wbatch
from kcompat.wire.records import Record, decode_batch, encode_batch

if TYPE_CHECKING:
    from kcompat.broker.controller.quorum import Controller
    from kcompat.broker.replication.peer_calls import PeerCalls
    from kcompat.broker.storage.partition import Partition
    from kcompat.broker.storage.state import BrokerState

log = logging.getLogger("kcompat.shares")

WRITE_TIMEOUT_S = 5.0
# KIP-1191's context headers on a dead letter
DLQ_TOPIC = "__dlq.errors.topic"
DLQ_PARTITION = "__dlq.errors.partition"
DLQ_OFFSET = "__dlq.errors.offset"
DLQ_GROUP = "__dlq.errors.group"
DLQ_DELIVERY_COUNT = "__dlq.errors.delivery.count"
DLQ_MESSAGE = "__dlq.errors.message"
_REASONS = {REJECTED: "Offset rejected by client.",  # Kafka 4.4's words
            DELIVERY_LIMIT: "Offset delivery count exceeded the threshold."}


class ShareDeadLetters:
    def __init__(self, state: BrokerState, calls: PeerCalls, controller: Controller) -> None:
        self.state = state
        self.calls = calls
        self.controller = controller
        self.counter: Counter | None = None  # per DLQ topic, once metrics are exported

    async def send(self, held: Held, dlq_topic: str, copy_record: bool) -> None:
        """Copy ``held.dead`` to ``dlq_topic`` (see the module)."""
        if not dlq_topic:
            held.dead.clear()
            return
        problem = self._problem(dlq_topic)
        if problem is not None:
            log.warning("share group %s: %d dead letters of %s-%d stay archived: %s",
                        held.key[0], len(held.dead), held.key[1], held.key[2], problem)
            held.dead.clear()
            return
        await self._send(held, dlq_topic, copy_record)

    def _problem(self, topic: str) -> str | None:
        meta = self.state.topics.get(topic)
        if meta is None:
            if self.state.config["errors.deadletterqueue.auto.create.topics.enable"]:
                auto_create(self.controller, topic)
                return f"the DLQ topic {topic} is being created"
            return f"the DLQ topic {topic} does not exist"
        if not effective("errors.deadletterqueue.group.enable", meta.configs,
                         self.state.broker_defaults)[0]:
            return f"the DLQ topic {topic} has errors.deadletterqueue.group.enable=false"
        return None

    async def _send(self, held: Held, dlq_topic: str, copy_record: bool) -> None:
        group, topic, index = held.key
        part = self.state.source_partition(topic, index)
        meta = self.state.topics[dlq_topic]
        dead, held.dead = held.dead, []
        records = []
        for letter in dead:
            original = _record_at(part, letter.offset) if part is not None else None
            headers: list[tuple[str, bytes | None]] = []
            key = value = None
            timestamp = now_ms()
            if original is not None:
                timestamp = original.timestamp
                if copy_record:
                    key, value = original.key, original.value
                    headers.extend(original.headers)
            headers += [(DLQ_TOPIC, topic.encode()), (DLQ_PARTITION, str(index).encode()),
                        (DLQ_OFFSET, str(letter.offset).encode()), (DLQ_GROUP, group.encode()),
                        (DLQ_DELIVERY_COUNT, str(letter.delivery_count).encode()),
                        (DLQ_MESSAGE, (_REASONS.get(letter.reason, letter.reason)).encode())]
            records.append((key, value, tuple(headers), timestamp))
        code, _ = await self.calls.append(dlq_topic, index % meta.partitions,
                                          encode_batch(records), WRITE_TIMEOUT_S)
        if code != ErrorCode.none:
            held.dead[:0] = dead  # sent again with the next change
            log.warning("share group %s: dead letters of %s-%d not written to %s (%s); "
                        "retrying", group, topic, index, dlq_topic, code.name)
        elif self.counter is not None:
            self.counter.labels(dlq_topic).inc(len(dead))


def _record_at(part: Partition, offset: int) -> Record | None:
    try:
        chunk = part.log.read(offset, 1, part.log.log_end_offset)
    except OffsetOutOfRange:
        return None
    if not chunk:
        return None
    header = wbatch.parse_header(chunk)
    return next((r for r in decode_batch(memoryview(chunk)[:header.size])
                 if r.offset == offset), None)
