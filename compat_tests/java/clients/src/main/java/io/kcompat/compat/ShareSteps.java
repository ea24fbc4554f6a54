package io.kcompat.compat;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * Scripted KafkaShareConsumer scenarios for per-poll comparisons of brokers
 * (test_share_ack_differential): acknowledgement modes, max.poll.records, a member closed
 * with unacknowledged records, lock expiry.
 *
 * <pre>ShareSteps SCENARIO BOOTSTRAP TOPIC GROUP TOTAL QUIET_MS MAX_POLL_RECORDS|- HOLD_MS</pre>
 *
 * <ul>
 *   <li>max-poll: one explicit consumer with max.poll.records, every record ACCEPTed;
 *   <li>max-poll-record-limit: the same with share.acquire.mode=record_limit (KIP-1206);
 *   <li>implicit: one implicit-mode consumer (poll N+1 accepts poll N's records);
 *   <li>explicit: first deliveries of offsets 1 and 4 RELEASEd, of 7 REJECTed, the rest and
 *       every later delivery ACCEPTed;
 *   <li>close-unacked: consumer A's first non-empty poll, then A closes without
 *       acknowledging; consumer B reads and ACCEPTs;
 *   <li>lock-expiry: A's first non-empty poll, then A neither acknowledges nor polls for
 *       HOLD_MS while B reads and ACCEPTs; then A RELEASEs its first records and polls once
 *       more (consumer "A-late": what its background fetches acquired meanwhile), and closes.
 * </ul>
 *
 * The reading consumer polls until TOTAL deliveries came, then QUIET_MS more (a
 * redelivery shows). Prints {"event":"poll","consumer":C,"records":[[partition,offset,
 * deliveryCount],...]} per non-empty poll, {"event":"commit","consumer":C,"errors":[...]}
 * when a commitSync reported errors, then {"event":"done"} or {"event":"failed",...}.
 */
public final class ShareSteps {
    private ShareSteps() {}

    private static String bootstrap, topic, group, maxPoll, acquireMode;

    public static void main(String[] args) {
        String scenario = args[0];
        bootstrap = args[1];
        topic = args[2];
        group = args[3];
        int total = Integer.parseInt(args[4]);
        long quiet = Long.parseLong(args[5]);
        maxPoll = args[6];
        long hold = Long.parseLong(args[7]);
        acquireMode = scenario.equals("max-poll-record-limit") ? "record_limit" : null;
        try {
            switch (scenario) {
                case "max-poll", "max-poll-record-limit", "explicit" -> {
                    try (KafkaShareConsumer<String, String> c = consumer("explicit")) {
                        String policy = scenario.equals("explicit") ? "mixed" : "accept";
                        drain(c, "A", total, quiet, policy);
                    }
                }
                case "implicit" -> {
                    try (KafkaShareConsumer<String, String> c = consumer("implicit")) {
                        drain(c, "A", total, quiet, null);
                    }
                }
                case "close-unacked" -> {
                    try (KafkaShareConsumer<String, String> a = consumer("explicit")) {
                        firstPoll(a);
                    }
                    try (KafkaShareConsumer<String, String> b = consumer("explicit")) {
                        drain(b, "B", total, quiet, "accept");
                    }
                }
                case "lock-expiry" -> {
                    try (KafkaShareConsumer<String, String> a = consumer("explicit")) {
                        ConsumerRecords<String, String> first = firstPoll(a);
                        long until = System.currentTimeMillis() + hold;
                        try (KafkaShareConsumer<String, String> b = consumer("explicit")) {
                            Thread.sleep(Math.max(0, until - System.currentTimeMillis()));
                            drain(b, "B", total, quiet, "accept");
                        }
                        late(a, first);
                    }
                }
                default -> throw new IllegalArgumentException("unknown scenario " + scenario);
            }
            Json.emit("event", "done");
        } catch (Exception e) {
            Json.emit("event", "failed", "error", Errs.describe(e));
        }
    }

    private static KafkaShareConsumer<String, String> consumer(String mode) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.SHARE_ACKNOWLEDGEMENT_MODE_CONFIG, mode);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        if (!maxPoll.equals("-")) props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, maxPoll);
        if (acquireMode != null) props.put(ConsumerConfig.SHARE_ACQUIRE_MODE_CONFIG, acquireMode);
        KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(props);
        c.subscribe(List.of(topic));
        return c;
    }

    private static List<Object> emitPoll(String name, ConsumerRecords<String, String> batch) {
        List<Object> records = new ArrayList<>();
        for (ConsumerRecord<String, String> r : batch) {
            Optional<Short> dc = r.deliveryCount();
            records.add(List.of(r.partition(), r.offset(), dc.isPresent() ? (int) dc.get() : -1));
        }
        Json.emit("event", "poll", "consumer", name, "records", records);
        return records;
    }

    /** Consumer A: poll until one poll returns records; nothing is acknowledged. */
    private static ConsumerRecords<String, String> firstPoll(KafkaShareConsumer<String, String> a) {
        long deadline = System.currentTimeMillis() + 30_000;
        while (System.currentTimeMillis() < deadline) {
            ConsumerRecords<String, String> batch = a.poll(Duration.ofMillis(200));
            if (!batch.isEmpty()) {
                emitPoll("A", batch);
                return batch;
            }
        }
        throw new IllegalStateException("consumer A got no record in 30 s");
    }

    /**
     * Lock-expiry, once B is done: what consumer A's background fetching acquired after
     * its first poll returned (records whose lock expired while such a ShareFetch waited
     * come back to A, delivery count 2, and sit in its fetch buffer; B then gets them with
     * count 3). A's first records are RELEASEd first (explicit mode refuses a poll before
     * they are acknowledged; B ACCEPTed them all, so the release changes nothing), then one
     * poll hands out the buffer: printed as consumer "A-late" when not empty.
     */
    private static void late(KafkaShareConsumer<String, String> a,
                             ConsumerRecords<String, String> first) {
        for (ConsumerRecord<String, String> r : first) a.acknowledge(r, AcknowledgeType.RELEASE);
        ConsumerRecords<String, String> batch = a.poll(Duration.ofMillis(200));
        if (!batch.isEmpty()) emitPoll("A-late", batch);
    }

    /** ``policy``: null (implicit mode: no acknowledgement), "accept" or "mixed". */
    private static AcknowledgeType decide(ConsumerRecord<String, String> r, String policy) {
        if (!"mixed".equals(policy) || r.deliveryCount().orElse((short) 1) > 1) {
            return AcknowledgeType.ACCEPT;
        }
        if (r.offset() == 1 || r.offset() == 4) return AcknowledgeType.RELEASE;
        return r.offset() == 7 ? AcknowledgeType.REJECT : AcknowledgeType.ACCEPT;
    }

    private static void drain(KafkaShareConsumer<String, String> c, String name, int total,
                              long quiet, String policy) {
        long deadline = System.currentTimeMillis() + 30_000;
        long quietUntil = Long.MAX_VALUE;
        int got = 0;
        while (System.currentTimeMillis() < Math.min(deadline, quietUntil)) {
            ConsumerRecords<String, String> batch = c.poll(Duration.ofMillis(200));
            if (batch.isEmpty()) continue;
            got += emitPoll(name, batch).size();
            if (policy != null) {
                for (ConsumerRecord<String, String> r : batch) c.acknowledge(r, decide(r, policy));
                commit(c, name);
            }
            if (got >= total && quietUntil == Long.MAX_VALUE) {
                quietUntil = System.currentTimeMillis() + quiet;
            }
        }
        if (got < total) throw new IllegalStateException(name + " got " + got + " of " + total);
    }

    private static void commit(KafkaShareConsumer<String, String> c, String name) {
        Map<TopicIdPartition, Optional<KafkaException>> result = c.commitSync();
        List<Object> errors = new ArrayList<>();
        for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : result.entrySet()) {
            e.getValue().ifPresent(x -> errors.add(List.of(e.getKey().partition(),
                    Errs.describe(x).get("error"))));
        }
        if (!errors.isEmpty()) Json.emit("event", "commit", "consumer", name, "errors", errors);
    }
}
