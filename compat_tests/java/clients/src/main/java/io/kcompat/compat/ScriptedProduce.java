package io.kcompat.compat;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * One long-lived KafkaProducer (default settings: idempotent, acks=all) driven line by line
 * from stdin, so a test pays the JVM start once and sends when it chooses (e.g. before and
 * after a broker is killed). Usage: ScriptedProduce BOOTSTRAP [extra.config=value ...]
 *
 * <p>Commands (tab-separated, one per line; bytes in hex, "-" for null):
 * <ul>
 *   <li>{@code send TOPIC PARTITION KEY VALUE [HEADERS]} — HEADERS is {@code name:hex} items
 *       joined by commas ({@code name:-} for a null value); the send is asynchronous;
 *   <li>{@code flush} — flush, then one {"event":"acked"|"failed"} per record sent since the
 *       last flush and {"event":"flushed","n":N};
 *   <li>{@code close} (or end of input) — close the producer and exit.
 * </ul>
 * Prints {"event":"ready"} once the producer exists.
 */
public final class ScriptedProduce {
    private static byte[] bytes(String hex) {
        return hex.equals("-") ? null : HexFormat.of().parseHex(hex);
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        for (int i = 1; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            props.put(kv[0], kv[1]);
        }
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        int next = 0;
        List<Integer> ids = new ArrayList<>();
        List<Long> sentAt = new ArrayList<>();
        List<Future<RecordMetadata>> pending = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            Json.emit("event", "ready");
            String line;
            while ((line = in.readLine()) != null && !line.equals("close")) {
                String[] f = line.split("\t", -1);
                if (f[0].equals("send")) {
                    ProducerRecord<byte[], byte[]> rec = new ProducerRecord<>(
                            f[1], Integer.parseInt(f[2]), bytes(f[3]), bytes(f[4]));
                    if (f.length > 5 && !f[5].isEmpty()) {
                        for (String h : f[5].split(",")) {
                            String[] nv = h.split(":", 2);
                            rec.headers().add(nv[0], bytes(nv[1]));
                        }
                    }
                    ids.add(next++);
                    sentAt.add(System.currentTimeMillis());
                    pending.add(producer.send(rec));
                } else if (f[0].equals("flush")) {
                    producer.flush();
                    long acked = System.currentTimeMillis();
                    for (int k = 0; k < pending.size(); k++) {
                        try {
                            RecordMetadata md = pending.get(k).get();
                            Json.emit("event", "acked", "i", ids.get(k), "partition", md.partition(),
                                    "offset", md.offset(), "sent_ms", sentAt.get(k), "acked_ms", acked);
                        } catch (Exception e) {
                            Json.emit("event", "failed", "i", ids.get(k), "error", Errs.describe(e),
                                    "sent_ms", sentAt.get(k), "acked_ms", acked);
                        }
                    }
                    Json.emit("event", "flushed", "n", pending.size());
                    ids.clear();
                    sentAt.clear();
                    pending.clear();
                } else {
                    Json.emit("event", "bad_command", "line", line);
                }
            }
        }
        Json.emit("event", "closed");
    }
}
