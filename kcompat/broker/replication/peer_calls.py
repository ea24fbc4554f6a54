"""Request/reply calls between brokers over the one-way Raft frames.

Theory of operation
-------------------
The inter-broker frame (``codec``) is one-way; a few things need an answer:

* **Transaction markers.** The transaction coordinator need not lead the data
  partitions of a transaction. For each one it writes the marker itself when
  it is the partition's Raft leader (a local proposal, answered on commit) and
  otherwise sends the leader a ``MarkerRequest``; the leader proposes the
  marker the same way and sends a ``MarkerReply`` once it is committed.
* **Transaction verification** (KIP-890, ``txn_verify``): a partition leader
  asks the transaction coordinator whether a batch's transaction includes the
  partition (``VerifyTxnRequest`` / ``VerifyTxnReply``).
* **Batches the broker writes itself** (``append``): a delayed record's
  schedule-log write and, when due, its delivery into its partition go to
  that partition's leader in an ``AppendRequest``; the leader appends it
  through the idempotence check (a re-sent batch is a duplicate) and sends an
  ``AppendReply`` with its offset once committed. The caller does not wait
  out its timeout on a leader that was replaced or went silent (a kill -9
  of a schedule partition's leader held every delayed or retry produce on
  the other brokers for the request's 30 s): it looks every tick and sends
  the batch to the next leader.
* **Kafka requests in an envelope** (``envelope``): the HTTP API runs Kafka
  requests in-process on behalf of its callers; one that another broker must
  handle (a produce to a partition it leads, a group it coordinates) goes
  there as an ``EnvelopeRequest`` carrying the caller's principal, and the
  answer's body comes back in an ``EnvelopeReply``. What handles it is the
  node's (``envelope_server``), above this layer.
* **Metadata changes forwarded to the controller.** CreateTopics,
  DeleteTopics, AlterConfigs, IncrementalAlterConfigs, CreatePartitions and
  auto-created topics may reach any broker (Kafka brokers forward them to the
  controller); a non-controller sends the change's intent in a
  ``ForwardRequest`` and the controller validates it against its image,
  commits it and replies once applied (the controller's side:
  ``controller.admin``). The wait ends early when the controller changes or
  goes silent, and ``admin.submit`` asks the next one.

A call numbers its request, parks an event under that number and waits for the
reply with that number (``call``). A lost request or reply is a timeout, and
the caller retries (a duplicate marker for a finished transaction is harmless,
as in Kafka; a forwarded change is validated again).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio
from kio.schema.errors import ErrorCode

from kcompat.broker.replication import codec
from kcompat.broker.replication.group import NotLeaderError
from kcompat.broker.replication.storage import now_ms
from kcompat.broker.storage import dedup_windows
from kcompat.broker.storage.append import append_internal
from kcompat.raft import NO_NODE
from kcompat.wire import batch as wbatch
from kcompat.wire.records import encode_marker_batch

if TYPE_CHECKING:
    from kcompat.broker.replication.runtime import ClusterRuntime

log = logging.getLogger("kcompat.cluster")


# (principal, client host, api key, version, request body) -> response body
EnvelopeServer = Callable[[str, str, int, int, bytes], Awaitable[bytes]]


class PeerCalls:
    def __init__(self, runtime: ClusterRuntime) -> None:
        self.rt = runtime
        self._seq = 0
        self._waits: dict[int, list[Any]] = {}  # request id -> [Event, ErrorCode, message?]
        self.envelope_server: EnvelopeServer | None = None  # set by the node
        for reply in (codec.MarkerReply, codec.ForwardReply, codec.VerifyTxnReply,
                      codec.AppendReply, codec.ShareClaimReply, codec.AdminCallReply,
                      codec.EnvelopeReply):
            runtime.inbound[reply] = lambda _src, m: self.on_reply(m)
        runtime.inbound[codec.EnvelopeRequest] = (
            lambda src, m: runtime.spawn(self.serve_envelope, src, m))
        runtime.inbound[codec.MarkerRequest] = (
            lambda src, m: runtime.spawn(self.serve_marker, src, m))
        runtime.inbound[codec.AppendRequest] = (
            lambda src, m: runtime.spawn(self.serve_append, src, m))

    # -- the caller's side ------------------------------------------------------------

    async def call(self, node: int, request: Any, timeout_s: float) -> list[Any]:
        """Send ``request`` (built with the new request id) to ``node``; the
        slot is ``[event, error code, message?]`` as the reply left it."""
        self._seq += 1
        rid = self._seq
        slot: list[Any] = [trio.Event(), ErrorCode.request_timed_out]
        self._waits[rid] = slot
        try:
            self.rt.send_internal(node, request(rid))
            with trio.move_on_after(timeout_s):
                await slot[0].wait()
            return slot
        finally:
            self._waits.pop(rid, None)

    def on_reply(self, reply: codec.Reply) -> None:
        slot = self._waits.get(reply.request_id)
        if slot is None:
            return
        slot[1] = ErrorCode(reply.error_code)
        if isinstance(reply, codec.ForwardReply):
            slot.append(reply.message)
        elif isinstance(reply, codec.AppendReply):
            slot.append(reply.base_offset)
        elif isinstance(reply, codec.ShareClaimReply):
            slot.append((reply.generation, reply.state))
        elif isinstance(reply, codec.AdminCallReply):
            slot.append(reply.result)
        elif isinstance(reply, codec.EnvelopeReply):
            slot.append(reply.body)
        slot[0].set()

    async def envelope(self, node: int, principal: str, client_host: str, api_key: int,
                       version: int, body: bytes, timeout_s: float) -> tuple[ErrorCode, bytes]:
        """Have ``node`` handle a Kafka request for ``principal``: (error, the
        response's body). REQUEST_TIMED_OUT when it did not answer in time;
        NOT_LEADER_OR_FOLLOWER at once when it is not linked (the caller
        looks the leader up again)."""
        if node not in self.rt.peers:
            return ErrorCode.not_leader_or_follower, b""
        slot = await self.call(node, lambda rid: codec.EnvelopeRequest(
            rid, principal, client_host, api_key, version, body), timeout_s)
        return slot[1], slot[2] if len(slot) > 2 else b""

    async def write_marker(self, topic: str, index: int, pid: int, epoch: int, commit: bool,
                           timeout_s: float = 5.0) -> ErrorCode:
        rt = self.rt
        if (topic, index) not in rt.assignments:
            return ErrorCode.unknown_topic_or_partition
        if rt.leads(topic, index):
            return await self.write_marker_locally(topic, index, pid, epoch, commit, timeout_s)
        leader = rt.partition_view(topic, index)[0]
        if leader not in rt.peers:
            return ErrorCode.not_leader_or_follower
        slot = await self.call(leader, lambda rid: codec.MarkerRequest(
            rid, topic, index, pid, epoch, commit), timeout_s)
        return slot[1]  # type: ignore[no-any-return]

    async def append(self, topic: str, index: int, batch: bytes,
                     timeout_s: float = 5.0) -> tuple[ErrorCode, int]:
        """Append a batch this broker wrote (``append_internal``) to
        ``topic``-``index`` at its leader, here or remote; (error, base offset)
        once committed. A remote leader that is replaced or goes silent
        meanwhile is not waited for: the batch goes to the next leader (a
        batch it already has is a duplicate there), until ``timeout_s``."""
        rt = self.rt
        deadline = trio.current_time() + timeout_s
        while True:
            if (topic, index) not in rt.assignments:
                return ErrorCode.unknown_topic_or_partition, -1
            if rt.leads(topic, index):
                return await self.append_locally(topic, index, batch,
                                                 max(deadline - trio.current_time(), 0.0))
            leader = rt.partition_view(topic, index)[0]
            if leader not in rt.peers or leader in rt.down:
                if trio.current_time() + rt.tick_s >= deadline:
                    return ErrorCode.not_leader_or_follower, -1
                await trio.sleep(rt.tick_s)  # an election: ask the next leader
                continue
            slot = await self._call_leader(topic, index, leader, codec.AppendRequest,
                                           (topic, index, batch), deadline)
            if slot is not None:
                return slot[1], (slot[2] if len(slot) > 2 else -1)

    async def _call_leader(self, topic: str, index: int, leader: int, kind: Any,
                           args: tuple[Any, ...], deadline: float) -> list[Any] | None:
        """``call`` the leader of ``topic``-``index``, looking every tick
        whether it still is and is heard from; None when it is not (ask the
        next one), else the slot (REQUEST_TIMED_OUT at ``deadline``)."""
        rt = self.rt
        self._seq += 1
        rid = self._seq
        slot: list[Any] = [trio.Event(), ErrorCode.request_timed_out]
        self._waits[rid] = slot
        try:
            rt.send_internal(leader, kind(rid, *args))
            while not slot[0].is_set():
                if leader in rt.down or rt.partition_view(topic, index)[0] != leader:
                    return None
                if trio.current_time() >= deadline:
                    return slot
                with trio.move_on_at(min(deadline, trio.current_time() + rt.tick_s)):
                    await slot[0].wait()
            return slot
        finally:
            self._waits.pop(rid, None)

    async def forward_to_controller(self, intent: dict[str, Any],
                                    timeout_s: float = 10.0) -> tuple[ErrorCode, str | None]:
        """Send a metadata change to the controller and wait (at most
        ``timeout_s``) for its answer. NOT_CONTROLLER at once while no
        controller is known, and as soon as another broker becomes the
        controller or the one asked goes silent (the caller asks again,
        ``admin.submit``); a controller not known for a moment (an election
        starting) is still waited for, since it may answer yet."""
        rt = self.rt
        controller = rt.controller_id
        if controller not in rt.peers:
            return ErrorCode.not_controller, "no controller is known"
        self._seq += 1
        rid = self._seq
        slot: list[Any] = [trio.Event(), ErrorCode.request_timed_out]
        self._waits[rid] = slot
        deadline = trio.current_time() + timeout_s
        try:
            rt.send_internal(controller, codec.ForwardRequest(rid, intent))
            while not slot[0].is_set():
                now_controller = rt.controller_id
                if now_controller not in (controller, NO_NODE) or controller in rt.down:
                    return ErrorCode.not_controller, (
                        f"controller {controller} was replaced or went silent")
                if trio.current_time() >= deadline:
                    return ErrorCode.request_timed_out, "the controller did not answer in time"
                with trio.move_on_at(min(deadline, trio.current_time() + rt.tick_s)):
                    await slot[0].wait()
        finally:
            self._waits.pop(rid, None)
        return slot[1], slot[2]

    # -- the callee's side ------------------------------------------------------------

    async def serve_marker(self, src: int, req: codec.MarkerRequest) -> None:
        code = await self.write_marker_locally(req.topic, req.index, req.producer_id,
                                               req.producer_epoch, req.commit, 5.0)
        self.rt.send_internal(src, codec.MarkerReply(req.request_id, int(code)))

    async def serve_envelope(self, src: int, req: codec.EnvelopeRequest) -> None:
        server = self.envelope_server
        if server is None:
            self.rt.send_internal(src, codec.EnvelopeReply(
                req.request_id, int(ErrorCode.unsupported_version), b""))
            return
        try:
            body = await server(req.principal, req.client_host, req.api_key, req.version,
                                req.body)
        except Exception:  # a bug, answered as one rather than left to time out
            log.exception("enveloped request %d v%d from broker %d failed", req.api_key,
                          req.version, src)
            self.rt.send_internal(src, codec.EnvelopeReply(
                req.request_id, int(ErrorCode.unknown_server_error), b""))
            return
        self.rt.send_internal(src, codec.EnvelopeReply(req.request_id, 0, body))

    async def serve_append(self, src: int, req: codec.AppendRequest) -> None:
        code, offset = await self.append_locally(req.topic, req.index, req.batch, 5.0)
        self.rt.send_internal(src, codec.AppendReply(req.request_id, int(code), offset))

    async def append_locally(self, topic: str, index: int, batch: bytes,
                             timeout_s: float) -> tuple[ErrorCode, int]:
        rt = self.rt
        part, meta = rt.state.partition(topic, index), rt.state.topics.get(topic)
        if part is not None and meta is not None and rt.leads(topic, index):
            # a leader's dedup index is built in turns before the append needs it
            await dedup_windows.ready(part, meta.configs, rt.state.broker_defaults, now_ms())
        group = rt.group_of(topic, index)
        meta = rt.state.topics.get(topic)
        if group is None or group.part is None or meta is None or not group.is_leader:
            return ErrorCode.not_leader_or_follower, -1
        check = rt.append_checks.get(topic)
        if check is not None and (refused := check(index, memoryview(batch))) != ErrorCode.none:
            return refused, -1
        term = group.raft.term

        def write(view: memoryview, header: wbatch.BatchHeader, now: int) -> wbatch.BatchHeader:
            return rt.propose_batch(group, view, header, now)

        try:
            result = append_internal(group.part, memoryview(batch), meta.configs,
                                     rt.state.broker_defaults, now_ms(), write)
        except NotLeaderError:
            return ErrorCode.not_leader_or_follower, -1
        if result.error != ErrorCode.none:
            log.debug("internal append to %s-%d refused: %s", topic, index, result.message)
            return result.error, -1
        code = await rt.wait_committed(group, result.base_offset, term,
                                       trio.current_time() + timeout_s)
        taken = rt.commit_checks.get(topic)
        if code == ErrorCode.none and taken is not None:
            code = taken(index, memoryview(batch))  # committed, applied: but counted?
        return code, result.base_offset

    async def write_marker_locally(self, topic: str, index: int, pid: int, epoch: int,
                                   commit: bool, timeout_s: float) -> ErrorCode:

        rt = self.rt
        group = rt.group_of(topic, index)
        if group is None or not group.is_leader:
            return ErrorCode.not_leader_or_follower
        now = now_ms()
        view = memoryview(encode_marker_batch(commit, producer_id=pid, producer_epoch=epoch,
                                              coordinator_epoch=0, timestamp=now))
        term = group.raft.term
        try:
            header = rt.propose_batch(group, view, wbatch.validate(view), now)
        except NotLeaderError:
            return ErrorCode.not_leader_or_follower
        except wbatch.BatchError as e:
            log.warning("marker for %s-%d refused: %s", topic, index, e)
            return ErrorCode.invalid_record
        dedup_windows.marker(rt.state.partition(topic, index), pid, commit)
        for listener in rt.marker_listeners:  # the transaction ended here
            listener(topic, index, pid)
        # a marker on __consumer_offsets reaches the group service as it commits
        return await rt.wait_committed(group, header.base_offset, term,
                                       trio.current_time() + timeout_s)
