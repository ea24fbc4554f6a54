package io.kcompat.compat;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Consume-transform-produce with exactly-once semantics: a KafkaProducer with a
 * transactional.id and a read_committed KafkaConsumer that subscribes (group GROUP), so
 * sendOffsetsToTransaction gets the real consumer.groupMetadata() (member id, generation).
 *
 * <p>Usage: TxnCopy BOOTSTRAP IN_TOPIC OUT_TOPIC GROUP TXN_ID TXN_SIZE ABORT_EVERY
 *
 * <p>Every record of IN_TOPIC (up to the end offsets read once assigned) is copied to the
 * same partition of OUT_TOPIC with its key and value, plus a header "txn" naming the
 * transaction that wrote it. Each poll (at most TXN_SIZE records) is one transaction carrying
 * the consumer's positions. Every ABORT_EVERY-th transaction is aborted on purpose after
 * flush() (so its records are in the log) and the consumer rewinds to the committed offsets.
 *
 * <p>Then it reads OUT_TOPIC back from the beginning with a fresh read_committed consumer and
 * a read_uncommitted one (assign, no group). JSON lines: assigned, commit, abort, copied,
 * verify (committed values, their txn headers, the uncommitted txn headers), done.
 */
public final class TxnCopy {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String inTopic = args[1];
        String outTopic = args[2];
        String group = args[3];
        String txnId = args[4];
        int txnSize = Integer.parseInt(args[5]);
        int abortEvery = Integer.parseInt(args[6]);

        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, Integer.toString(txnSize));
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());

        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        // Small batches: several in-flight batches per partition and transaction.
        pp.put(ProducerConfig.BATCH_SIZE_CONFIG, "2048");
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());

        int exit = 0;
        long copied = 0;
        int commits = 0;
        int aborts = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cp);
             KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp)) {
            producer.initTransactions();
            Json.emit("event", "init", "transactional_id", txnId);
            consumer.subscribe(List.of(inTopic));
            long deadline = System.currentTimeMillis() + 30_000;
            // poll() joins the group; nothing is consumed before the assignment is known
            // because the first records it returns are part of transaction 1 below.
            ConsumerRecords<byte[], byte[]> pending = ConsumerRecords.empty();
            while (consumer.assignment().isEmpty()) {
                pending = consumer.poll(Duration.ofMillis(100));
                if (System.currentTimeMillis() > deadline) throw new IllegalStateException("no assignment in 30s");
            }
            Set<TopicPartition> assigned = consumer.assignment();
            Map<TopicPartition, Long> ends = consumer.endOffsets(assigned);
            Json.emit("event", "assigned", "partitions", parts(assigned), "ends", byPartition(ends),
                    "generation", consumer.groupMetadata().generationId(),
                    "member_id_present", !consumer.groupMetadata().memberId().isEmpty());
            int txn = 0;
            deadline = System.currentTimeMillis() + 90_000;
            while (true) {
                boolean done = pending.isEmpty();
                for (TopicPartition tp : assigned) {
                    if (consumer.position(tp) < ends.get(tp)) done = false;
                }
                if (done) break;
                if (System.currentTimeMillis() > deadline) throw new IllegalStateException("not done in 90s");
                ConsumerRecords<byte[], byte[]> records = pending.isEmpty() ? consumer.poll(Duration.ofMillis(200)) : pending;
                pending = ConsumerRecords.empty();
                if (records.isEmpty()) continue;
                txn++;
                byte[] tag = Integer.toString(txn).getBytes(StandardCharsets.UTF_8);
                producer.beginTransaction();
                for (ConsumerRecord<byte[], byte[]> rec : records) {
                    ProducerRecord<byte[], byte[]> out = new ProducerRecord<>(
                            outTopic, rec.partition(), rec.key(), rec.value());
                    out.headers().add("txn", tag);
                    producer.send(out);
                }
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (TopicPartition tp : assigned) {
                    offsets.put(tp, new OffsetAndMetadata(consumer.position(tp)));
                }
                producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                if (abortEvery > 0 && txn % abortEvery == 0) {
                    producer.flush();  // the aborted records really reach the log
                    producer.abortTransaction();
                    aborts++;
                    Json.emit("event", "abort", "txn", txn, "records", records.count());
                    Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assigned);
                    Map<TopicPartition, Long> rewound = new TreeMap<>(
                            (a, b) -> Integer.compare(a.partition(), b.partition()));
                    for (TopicPartition tp : assigned) {
                        OffsetAndMetadata om = committed.get(tp);
                        if (om == null) {
                            consumer.seekToBeginning(List.of(tp));
                        } else {
                            consumer.seek(tp, om.offset());
                        }
                        rewound.put(tp, consumer.position(tp));
                    }
                    Json.emit("event", "rewind", "txn", txn, "positions", byPartition(rewound));
                } else {
                    producer.commitTransaction();
                    commits++;
                    copied += records.count();
                    Json.emit("event", "commit", "txn", txn, "records", records.count(),
                            "offsets", byPartition(positions(offsets)));
                }
            }
            Json.emit("event", "copied", "records", copied, "commits", commits, "aborts", aborts,
                    "committed", byPartition(positions(consumer.committed(assigned))));
        } catch (Exception e) {
            Json.emit("event", "error", "error", Errs.describe(e));
            exit = 1;
        }
        if (exit == 0) {
            try {
                verify(bootstrap, outTopic);
            } catch (Exception e) {
                Json.emit("event", "error", "where", "verify", "error", Errs.describe(e));
                exit = 1;
            }
        }
        Json.emit("event", "done", "exit", exit);
        System.exit(exit);
    }

    /** Read OUT_TOPIC to its end under both isolation levels (fresh assign-mode consumers). */
    static void verify(String bootstrap, String topic) {
        Map<String, Object> result = new TreeMap<>();
        for (String level : List.of("read_committed", "read_uncommitted")) {
            Properties p = new Properties();
            p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, level);
            p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
            p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
            List<Object> values = new ArrayList<>();
            TreeSet<Integer> txns = new TreeSet<>();
            try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
                List<TopicPartition> tps = new ArrayList<>();
                c.partitionsFor(topic).forEach(pi -> tps.add(new TopicPartition(topic, pi.partition())));
                c.assign(tps);
                c.seekToBeginning(tps);
                Map<TopicPartition, Long> ends = c.endOffsets(tps);  // LSO under read_committed
                long deadline = System.currentTimeMillis() + 30_000;
                while (true) {
                    boolean done = true;
                    for (TopicPartition tp : tps) {
                        if (c.position(tp) < ends.get(tp)) done = false;
                    }
                    if (done || System.currentTimeMillis() > deadline) break;
                    for (ConsumerRecord<byte[], byte[]> rec : c.poll(Duration.ofMillis(200))) {
                        values.add(new String(rec.value(), StandardCharsets.UTF_8));
                        Header h = rec.headers().lastHeader("txn");
                        if (h != null) txns.add(Integer.parseInt(new String(h.value(), StandardCharsets.UTF_8)));
                    }
                }
                Map<TopicPartition, Long> positions = new HashMap<>();
                for (TopicPartition tp : tps) positions.put(tp, c.position(tp));
                result.put(level, Json.obj("values", values, "txns", Json.list(txns),
                        "ends", byPartition(ends), "positions", byPartition(positions)));
            }
        }
        Json.emit("event", "verify", "levels", result);
    }

    static Map<TopicPartition, Long> positions(Map<TopicPartition, OffsetAndMetadata> offsets) {
        Map<TopicPartition, Long> out = new HashMap<>();
        offsets.forEach((tp, om) -> out.put(tp, om == null ? null : om.offset()));
        return out;
    }

    static Map<String, Object> byPartition(Map<TopicPartition, Long> m) {
        Map<String, Object> out = new TreeMap<>();
        m.forEach((tp, v) -> out.put(Integer.toString(tp.partition()), v));
        return out;
    }

    static List<Object> parts(Set<TopicPartition> tps) {
        List<Object> out = new ArrayList<>();
        for (TopicPartition tp : tps) out.add(tp.partition());
        out.sort(null);
        return out;
    }
}
