package io.kcompat.compat;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * A KafkaProducer with default settings (so idempotent, acks=all) sending COUNT keyed records
 * with a header. Usage: Produce BOOTSTRAP TOPIC COUNT [extra.config=value ...]
 * Prints one {"event":"acked",...} per record and a final {"event":"done",...} summary.
 */
public final class Produce {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        for (int i = 3; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            props.put(kv[0], kv[1]);
        }
        int errors = 0;
        Map<Integer, List<Long>> offsets = new TreeMap<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                ProducerRecord<byte[], byte[]> rec = new ProducerRecord<>(
                        topic, ("k" + i).getBytes(StandardCharsets.UTF_8),
                        ("value-" + i).getBytes(StandardCharsets.UTF_8));
                rec.headers().add("seq", Integer.toString(i).getBytes(StandardCharsets.UTF_8));
                futures.add(producer.send(rec));
            }
            producer.flush();
            for (int i = 0; i < count; i++) {
                try {
                    RecordMetadata md = futures.get(i).get();
                    offsets.computeIfAbsent(md.partition(), p -> new ArrayList<>()).add(md.offset());
                    Json.emit("event", "acked", "i", i, "partition", md.partition(),
                            "offset", md.offset(), "timestamp", md.timestamp());
                } catch (Exception e) {
                    errors++;
                    Json.emit("event", "failed", "i", i, "error", Errs.describe(e));
                }
            }
        }
        Map<String, Object> byPartition = new TreeMap<>();
        offsets.forEach((p, o) -> byPartition.put(Integer.toString(p), o));
        Json.emit("event", "done", "acked", count - errors, "errors", errors, "offsets", byPartition);
        System.exit(errors == 0 ? 0 : 1);
    }
}
