package io.kcompat.compat;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * A member of a classic consumer group: subscribe, poll, commitSync after every non-empty poll.
 * Usage: GroupConsumer BOOTSTRAP TOPIC GROUP CLIENT_ID [extra.config=value ...]
 * Prints JSON lines: assigned / revoked / record / committed / closed. A line "stop" on stdin
 * (or stdin EOF) makes it leave the group (close) and exit 0.
 */
public final class GroupConsumer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        String group = args[2];
        String clientId = args[3];
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        for (int i = 4; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            props.put(kv[0], kv[1]);
        }
        AtomicBoolean stop = new AtomicBoolean(false);
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props);
        Thread stdin = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    if (line.trim().equals("stop")) break;
                }
            } catch (Exception ignored) {
                // stdin closed: stop as well
            }
            stop.set(true);
            consumer.wakeup();
        }, "stdin-watch");
        stdin.setDaemon(true);
        stdin.start();
        int exit = 0;
        try {
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                    Json.emit("event", "revoked", "partitions", partitions(parts));
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    Json.emit("event", "assigned", "partitions", partitions(parts),
                            "all", partitions(consumer.assignment()));
                }
            });
            while (!stop.get()) {
                ConsumerRecords<byte[], byte[]> records;
                try {
                    records = consumer.poll(Duration.ofMillis(200));
                } catch (WakeupException e) {
                    break;
                }
                for (ConsumerRecord<byte[], byte[]> rec : records) {
                    Json.emit("event", "record", "partition", rec.partition(), "offset", rec.offset(),
                            "key", rec.key() == null ? null : new String(rec.key(), StandardCharsets.UTF_8));
                }
                if (!records.isEmpty()) {
                    try {
                        consumer.commitSync();
                        Json.emit("event", "committed", "count", records.count());
                    } catch (WakeupException e) {
                        break;
                    }
                }
            }
        } catch (Exception e) {
            Json.emit("event", "error", "error", Errs.describe(e));
            exit = 1;
        } finally {
            consumer.close(Duration.ofSeconds(10));
            Json.emit("event", "closed");
        }
        System.exit(exit);
    }

    static List<Object> partitions(Collection<TopicPartition> parts) {
        List<Object> out = new ArrayList<>();
        for (TopicPartition tp : parts) out.add(tp.partition());
        out.sort(null);
        return out;
    }
}
