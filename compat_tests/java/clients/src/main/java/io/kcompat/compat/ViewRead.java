package io.kcompat.compat;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * One member of a classic consumer group reading topics (filtered views and their source):
 * subscribe, poll until EXPECTED records arrived and then SETTLE_MS more (anything extra is
 * reported too), commitSync, close (leaves the group).
 * Usage: ViewRead BOOTSTRAP GROUP TOPIC[,TOPIC...] EXPECTED SETTLE_MS MAX_WAIT_MS
 * Prints JSON lines: {"event":"record",topic,partition,offset,key,headers:[[name,value|null]...]}
 * then {"event":"done",count,timed_out,positions:{"topic:p":offset},committed:{...}}, or
 * {"event":"error",...} (exit 1).
 */
public final class ViewRead {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String group = args[1];
        List<String> topics = Arrays.asList(args[2].split(","));
        int expected = Integer.parseInt(args[3]);
        long settleMs = Long.parseLong(args[4]);
        long maxWaitMs = Long.parseLong(args[5]);
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, "view-read-" + group);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        int exit = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(topics);
            long t0 = System.currentTimeMillis();
            long deadline = t0 + maxWaitMs;
            long settleUntil = Long.MAX_VALUE;
            int count = 0;
            boolean timedOut = false;
            while (true) {
                long now = System.currentTimeMillis();
                if (now >= settleUntil) break;
                if (now >= deadline) {
                    timedOut = true;
                    break;
                }
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(100));
                for (ConsumerRecord<byte[], byte[]> rec : records) {
                    List<Object> headers = new ArrayList<>();
                    for (Header h : rec.headers()) {
                        headers.add(Arrays.asList(h.key(),
                                h.value() == null ? null : new String(h.value(), StandardCharsets.UTF_8)));
                    }
                    Json.emit("event", "record", "topic", rec.topic(), "partition", rec.partition(),
                            "offset", rec.offset(),
                            "key", rec.key() == null ? null : new String(rec.key(), StandardCharsets.UTF_8),
                            "headers", headers);
                    count++;
                }
                if (count >= expected && settleUntil == Long.MAX_VALUE) {
                    settleUntil = System.currentTimeMillis() + settleMs;
                }
            }
            Map<String, Object> positions = new TreeMap<>();
            for (TopicPartition tp : consumer.assignment()) {
                positions.put(tp.topic() + ":" + tp.partition(), consumer.position(tp));
            }
            consumer.commitSync();
            Map<String, Object> committed = new TreeMap<>();
            List<TopicPartition> all = new ArrayList<>();
            for (String t : topics) {
                for (PartitionInfo p : consumer.partitionsFor(t)) all.add(new TopicPartition(t, p.partition()));
            }
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e
                    : consumer.committed(new java.util.HashSet<>(all)).entrySet()) {
                committed.put(e.getKey().topic() + ":" + e.getKey().partition(),
                        e.getValue() == null ? null : e.getValue().offset());
            }
            Json.emit("event", "done", "count", count, "timed_out", timedOut,
                    "ms", System.currentTimeMillis() - t0, "positions", positions, "committed", committed);
        } catch (Exception e) {
            Json.emit("event", "error", "error", Errs.describe(e));
            exit = 1;
        }
        System.exit(exit);
    }
}
