package io.kcompat.compat;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Delayed delivery (kc-delay-ms) seen from a Java KafkaProducer with default settings (so
 * idempotent, acks=all) and a Java KafkaConsumer (no group, assign() + seekToBeginning) in one
 * JVM, at the same time.
 *
 * Usage: DelayedDelivery BOOTSTRAP TOPIC PARTITIONS WAVES PER_WAVE DELAY_MS SETTLE_MS MAX_WAIT_MS
 *        [extra.producer.config=value ...]
 *
 * The consumer starts first and polls all partitions from the beginning. The producer sends
 * WAVES waves of PER_WAVE records (record i: key "k&lt;i&gt;", value "v&lt;i&gt;", header
 * seq=i; every odd i also kc-delay-ms=DELAY_MS; partition (i / 2) % PARTITIONS, so each
 * partition gets plain and delayed records interleaved in one batch) and flush()es after each
 * wave, so later batches follow batches with holes. The consumer stops SETTLE_MS after it has
 * seen WAVES * PER_WAVE distinct values (to catch duplicates), or MAX_WAIT_MS after the
 * producer finished. Wall-clock times (System.currentTimeMillis) in every line:
 *   {"event":"acked","i","partition","offset","timestamp","delayed","sent_ms","acked_ms"}
 *   {"event":"failed","i","delayed","sent_ms","error":{...}}
 *   {"event":"produced","acked","errors"}
 *   {"event":"seen","partition","offset","key","value","timestamp","timestamp_type",
 *    "headers":[[k,v],...],"seen_ms"}
 *   {"event":"done","seen","distinct","errors","timed_out"}
 * Exit 0 iff every send was acknowledged and the consumer saw every value in time.
 */
public final class DelayedDelivery {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        int waves = Integer.parseInt(args[3]);
        int perWave = Integer.parseInt(args[4]);
        long delayMs = Long.parseLong(args[5]);
        long settleMs = Long.parseLong(args[6]);
        long maxWaitMs = Long.parseLong(args[7]);
        int total = waves * perWave;

        Properties cprops = new Properties();
        cprops.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cprops.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cprops.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cprops.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cprops.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cprops);
        List<TopicPartition> tps = new ArrayList<>();
        for (int p = 0; p < partitions; p++) tps.add(new TopicPartition(topic, p));
        consumer.assign(tps);
        consumer.seekToBeginning(tps);
        for (TopicPartition tp : tps) consumer.position(tp); // positioned before producing

        AtomicLong producedAt = new AtomicLong(0); // when the producer finished, 0 while it runs
        AtomicInteger consumerErrors = new AtomicInteger();
        int[] seenCounts = new int[2];
        boolean[] timedOut = new boolean[1];
        Thread reader = new Thread(() -> {
            Set<String> distinct = new HashSet<>();
            int seen = 0;
            long allSeenAt = 0;
            try {
                while (true) {
                    long now = System.currentTimeMillis();
                    if (allSeenAt > 0 && now - allSeenAt >= settleMs) break;
                    long finished = producedAt.get();
                    if (allSeenAt == 0 && finished > 0 && now - finished > maxWaitMs) {
                        timedOut[0] = true;
                        break;
                    }
                    for (ConsumerRecord<byte[], byte[]> rec : consumer.poll(Duration.ofMillis(100))) {
                        long at = System.currentTimeMillis();
                        List<Object> headers = new ArrayList<>();
                        for (Header h : rec.headers()) {
                            headers.add(List.of(h.key(), h.value() == null ? "\u0000null"
                                    : new String(h.value(), StandardCharsets.UTF_8)));
                        }
                        String value = rec.value() == null ? null
                                : new String(rec.value(), StandardCharsets.UTF_8);
                        Json.emit("event", "seen", "partition", rec.partition(), "offset", rec.offset(),
                                "key", rec.key() == null ? null : new String(rec.key(), StandardCharsets.UTF_8),
                                "value", value, "timestamp", rec.timestamp(),
                                "timestamp_type", rec.timestampType().name(),
                                "headers", headers, "seen_ms", at);
                        seen++;
                        distinct.add(value);
                    }
                    if (allSeenAt == 0 && distinct.size() >= total) allSeenAt = System.currentTimeMillis();
                }
            } catch (Exception e) {
                consumerErrors.incrementAndGet();
                Json.emit("event", "consumer_error", "error", Errs.describe(e));
            }
            seenCounts[0] = seen;
            seenCounts[1] = distinct.size();
        }, "delayed-reader");
        reader.start();

        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        for (int i = 8; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            props.put(kv[0], kv[1]);
        }
        AtomicInteger errors = new AtomicInteger();
        AtomicInteger acked = new AtomicInteger();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            for (int w = 0; w < waves; w++) {
                for (int j = 0; j < perWave; j++) {
                    final int i = w * perWave + j;
                    final boolean delayed = i % 2 == 1;
                    ProducerRecord<byte[], byte[]> rec = new ProducerRecord<>(
                            topic, (i / 2) % partitions, ("k" + i).getBytes(StandardCharsets.UTF_8),
                            ("v" + i).getBytes(StandardCharsets.UTF_8));
                    rec.headers().add("seq", Integer.toString(i).getBytes(StandardCharsets.UTF_8));
                    if (delayed) {
                        rec.headers().add("kc-delay-ms",
                                Long.toString(delayMs).getBytes(StandardCharsets.UTF_8));
                    }
                    final long sentMs = System.currentTimeMillis();
                    producer.send(rec, (md, e) -> {
                        long at = System.currentTimeMillis();
                        if (e != null) {
                            errors.incrementAndGet();
                            Json.emit("event", "failed", "i", i, "delayed", delayed, "sent_ms", sentMs,
                                    "error", Errs.describe(e));
                        } else {
                            acked.incrementAndGet();
                            Json.emit("event", "acked", "i", i, "partition", md.partition(),
                                    "offset", md.offset(), "timestamp", md.timestamp(),
                                    "delayed", delayed, "sent_ms", sentMs, "acked_ms", at);
                        }
                    });
                }
                producer.flush();
            }
        }
        producedAt.set(System.currentTimeMillis());
        Json.emit("event", "produced", "acked", acked.get(), "errors", errors.get());
        reader.join();
        consumer.close(Duration.ofSeconds(5));
        Json.emit("event", "done", "seen", seenCounts[0], "distinct", seenCounts[1],
                "errors", errors.get() + consumerErrors.get(), "timed_out", timedOut[0]);
        System.exit(errors.get() == 0 && consumerErrors.get() == 0 && !timedOut[0] ? 0 : 1);
    }
}
