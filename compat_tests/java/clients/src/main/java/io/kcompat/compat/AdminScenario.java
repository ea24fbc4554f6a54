package io.kcompat.compat;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.Callable;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * One scripted session of the Java Admin client, a default (idempotent) producer and an
 * assign()-style consumer. Every step's observation (a value, or Kafka's error name and
 * code) goes into one JSON object printed as the last line, normalised so that Apache
 * Kafka and kcompat can be compared key by key: timestamps relative to the scenario's
 * base time, the broker's host/port as booleans, no error messages in the comparison.
 *
 * Usage: AdminScenario BOOTSTRAP TOPIC_PREFIX
 */
public final class AdminScenario {
    static final Map<String, Object> OBS = new LinkedHashMap<>();
    static String bootstrap;

    interface Step {
        Object run() throws Exception;
    }

    static void step(String name, Step s) {
        Object value;
        long t0 = System.nanoTime();
        try {
            Object v = s.run();
            value = v == null ? "ok" : v;
        } catch (Throwable t) {
            Map<String, Object> d = Errs.describe(t);
            value = Json.obj("error", d.get("error"), "code", d.get("code"),
                    "exception", d.get("exception"));
            Json.emit("step", name, "detail", d);
        }
        OBS.put(name, value);
        Json.emit("step", name, "ms", (System.nanoTime() - t0) / 1_000_000, "result", value);
    }

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        String prefix = args[1];
        String main = prefix + "-main";
        String hostPort = bootstrap;
        // Ten minutes back, well inside the topic's retention.ms of an hour: with base an
        // hour back, the records were already expired and the broker's retention check
        // (Kafka deletes an expired active segment) could empty a partition mid-scenario.
        long base = System.currentTimeMillis() - 600_000L;

        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        ap.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        ap.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "15000");
        try (Admin admin = Admin.create(ap)) {
            step("describe_cluster", () -> {
                DescribeClusterResult r = admin.describeCluster();
                Collection<Node> nodes = r.nodes().get();
                Node controller = r.controller().get();
                List<Object> ns = new ArrayList<>();
                for (Node n : nodes) {
                    ns.add(Json.obj("id", n.id(), "is_bootstrap", (n.host() + ":" + n.port()).equals(hostPort),
                            "rack", n.rack()));
                }
                String cid = r.clusterId().get();
                return Json.obj("nodes", ns, "controller_is_a_node",
                        nodes.stream().anyMatch(n -> n.id() == controller.id()),
                        "cluster_id_present", cid != null && !cid.isEmpty());
            });
            step("create_main", () -> {
                admin.createTopics(List.of(new NewTopic(main, 3, (short) 1)
                        .configs(Map.of("retention.ms", "3600000")))).all().get();
                return null;
            });
            step("create_existing", () -> create(admin, new NewTopic(main, 3, (short) 1), false));
            step("create_zero_partitions", () -> create(admin, new NewTopic(prefix + "-zero", 0, (short) 1), false));
            step("create_negative_partitions", () -> create(admin, new NewTopic(prefix + "-neg", -5, (short) 1), false));
            step("create_replication_factor_3", () -> create(admin, new NewTopic(prefix + "-rf", 1, (short) 3), false));
            step("create_bad_config_value", () -> create(admin, new NewTopic(prefix + "-badval", 1, (short) 1)
                    .configs(Map.of("cleanup.policy", "bogus")), false));
            step("create_unknown_config", () -> create(admin, new NewTopic(prefix + "-unk", 1, (short) 1)
                    .configs(Map.of("no.such.config", "1")), false));
            step("create_non_numeric_config", () -> create(admin, new NewTopic(prefix + "-nan", 1, (short) 1)
                    .configs(Map.of("retention.ms", "abc")), false));
            step("create_bad_name", () -> create(admin, new NewTopic("bad/name", 1, (short) 1), false));
            step("create_validate_only", () -> create(admin, new NewTopic(prefix + "-vo", 2, (short) 1), true));
            step("validate_only_left_no_topic", () -> admin.listTopics().names().get().contains(prefix + "-vo"));

            step("describe_main", () -> describe(admin, main));
            step("describe_unknown", () -> describe(admin, prefix + "-nope"));

            // Produce with explicit CreateTime timestamps: p0 gets 5 records, p1 3, p2 none.
            Properties pp = new Properties();
            pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
            pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp)) {
                step("produce", () -> {
                    Map<String, Object> out = new TreeMap<>();
                    int[] counts = {5, 3, 0};
                    for (int p = 0; p < counts.length; p++) {
                        List<Object> offs = new ArrayList<>();
                        for (int i = 0; i < counts[p]; i++) {
                            ProducerRecord<byte[], byte[]> rec = new ProducerRecord<>(main, p, base + i * 1000L,
                                    ("k" + p + "-" + i).getBytes(StandardCharsets.UTF_8),
                                    ("v" + i).getBytes(StandardCharsets.UTF_8));
                            rec.headers().add("h", new byte[] {(byte) i});
                            RecordMetadata md = producer.send(rec).get();
                            offs.add(List.of(md.offset(), md.timestamp() - base));
                        }
                        out.put("p" + p, offs);
                    }
                    return out;
                });
            }

            step("list_offsets", () -> {
                Map<String, Object> out = new TreeMap<>();
                Map<String, OffsetSpec> specs = new LinkedHashMap<>();
                specs.put("earliest", OffsetSpec.earliest());
                specs.put("latest", OffsetSpec.latest());
                specs.put("max_timestamp", OffsetSpec.maxTimestamp());
                specs.put("ts_before_all", OffsetSpec.forTimestamp(base - 1000));
                specs.put("ts_1500", OffsetSpec.forTimestamp(base + 1500));
                specs.put("ts_exact_2000", OffsetSpec.forTimestamp(base + 2000));
                specs.put("ts_after_all", OffsetSpec.forTimestamp(base + 100_000));
                for (int p = 0; p < 3; p++) {
                    TopicPartition tp = new TopicPartition(main, p);
                    Map<String, Object> per = new LinkedHashMap<>();
                    for (Map.Entry<String, OffsetSpec> e : specs.entrySet()) {
                        ListOffsetsResult.ListOffsetsResultInfo info =
                                admin.listOffsets(Map.of(tp, e.getValue())).partitionResult(tp).get();
                        long ts = info.timestamp();
                        per.put(e.getKey(), List.of(info.offset(), ts < 0 ? ts : ts - base,
                                info.leaderEpoch().isPresent() ? info.leaderEpoch().get() : "absent"));
                    }
                    out.put("p" + p, per);
                }
                return out;
            });
            step("list_offsets_unknown_topic", () -> {
                TopicPartition tp = new TopicPartition(prefix + "-nope", 0);
                return admin.listOffsets(Map.of(tp, OffsetSpec.latest())).partitionResult(tp).get().offset();
            });
            step("list_offsets_bad_partition", () -> {
                // Both brokers leave the Admin client retrying its metadata until the timeout.
                TopicPartition tp = new TopicPartition(main, 7);
                return admin.listOffsets(Map.of(tp, OffsetSpec.latest()),
                        new ListOffsetsOptions().timeoutMs(3000)).partitionResult(tp).get().offset();
            });

            step("consume_all", () -> {
                try (KafkaConsumer<byte[], byte[]> c = consumer("none")) {
                    List<TopicPartition> tps = List.of(new TopicPartition(main, 0), new TopicPartition(main, 1),
                            new TopicPartition(main, 2));
                    c.assign(tps);
                    c.seekToBeginning(tps);
                    List<Object> got = new ArrayList<>();
                    long deadline = System.currentTimeMillis() + 15000;
                    while (got.size() < 8 && System.currentTimeMillis() < deadline) {
                        for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                            List<Object> hs = new ArrayList<>();
                            for (Header h : r.headers()) hs.add(List.of(h.key(), (int) h.value()[0]));
                            got.add(List.of(r.partition(), r.offset(), r.timestamp() - base,
                                    r.timestampType().name, new String(r.key(), StandardCharsets.UTF_8), hs,
                                    r.leaderEpoch().isPresent() ? r.leaderEpoch().get() : "absent"));
                        }
                    }
                    got.sort((a, b) -> a.toString().compareTo(b.toString()));
                    Map<String, Object> positions = new TreeMap<>();
                    for (TopicPartition tp : tps) positions.put("p" + tp.partition(), c.position(tp));
                    return Json.obj("records", got, "positions", positions);
                }
            });
            step("fetch_out_of_range", () -> {
                try (KafkaConsumer<byte[], byte[]> c = consumer("none")) {
                    TopicPartition tp = new TopicPartition(main, 0);
                    c.assign(List.of(tp));
                    c.seek(tp, 100);
                    long deadline = System.currentTimeMillis() + 10000;
                    while (System.currentTimeMillis() < deadline) {
                        if (!c.poll(Duration.ofMillis(200)).isEmpty()) return "records";
                    }
                    return "no error within 10s";
                }
            });
            step("fetch_at_end_is_empty", () -> {
                try (KafkaConsumer<byte[], byte[]> c = consumer("none")) {
                    TopicPartition tp = new TopicPartition(main, 0);
                    c.assign(List.of(tp));
                    c.seek(tp, 5);
                    int n = c.poll(Duration.ofMillis(1000)).count();
                    return Json.obj("records", n, "position", c.position(tp));
                }
            });
            step("produce_oversized", () -> {
                Properties big = new Properties();
                big.putAll(pp);
                big.put(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, "4000000");
                big.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "20000");
                big.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
                try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(big)) {
                    RecordMetadata md = producer.send(new ProducerRecord<>(main, 2, null, new byte[1_200_000])).get();
                    return md.offset();
                }
            });
            step("create_partitions_fewer", () -> {
                admin.createPartitions(Map.of(main, NewPartitions.increaseTo(2))).all().get();
                return null;
            });
            step("create_partitions_same", () -> {
                admin.createPartitions(Map.of(main, NewPartitions.increaseTo(3))).all().get();
                return null;
            });
            step("create_partitions_unknown", () -> {
                admin.createPartitions(Map.of(prefix + "-nope", NewPartitions.increaseTo(3))).all().get();
                return null;
            });
            step("create_partitions_more", () -> {
                admin.createPartitions(Map.of(main, NewPartitions.increaseTo(4))).all().get();
                return waitFor(() -> admin.describeTopics(List.of(main)).allTopicNames().get()
                        .get(main).partitions().size(), 4);
            });
            step("describe_configs_topic", () -> configs(admin, new ConfigResource(ConfigResource.Type.TOPIC, main)));
            step("describe_configs_broker", () -> configs(admin, new ConfigResource(ConfigResource.Type.BROKER,
                    Integer.toString(admin.describeCluster().nodes().get().iterator().next().id()))));
            step("describe_configs_unknown_topic", () -> configs(admin,
                    new ConfigResource(ConfigResource.Type.TOPIC, prefix + "-nope")));
            step("delete_unknown", () -> {
                admin.deleteTopics(List.of(prefix + "-nope")).all().get();
                return null;
            });
            step("delete_main", () -> {
                admin.deleteTopics(List.of(main)).all().get();
                return null;
            });
            step("describe_after_delete", () -> {
                long deadline = System.currentTimeMillis() + 10000;
                while (true) {
                    try {
                        admin.describeTopics(List.of(main)).allTopicNames().get();
                    } catch (Exception e) {
                        throw e;
                    }
                    if (System.currentTimeMillis() > deadline) return "still there after 10s";
                    Thread.sleep(200);
                }
            });
        }
        Json.emit("observations", OBS);
    }

    static Object create(Admin admin, NewTopic t, boolean validateOnly) throws Exception {
        admin.createTopics(List.of(t), new CreateTopicsOptions().validateOnly(validateOnly)).all().get();
        return null;
    }

    static <T> T waitFor(Callable<T> f, T want) throws Exception {
        long deadline = System.currentTimeMillis() + 10000;
        T got = f.call();
        while (!want.equals(got) && System.currentTimeMillis() < deadline) {
            Thread.sleep(100);
            got = f.call();
        }
        return got;
    }

    static Object describe(Admin admin, String topic) throws Exception {
        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
        List<Object> parts = new ArrayList<>();
        for (TopicPartitionInfo p : d.partitions()) {
            List<Object> replicas = new ArrayList<>();
            for (Node n : p.replicas()) replicas.add(n.id());
            List<Object> isr = new ArrayList<>();
            for (Node n : p.isr()) isr.add(n.id());
            parts.add(Json.obj("partition", p.partition(), "leader", p.leader() == null ? null : p.leader().id(),
                    "replicas", replicas, "isr", isr, "elr", p.elr() == null ? null : p.elr().size(),
                    "last_known_elr", p.lastKnownElr() == null ? null : p.lastKnownElr().size()));
        }
        return Json.obj("name", d.name(), "internal", d.isInternal(),
                "topic_id_nonzero", d.topicId() != null && !d.topicId().equals(Uuid.ZERO_UUID),
                "partitions", parts);
    }

    static Object configs(Admin admin, ConfigResource res) throws Exception {
        Config c = admin.describeConfigs(List.of(res)).all().get().get(res);
        Map<String, Object> out = new TreeMap<>();
        for (ConfigEntry e : c.entries()) {
            out.put(e.name(), Json.obj("value", e.value(), "source", e.source().name(),
                    "read_only", e.isReadOnly(), "sensitive", e.isSensitive(), "type", e.type().name()));
        }
        return out;
    }

    static KafkaConsumer<byte[], byte[]> consumer(String reset) {
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, reset);
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        return new KafkaConsumer<>(cp);
    }
}
