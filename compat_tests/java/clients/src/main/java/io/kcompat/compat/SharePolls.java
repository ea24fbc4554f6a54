package io.kcompat.compat;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * One KafkaShareConsumer in explicit acknowledgement mode that prints what each poll
 * returned, for per-poll comparisons of brokers (test_share_fetch_bounds_differential).
 *
 * <pre>SharePolls BOOTSTRAP TOPIC GROUP FETCH_MAX_BYTES|- TOTAL MAX_WAIT_MS</pre>
 *
 * Polls until TOTAL records came (or MAX_WAIT_MS passed); every record is ACCEPTed and
 * each non-empty poll is committed (commitSync: a ShareAcknowledge) before the next.
 * Prints {"event":"poll","records":[[partition,offset],...]} per non-empty poll, then
 * {"event":"done","records":N} or {"event":"failed","error":...}.
 *
 * <p>A poll may join the answers of several ShareFetches (the consumer's collector takes
 * every completed fetch it holds, up to max.poll.records, and its network thread may have
 * received the next answer before the application thread collects), so what one ShareFetch
 * handed out is logged too: ShareConsumeRequestManager's DEBUG line "ShareFetch for
 * partition ... returned fetch data ..." (on stderr) names each answer's acquired ranges.
 */
public final class SharePolls {
    private SharePolls() {}

    public static void main(String[] args) {
        // before the first logger exists: slf4j-simple reads its levels when one is made
        System.setProperty("org.slf4j.simpleLogger.log."
                + "org.apache.kafka.clients.consumer.internals.ShareConsumeRequestManager", "debug");
        String bootstrap = args[0], topic = args[1], group = args[2], maxBytes = args[3];
        int total = Integer.parseInt(args[4]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[5]);
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.SHARE_ACKNOWLEDGEMENT_MODE_CONFIG, "explicit");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        if (!maxBytes.equals("-")) props.put(ConsumerConfig.FETCH_MAX_BYTES_CONFIG, maxBytes);
        int got = 0;
        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            while (got < total && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(500));
                if (batch.isEmpty()) continue;
                List<Object> records = new ArrayList<>();
                for (ConsumerRecord<String, String> r : batch) {
                    records.add(List.of(r.partition(), r.offset()));
                    consumer.acknowledge(r, AcknowledgeType.ACCEPT);
                }
                got += records.size();
                Json.emit("event", "poll", "records", records);
                consumer.commitSync();
            }
            Json.emit("event", "done", "records", got);
        } catch (Exception e) {
            Json.emit("event", "failed", "error", Errs.describe(e));
        }
    }
}
