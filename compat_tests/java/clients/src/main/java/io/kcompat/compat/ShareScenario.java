package io.kcompat.compat;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Share groups (KIP-932) seen from Java KafkaShareConsumers in explicit acknowledgement mode.
 *
 * Usage:
 *   ShareScenario release-reject BOOTSTRAP TOPIC PARTITIONS REPLICATION RECORDS GROUP CONSUMERS
 *                 SETTLE_MS MAX_WAIT_MS
 *   ShareScenario killed-holder  BOOTSTRAP TOPIC PARTITIONS REPLICATION RECORDS GROUP CONSUMERS
 *                 SETTLE_MS MAX_WAIT_MS LOCK_MS
 *   ShareScenario victim BOOTSTRAP TOPIC GROUP MAX_WAIT_MS   (run by killed-holder in a child JVM)
 *
 * Both scenarios first create TOPIC (PARTITIONS, REPLICATION) with the Admin, set the group
 * configs of GROUP through incrementalAlterConfigs on ConfigResource.Type.GROUP
 * (share.auto.offset.reset=earliest, so the group starts at the log start; killed-holder also
 * share.record.lock.duration.ms=LOCK_MS), then produce RECORDS records (record i: key "k&lt;i&gt;",
 * value "v&lt;i&gt;", partition i % PARTITIONS, flushed every 10 so partitions hold several
 * batches).
 *
 * release-reject: CONSUMERS share consumers (threads of this JVM, client ids share-0..) in
 * GROUP. Record i with i % 10 == 7 is RELEASEd when its delivery count is 1 and ACCEPTed after;
 * i % 10 == 3 is REJECTed; every other record ACCEPTed. Consumer 0 calls commitSync() after
 * each batch (ShareAcknowledge); the others leave their acknowledgements to the next poll
 * (piggybacked on ShareFetch) and to close().
 *
 * killed-holder: a child JVM ("victim") joins GROUP, polls until it holds records, prints them
 * and halts without acknowledging or closing. Then CONSUMERS consumers here ACCEPT everything.
 *
 * The consumers stop SETTLE_MS after every record was finally acknowledged (ACCEPT or REJECT,
 * to catch redeliveries), or MAX_WAIT_MS after they started. Lines (wall-clock ms):
 *   {"event":"setup","group_configs":{...}} / {"event":"produced","records"}
 *   {"event":"delivered","consumer","partition","offset","key","value","delivery_count","ack","ms"}
 *   {"event":"committed","consumer","partitions","errors":[...]}   (commitSync result)
 *   {"event":"ack_callback","consumer","offsets","error"}          (AcknowledgementCommitCallback)
 *   {"event":"victim_got",...} {"event":"victim_halt","ms"}         (the child JVM)
 *   {"event":"closed","consumer","lock_timeout_ms"} {"event":"done","finished","timed_out"}
 *   {"event":"failed","stage","error":{...}}
 * Exit 0 iff setup worked and every record was finally acknowledged in time.
 */
public final class ShareScenario {
    private static final int FLUSH_EVERY = 10;
    /** How long the victim may take to join and acquire something. */
    private static final long VICTIM_WAIT_MS = 20_000;

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        if (mode.equals("victim")) {
            victim(args[1], args[2], args[3], Long.parseLong(args[4]));
            return;
        }
        String bootstrap = args[1];
        String topic = args[2];
        int partitions = Integer.parseInt(args[3]);
        short replication = Short.parseShort(args[4]);
        int records = Integer.parseInt(args[5]);
        String group = args[6];
        int consumers = Integer.parseInt(args[7]);
        long settleMs = Long.parseLong(args[8]);
        long maxWaitMs = Long.parseLong(args[9]);
        Map<String, String> groupConfigs = new java.util.LinkedHashMap<>();
        groupConfigs.put("share.auto.offset.reset", "earliest");
        if (mode.equals("killed-holder")) {
            groupConfigs.put("share.record.lock.duration.ms", args[10]);
        }
        try {
            setup(bootstrap, topic, partitions, replication, group, groupConfigs);
            produce(bootstrap, topic, partitions, records);
        } catch (Exception e) {
            Json.emit("event", "failed", "stage", "setup", "error", Errs.describe(e));
            System.exit(2);
        }
        boolean killed = mode.equals("killed-holder");
        if (killed && !runVictim(bootstrap, topic, group, Math.min(maxWaitMs, VICTIM_WAIT_MS))) {
            System.exit(3);
        }
        boolean finished = consume(bootstrap, topic, group, consumers, records, !killed,
                settleMs, maxWaitMs);
        System.exit(finished ? 0 : 1);
    }

    static void setup(String bootstrap, String topic, int partitions, short replication,
                      String group, Map<String, String> groupConfigs) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(props)) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, replication))).all().get();
            List<AlterConfigOp> ops = new ArrayList<>();
            for (Map.Entry<String, String> e : groupConfigs.entrySet()) {
                ops.add(new AlterConfigOp(new ConfigEntry(e.getKey(), e.getValue()),
                        AlterConfigOp.OpType.SET));
            }
            ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, group);
            admin.incrementalAlterConfigs(Map.of(res, ops)).all().get();
        }
        Json.emit("event", "setup", "group_configs", groupConfigs);
    }

    static void produce(String bootstrap, String topic, int partitions, int records)
            throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            List<java.util.concurrent.Future<?>> sends = new ArrayList<>();
            for (int i = 0; i < records; i++) {
                sends.add(producer.send(new ProducerRecord<>(topic, i % partitions, "k" + i, "v" + i)));
                if ((i + 1) % FLUSH_EVERY == 0) producer.flush();
            }
            for (java.util.concurrent.Future<?> f : sends) f.get();
        }
        Json.emit("event", "produced", "records", records);
    }

    static KafkaShareConsumer<String, String> shareConsumer(String bootstrap, String group,
                                                            String clientId) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        props.put(ConsumerConfig.SHARE_ACKNOWLEDGEMENT_MODE_CONFIG, "explicit");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        return new KafkaShareConsumer<>(props);
    }

    /** release-reject: i % 10 == 7 released on its first delivery, i % 10 == 3 rejected. */
    static AcknowledgeType decide(String value, int deliveryCount, boolean releaseReject) {
        if (!releaseReject) return AcknowledgeType.ACCEPT;
        int i = Integer.parseInt(value.substring(1));
        if (i % 10 == 3) return AcknowledgeType.REJECT;
        if (i % 10 == 7 && deliveryCount == 1) return AcknowledgeType.RELEASE;
        return AcknowledgeType.ACCEPT;
    }

    /** Run CONSUMERS threads until every record is finally acknowledged; true if in time. */
    static boolean consume(String bootstrap, String topic, String group, int consumers,
                           int records, boolean releaseReject, long settleMs, long maxWaitMs)
            throws InterruptedException {
        Map<String, AcknowledgeType> finals = new ConcurrentHashMap<>();
        AtomicLong allDoneAt = new AtomicLong(0);
        long deadline = System.currentTimeMillis() + maxWaitMs;
        List<Thread> threads = new ArrayList<>();
        for (int c = 0; c < consumers; c++) {
            final int id = c;
            Thread t = new Thread(() -> runConsumer(bootstrap, topic, group, id, records,
                    releaseReject, finals, allDoneAt, settleMs, deadline), "share-" + c);
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) t.join();
        boolean finished = finals.size() >= records;
        Json.emit("event", "done", "finished", finished, "final_acks", finals.size(),
                "timed_out", !finished);
        return finished;
    }

    static void runConsumer(String bootstrap, String topic, String group, int id, int records,
                            boolean releaseReject, Map<String, AcknowledgeType> finals,
                            AtomicLong allDoneAt, long settleMs, long deadline) {
        KafkaShareConsumer<String, String> consumer = shareConsumer(bootstrap, group, "share-" + id);
        consumer.setAcknowledgementCommitCallback((offsets, error) -> Json.emit(
                "event", "ack_callback", "consumer", id, "offsets", countOffsets(offsets),
                "error", error == null ? null : Errs.describe(error)));
        try {
            consumer.subscribe(List.of(topic));
            while (true) {
                long now = System.currentTimeMillis();
                long doneAt = allDoneAt.get();
                if (now > deadline || (doneAt > 0 && now > doneAt + settleMs)) break;
                ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> r : batch) {
                    int dc = r.deliveryCount().map(Short::intValue).orElse(-1);
                    AcknowledgeType ack = decide(r.value(), dc, releaseReject);
                    consumer.acknowledge(r, ack);
                    if (ack != AcknowledgeType.RELEASE) finals.put(r.value(), ack);
                    Json.emit("event", "delivered", "consumer", id, "partition", r.partition(),
                            "offset", r.offset(), "key", r.key(), "value", r.value(),
                            "delivery_count", dc, "ack", ack.name(),
                            "ms", System.currentTimeMillis());
                }
                if (id == 0 && !batch.isEmpty()) {
                    Map<TopicIdPartition, Optional<KafkaException>> res = consumer.commitSync();
                    List<Object> errors = new ArrayList<>();
                    res.forEach((tip, err) -> err.ifPresent(e -> errors.add(Json.obj(
                            "partition", tip.partition(), "error", Errs.describe(e)))));
                    Json.emit("event", "committed", "consumer", id, "partitions", res.size(),
                            "errors", errors);
                }
                if (finals.size() >= records) allDoneAt.compareAndSet(0, System.currentTimeMillis());
            }
        } catch (Exception e) {
            Json.emit("event", "failed", "stage", "consumer-" + id, "error", Errs.describe(e));
        } finally {
            Optional<Integer> lock = consumer.acquisitionLockTimeoutMs();
            consumer.close(Duration.ofSeconds(10));
            Json.emit("event", "closed", "consumer", id, "lock_timeout_ms", lock.orElse(null));
        }
    }

    static int countOffsets(Map<TopicIdPartition, ? extends Collection<Long>> offsets) {
        int n = 0;
        for (Collection<Long> s : offsets.values()) n += s.size();
        return n;
    }

    /** The child JVM of killed-holder; its stdout is ours. True once it has halted. */
    static boolean runVictim(String bootstrap, String topic, String group, long maxWaitMs)
            throws Exception {
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        ProcessBuilder pb = new ProcessBuilder(java, "-Xmx128m", "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp", System.getProperty("java.class.path"), ShareScenario.class.getName(),
                "victim", bootstrap, topic, group, String.valueOf(maxWaitMs));
        pb.inheritIO();
        Process p = pb.start();
        if (!p.waitFor(maxWaitMs + 10_000, TimeUnit.MILLISECONDS)) {
            p.destroyForcibly();
            Json.emit("event", "failed", "stage", "victim", "error", "did not halt in time");
            return false;
        }
        if (p.exitValue() != 0) {
            Json.emit("event", "failed", "stage", "victim", "error", "exit " + p.exitValue());
            return false;
        }
        return true;
    }

    /** Poll until some records are acquired, print them, halt without acking or closing. */
    static void victim(String bootstrap, String topic, String group, long maxWaitMs) {
        KafkaShareConsumer<String, String> consumer = shareConsumer(bootstrap, group, "victim");
        consumer.subscribe(List.of(topic));
        long deadline = System.currentTimeMillis() + maxWaitMs;
        while (System.currentTimeMillis() < deadline) {
            ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(200));
            if (batch.isEmpty()) continue;
            for (ConsumerRecord<String, String> r : batch) {
                Json.emit("event", "victim_got", "partition", r.partition(), "offset", r.offset(),
                        "value", r.value(),
                        "delivery_count", r.deliveryCount().map(Short::intValue).orElse(-1));
            }
            Json.emit("event", "victim_halt", "records", batch.count(),
                    "lock_timeout_ms", consumer.acquisitionLockTimeoutMs().orElse(null),
                    "ms", System.currentTimeMillis());
            Runtime.getRuntime().halt(0);
        }
        Json.emit("event", "failed", "stage", "victim", "error", "acquired nothing in time");
        Runtime.getRuntime().halt(4);
    }
}
