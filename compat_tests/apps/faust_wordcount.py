"""A Faust (faust-streaming) word count, an ordinary Faust application run unmodified as
its own process by ``compat_tests/apps/test_faust.py``::

    FAUST_WC_BROKER=127.0.0.1:9092 python -m compat_tests.apps.faust_wordcount worker -l info

* agent ``split`` reads lines from the input topic and sends each word, keyed by the
  word, to the ``words`` topic (a repartition topic Faust declares itself);
* agent ``count`` adds one per word to the Table ``word-counts`` (memory store: a new
  worker rebuilds it from the changelog topic ``<app id>-word-counts-changelog``, which
  Faust creates compacted) and emits ``word -> count`` to the output topic.

Settings come from the environment (FAUST_WC_*): broker list, app id, topic names,
partitions, replication factor, data dir and the processing guarantee
(``at_least_once`` or ``exactly_once``).
"""

from __future__ import annotations

import os

import faust

ENV = os.environ
BROKERS = ENV.get("FAUST_WC_BROKER", "127.0.0.1:9092")
APP_ID = ENV.get("FAUST_WC_APP_ID", "faust-wordcount")
INPUT = ENV.get("FAUST_WC_INPUT", "wc-lines")
OUTPUT = ENV.get("FAUST_WC_OUTPUT", "wc-counts")
PARTITIONS = int(ENV.get("FAUST_WC_PARTITIONS", "2"))

app = faust.App(
    APP_ID,
    broker=";".join(f"kafka://{hp}" for hp in BROKERS.split(",")),
    store="memory://",
    datadir=ENV.get("FAUST_WC_DATADIR", "faust-data"),
    topic_partitions=PARTITIONS,
    topic_replication_factor=int(ENV.get("FAUST_WC_REPLICATION", "1")),
    processing_guarantee=ENV.get("FAUST_WC_GUARANTEE", "at_least_once"),
    consumer_auto_offset_reset="earliest",
    broker_session_timeout=10.0,
    broker_heartbeat_interval=1.0,
    broker_commit_interval=1.0,
    web_enabled=False,
)

lines = app.topic(INPUT, key_type=bytes, value_type=bytes, value_serializer="raw",
                  partitions=PARTITIONS)
words = app.topic(f"{APP_ID}-words", key_type=str, value_type=str, key_serializer="raw",
                  value_serializer="raw", partitions=PARTITIONS, internal=True)
counts_out = app.topic(OUTPUT, key_type=str, value_type=int, key_serializer="raw",
                       value_serializer="json", partitions=PARTITIONS)
counts = app.Table("word-counts", default=int, key_type=str, value_type=int,
                   partitions=PARTITIONS)


@app.agent(lines)
async def split(stream: faust.StreamT[bytes]) -> None:
    async for line in stream:
        for word in line.decode().split():
            await words.send(key=word, value=word)


@app.agent(words)
async def count(stream: faust.StreamT[str]) -> None:
    async for word in stream:
        counts[word] += 1
        await counts_out.send(key=word, value=counts[word])


if __name__ == "__main__":
    app.main()
