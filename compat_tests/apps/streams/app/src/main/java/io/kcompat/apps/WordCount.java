package io.kcompat.apps;

import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * The classic Kafka Streams word count, as an application team would write it:
 * lines in, (word, count) updates out, counted in a KTable backed by a RocksDB
 * state store. Streams itself creates the repartition topic (groupBy word) and the
 * store's changelog topic; processing.guarantee is exactly_once_v2.
 *
 * <p>Arguments: bootstrap application.id state.dir input output replication.factor,
 * then any more Streams configs as key=value.
 * Every state change is printed as a JSON line on stdout (the test driver waits for
 * RUNNING); the process runs until killed or SIGTERM (then closes cleanly).
 */
public final class WordCount {
    public static final String STORE = "counts";
    public static final String REPARTITION = "words";

    private WordCount() {}

    public static void main(String[] args) throws Exception {
        if (args.length < 6) {
            System.err.println("usage: WordCount bootstrap application.id state.dir input output"
                               + " replication.factor [key=value ...]");
            System.exit(2);
        }
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[2]);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, args[5]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 2);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        // Consumed repartition records are deleted (DeleteRecords) after commits
        // at most every second, instead of every 30 s.
        props.put(StreamsConfig.REPARTITION_PURGE_INTERVAL_MS_CONFIG, 1000);
        // Every update of the table goes downstream (no record cache), so the output
        // carries each word's counts one by one.
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        // Records of an open transaction reach the brokers within 5 ms (Streams' EOS
        // default is 100 ms), so a kill -9 leaves aborted records for read_committed to hide.
        props.put(StreamsConfig.producerPrefix(ProducerConfig.LINGER_MS_CONFIG), 5);
        // A member killed -9 leaves the group after 6 s instead of 45 s.
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1000);
        for (int i = 6; i < args.length; i++) {  // more Streams configs, key=value
            String[] kv = args[i].split("=", 2);
            props.put(kv[0], kv[1]);
        }

        StreamsBuilder builder = new StreamsBuilder();
        KTable<String, Long> counts = builder
            .stream(args[3], Consumed.with(Serdes.String(), Serdes.String()))
            .flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\s+")))
            .filter((key, word) -> !word.isEmpty())
            .groupBy((key, word) -> word, Grouped.with(REPARTITION, Serdes.String(), Serdes.String()))
            .count(Materialized.as(STORE));
        counts.toStream().to(args[4], Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch done = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println("{\"state\": \"" + now + "\", \"from\": \"" + before + "\"}");
            System.out.flush();
            if (now == KafkaStreams.State.NOT_RUNNING || now == KafkaStreams.State.ERROR) {
                done.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            System.err.println("stream thread died: " + e);
            e.printStackTrace();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
                .StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close();
            // close() may return before the listener has printed NOT_RUNNING.
            System.out.println("{\"state\": \"" + streams.state() + "\", \"from\": \"close\"}");
            System.out.flush();
            done.countDown();
        }));
        streams.start();
        done.await();
        streams.close();
        System.exit(streams.state() == KafkaStreams.State.NOT_RUNNING ? 0 : 1);
    }
}
