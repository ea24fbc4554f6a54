"""Deduplication windows at a leader (``dedup_windows``) and view answers
(``views``) over real partition logs on the in-memory store."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from kcompat.broker.storage import dedup_windows, views
from kcompat.broker.storage.append import store
from kcompat.broker.storage.partition import Partition
from kcompat.ext.delay import HeaderError
from kcompat.log.config import LogConfig
from kcompat.log.partition_log import PartitionLog
from kcompat.testing.memory_store import MemoryFileStore
from kcompat.wire.batch import CODEC_LZ4, CODEC_NONE, iter_headers, parse_header, validate
from kcompat.wire.records import decode_batch, encode_batch, encode_marker_batch

WINDOW = 10_000
POLICY = dedup_windows.Policy(WINDOW, "header", 1000, log_append_time=False)


def _partition(segment_bytes: int = 1 << 20) -> tuple[Partition, MemoryFileStore]:
    fs = MemoryFileStore("/d")
    log = PartitionLog.open(Path("/d/t-0"), LogConfig(segment_bytes=segment_bytes), 0, fs)
    return Partition("t", 0, log), fs


def _batch(ids: list[bytes | None], codec: int = CODEC_NONE, pid: int = -1,
           seq: int = -1, txn: bool = False) -> memoryview:
    records = [(b"k", b"v-" + (i or b"none"), [("kc-dedup-id", i)] if i else [], 1)
               for i in ids]
    return memoryview(encode_batch(records, codec=codec, producer_id=pid,
                                   producer_epoch=0 if pid >= 0 else -1,
                                   base_sequence=seq, transactional=txn))  # type: ignore[arg-type]


def _marker(part: Partition, pid: int, commit: bool) -> None:
    """The marker as the transaction coordinator has the leader write it."""
    raw = memoryview(encode_marker_batch(commit, producer_id=pid, producer_epoch=0,
                                         coordinator_epoch=0, timestamp=1))
    part.log.append(raw, parse_header(raw), part.leader_epoch, 1)
    dedup_windows.marker(part, pid, commit)


def _produce(part: Partition, fs: MemoryFileStore, ids: list[bytes | None], now_ms: int,
             policy: dedup_windows.Policy = POLICY, disk_ms: int | None = None,
             **kw: int) -> list[bytes]:
    """Append as the produce path does at ``now_ms`` (the file written at
    ``disk_ms``, by default then too); the values stored."""
    fs.now_ms = now_ms if disk_ms is None else disk_ms
    view = _batch(ids, **kw)

    def write(v: memoryview, header: object, now: int) -> object:
        return part.log.append(v, header, part.leader_epoch, now)  # type: ignore[arg-type]

    before = part.log.log_end_offset
    result = store(part, view, validate(view), False, now_ms, write, policy,  # type: ignore[arg-type]
                   strict=True)
    assert result.error == ErrorCode.none and result.base_offset == before
    raw = part.log.read_batch_at(before)
    assert part.log.log_end_offset == before + len(ids)  # same offsets: holes
    return [r.value for r in decode_batch(raw)]  # type: ignore[misc]


def test_duplicates_become_holes_and_the_window_runs_from_the_first_copy() -> None:
    part, fs = _partition()
    assert _produce(part, fs, [b"a", b"b", b"a", None, None], 1000) == [
        b"v-a", b"v-b", b"v-none", b"v-none"]
    assert _produce(part, fs, [b"a", b"c"], 5000) == [b"v-c"]  # a: inside its window
    assert _produce(part, fs, [b"a"], 1000 + WINDOW - 1) == []  # an empty batch is stored
    assert _produce(part, fs, [b"a", b"b"], 1000 + WINDOW) == [b"v-a", b"v-b"]
    assert part.dedup.duplicates == 3 and part.dedup.rebuilds == 1


def test_a_new_leader_epoch_rebuilds_from_the_log_dated_by_segment_writes() -> None:
    """After failover the replay must never forget an id early: a batch is
    dated by its segment file's last write, never before its append."""
    part, fs = _partition(segment_bytes=100)  # about one batch per segment
    _produce(part, fs, [b"old"], 1000)
    _produce(part, fs, [b"mid"], 6000)
    # a follower wrote "late" at 8000, after its leader appended it at 7000
    _produce(part, fs, [b"late"], 7000, disk_ms=8000)
    assert len(part.log.segment_base_offsets) >= 3
    part.leader_epoch += 1
    assert _produce(part, fs, [b"old", b"mid", b"late"], 1000 + WINDOW) == [b"v-old"]
    assert part.dedup.rebuilds == 2
    part.leader_epoch += 1  # "late" counts from 8000 (its segment's write), not 7000
    assert _produce(part, fs, [b"mid", b"late"], 7000 + WINDOW) == [b"v-mid"]
    assert _produce(part, fs, [b"late"], 8000 + WINDOW) == [b"v-late"]


def test_a_replay_skips_segments_a_window_old_and_control_batches() -> None:
    part, fs = _partition(segment_bytes=100)
    _produce(part, fs, [b"x"], 1000)
    fs.now_ms = 2000
    marker = memoryview(encode_marker_batch(True, producer_id=7, producer_epoch=0,
                                            coordinator_epoch=0, timestamp=2000))
    part.log.append(marker, parse_header(marker), 0, 2000)
    index, _open = dedup_windows.replay(part, POLICY, 1000 + WINDOW)
    assert len(index) == 0
    index, _open = dedup_windows.replay(part, POLICY, 1000 + WINDOW - 1)
    assert index.stored_ms(b"x") == 1000 and len(index) == 1


def test_a_changed_policy_rebuilds_and_content_ids() -> None:
    part, fs = _partition()
    _produce(part, fs, [b"a"], 1000)
    by_content = dedup_windows.Policy(WINDOW, "content", 1000, False)
    # the same key and value again: a duplicate by content (header ids ignored)
    assert _produce(part, fs, [b"z", b"a"], 2000, by_content) == [b"v-z"]
    assert part.dedup.rebuilds == 2


def test_an_idempotent_retry_is_answered_before_the_index_and_bad_ids_store_nothing() -> None:
    part, fs = _partition()
    _produce(part, fs, [b"a", b"b"], 1000, pid=5, seq=0)
    view = _batch([b"a", b"b"], pid=5, seq=0)  # the same batch, retried
    result = store(part, view, validate(view), False, 1500, lambda *a: pytest.fail("written"),
                   POLICY)
    assert result.error == ErrorCode.none and result.base_offset == 0
    assert part.dedup.duplicates == 0
    bad = memoryview(encode_batch([(b"k", b"v", [("kc-dedup-id", b"")], 1)]))
    end = part.log.log_end_offset
    result = store(part, bad, validate(bad), False, 1600, lambda *a: pytest.fail("written"),
                   POLICY, strict=True)
    assert result.error == ErrorCode.invalid_record and "kc-dedup-id" in str(result.message)
    assert part.log.log_end_offset == end
    # a batch the broker moves (a due delayed record) is stored; its bad id is no id
    def write(v: memoryview, header: object, now: int) -> object:
        return part.log.append(v, header, part.leader_epoch, now)  # type: ignore[arg-type]

    assert store(part, bad, validate(bad), False, 1700, write, POLICY).error == ErrorCode.none
    assert part.log.log_end_offset == end + 1
    part.leader_epoch += 1  # and a new leader's replay of that log passes it by
    assert _produce(part, fs, [b"a", b"b", b"c"], 1800) == [b"v-c"]
    with pytest.raises(HeaderError):
        dedup_windows.take_duplicates(part, bad, validate(bad), POLICY, 1600)


@pytest.mark.parametrize("replayed", [False, True])
def test_an_aborted_transaction_forgets_its_ids(replayed: bool) -> None:
    """A copy sent while the transaction is open is a duplicate; after an
    ABORT the next copy is stored, after a COMMIT it is not — live at the
    leader and in a new leader's replay of the markers."""
    part, fs = _partition()
    assert _produce(part, fs, [b"a"], 1000, pid=5, seq=0, txn=True) == [b"v-a"]
    assert _produce(part, fs, [b"b"], 1000, pid=6, seq=0, txn=True) == [b"v-b"]
    assert _produce(part, fs, [b"a", b"b"], 1100) == []
    _marker(part, 5, commit=False)
    _marker(part, 6, commit=True)
    assert _produce(part, fs, [b"c"], 1150, pid=7, seq=0, txn=True) == [b"v-c"]
    if replayed:
        part.leader_epoch += 1
    assert _produce(part, fs, [b"a", b"b"], 1200) == [b"v-a"]
    assert part.dedup.open_txns == {7: [b"c"]}
    _marker(part, 7, commit=False)
    assert _produce(part, fs, [b"c"], 1300) == [b"v-c"]


def test_policy_from_topic_configs() -> None:
    assert dedup_windows.policy({}, {}) is None
    assert dedup_windows.policy({"kc.dedup.window.ms": 0}, {}) is None
    pol = dedup_windows.policy({"kc.dedup.window.ms": 5, "kc.dedup.by": "content",
                                "message.timestamp.type": "LogAppendTime"}, {})
    assert pol == dedup_windows.Policy(5, "content", 100_000, True)


# -- views ------------------------------------------------------------------------------


def _topic(name: str, partitions: int = 3, **configs: str) -> SimpleNamespace:
    return SimpleNamespace(name=name, partitions=partitions, internal=name.startswith("__"),
                           view_of=configs.get("kc.view.of"), configs=configs)


TOPICS = {t.name: t for t in (_topic("src"), _topic("__consumer_offsets", 50),
                              _topic("v", **{"kc.view.of": "src", "kc.view.filter": "a = 1"}))}


@pytest.mark.parametrize(("configs", "partitions", "code", "words"), [
    ({"kc.view.of": "src", "kc.view.filter": "a = 1"}, -1, None, ""),
    ({"kc.view.of": "src", "kc.view.filter": "a = 1"}, 3, None, ""),
    ({"kc.view.of": "src", "kc.view.filter": "a = 1"}, 2, ErrorCode.invalid_partitions,
     "'src' has 3, not 2"),
    ({"kc.view.of": "nope", "kc.view.filter": "a = 1"}, -1, ErrorCode.invalid_config,
     "kc.view.of: topic 'nope' does not exist"),
    ({"kc.view.of": "v", "kc.view.filter": "a = 1"}, -1, ErrorCode.invalid_config,
     "view of a view"),
    ({"kc.view.of": "__consumer_offsets", "kc.view.filter": "a = 1"}, -1,
     ErrorCode.invalid_config, "internal"),
    ({"kc.view.filter": "a = 1"}, -1, ErrorCode.invalid_config, "with kc.view.of"),
    ({"kc.view.of": "src"}, -1, ErrorCode.invalid_config, "needs a filter"),
    ({"kc.view.of": "src", "kc.view.filter": "a = 1", "retention.ms": 5}, -1,
     ErrorCode.invalid_config, "retention.ms: a view takes only"),
])
def test_new_views_are_checked(configs: dict[str, object], partitions: int,
                               code: ErrorCode | None, words: str) -> None:
    count, problem = views.check_new_view(configs, partitions, TOPICS.get)
    if code is None:
        assert problem is None and count == 3
    else:
        assert problem is not None and problem[0] == code and words in problem[1]


def test_altered_views_keep_their_source() -> None:
    old = {"kc.view.of": "src", "kc.view.filter": "a = 1"}
    assert views.check_altered(old, {**old, "kc.view.filter": "b = 2"}, TOPICS.get) is None
    moved = views.check_altered(old, {**old, "kc.view.of": "other"}, TOPICS.get)
    assert moved is not None and "fixed at creation" in moved[1]
    dropped = views.check_altered(old, {"kc.view.filter": "a = 1"}, TOPICS.get)
    assert dropped is not None and dropped[0] == ErrorCode.invalid_config
    became = views.check_altered({}, {"kc.view.of": "src"}, TOPICS.get)
    assert became is not None and "cannot become a view" in became[1]
    assert views.check_altered({}, {"retention.ms": 5}, TOPICS.get) is None


@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_LZ4])
def test_view_answers_keep_offsets_and_producer_fields_and_control_batches(codec: int) -> None:
    regions = [b"eu", b"us", None, b"eu"]
    first = encode_batch([(b"k%d" % i, b"v%d" % i, [("region", r)] if r else [], 10 + i)
                          for i, r in enumerate(regions)], codec=codec, producer_id=9,
                         producer_epoch=1, base_sequence=4, transactional=True)
    nothing = encode_batch([(b"x", b"x", [("region", b"us")], 20)], base_offset=4)
    marker = encode_marker_batch(True, producer_id=9, producer_epoch=1, coordinator_epoch=0,
                                 timestamp=30, base_offset=5)
    data = first + nothing + marker + first[:30]  # a batch cut at the end of the read
    reader = views.ViewReader()
    out = reader.filter_records("v", "region = 'eu'", "src", 0, data)
    batches = [(parse_header(out, pos), pos) for pos, _h in iter_headers(out)]
    assert len(batches) == 3
    (h1, p1), (h2, p2), (h3, p3) = batches
    original = parse_header(first)
    assert (h1.base_offset, h1.last_offset_delta, h1.producer_id, h1.producer_epoch,
            h1.base_sequence, h1.is_transactional, h1.compression) == (
        0, 3, 9, 1, 4, True, codec)
    assert h1.records_count == 2 and original.records_count == 4
    assert [(r.offset, r.value) for r in decode_batch(out[p1:p1 + h1.size])] == [
        (0, b"v0"), (3, b"v3")]
    assert (h2.base_offset, h2.records_count, h2.last_offset_delta) == (4, 0, 0)
    assert h3.is_control and out[p3:p3 + h3.size] == marker
    assert reader.matched == {"v": 2} and reader.filtered == {"v": 3}
    assert reader.filter_records("v", "region = 'eu'", "src", 0, data) == out  # cached
    assert reader.matched == {"v": 4}
    every = reader.filter_records("w", "region IS NOT NULL OR region IS NULL", "src", 0, first)
    assert every == first  # nothing taken out: the source's bytes as they are
    one = len(reader.filter_records("w", "region IS NULL", "src", 0, first))
    small = views.ViewReader(capacity_bytes=one + one // 2)  # room for one rebuilt batch
    for index in range(3):
        assert len(small.filter_records("w", "region IS NULL", "src", index, first)) == one
    assert len(small._cache) == 1 and small.cached_bytes == views._cost(*small._cache.values())


def test_the_filtering_work_of_one_fetch_is_bounded() -> None:
    """A cold read ends early once the Fetch's budget is spent (at least one
    batch); cached batches cost nothing, so the next Fetch goes further."""
    batches = [encode_batch([(b"k", b"v", [("region", b"eu" if i % 2 else b"us")], 1)
                             for i in range(4)], base_offset=4 * n) for n in range(3)]
    data = b"".join(batches)
    reader = views.ViewReader()
    budget = [5]
    first = reader.filter_records("v", "region = 'eu'", "src", 0, data, budget)
    assert [h.base_offset for _p, h in iter_headers(first)] == [0, 4] and budget == [-3]
    assert len(reader.filter_records("v", "region = 'eu'", "src", 0, data[:0], [0])) == 0
    spent = reader.filter_records("v", "region = 'eu'", "src", 0, data, [0])
    assert spent == first  # the cached part only: no budget for new work
    second = reader.filter_records("v", "region = 'eu'", "src", 0, data, [1])
    assert [h.base_offset for _p, h in iter_headers(second)] == [0, 4, 8]
    assert reader.filter_records("v", "region = 'eu'", "src", 0, data, [0]) == second
    cold = views.ViewReader().filter_records("v", "region = 'eu'", "src", 0, data, [0])
    assert cold == first[:len(cold)] and [h.base_offset for _p, h in iter_headers(cold)] == [0]


def test_idle_windows_expire_and_ended_leaderships_free_their_index() -> None:
    part, fs = _partition()
    _produce(part, fs, [b"a", b"b"], 1000)
    _produce(part, fs, [b"c"], 5000)
    dedup_windows.expire_idle(part, 1000 + WINDOW - 1)
    assert part.dedup.ids == 3
    dedup_windows.expire_idle(part, 1000 + WINDOW)  # nobody appended: a and b go anyway
    assert part.dedup.ids == 1 and part.dedup.index.stored_ms(b"c") == 5000
    assert _produce(part, fs, [b"a", b"c"], 1000 + WINDOW + 1) == [b"v-a"]
    part.leader_epoch += 1  # the leadership ended: its index is freed, not kept stale
    dedup_windows.expire_idle(part, 1000 + WINDOW + 2)
    assert part.dedup.index is None and part.dedup.ids == 0
    assert _produce(part, fs, [b"a", b"c"], 1000 + WINDOW + 3) == []  # rebuilt from the log


def test_a_long_replay_is_built_in_turns_before_the_append() -> None:
    """A new leadership's index over 2,000 batches of 100 ids: ``ready``
    builds it while another task keeps running between its turns, and then
    the append finds its duplicates without replaying again."""
    import trio

    part, fs = _partition(segment_bytes=1 << 24)
    policy = dedup_windows.Policy(10 * WINDOW, "header", 1 << 20, log_append_time=False)
    configs = {"kc.dedup.window.ms": 10 * WINDOW, "kc.dedup.by": "header",
               "kc.dedup.max.entries": 1 << 20}
    for n in range(2000):
        _produce(part, fs, [b"%d-%d" % (n, i) for i in range(100)], 1000, policy)
    part.leader_epoch += 1  # a new leadership: the index is rebuilt from the log
    ticks: list[bool] = []

    async def other() -> None:
        while True:
            ticks.append(part.dedup.building is not None)
            await trio.sleep(0)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(other)
            await trio.sleep(0)
            await dedup_windows.ready(part, configs, {}, 2000)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert sum(ticks) >= 5  # the other task ran between turns of the replay
    assert part.dedup.ids == 200_000 and part.dedup.rebuilds == 2
    assert _produce(part, fs, [b"7-7", b"new"], 2000, policy) == [b"v-new"]
    assert part.dedup.rebuilds == 2
