package io.kcompat.compat;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.ShareMemberDescription;
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The share-group admin APIs (KIP-932: DescribeShareGroupOffsets, AlterShareGroupOffsets,
 * DeleteShareGroupOffsets, ShareGroupDescribe, ListGroups with type "share", DeleteGroups)
 * seen through the Java Admin client, around KafkaShareConsumers whose deliveries they move.
 *
 * Usage: ShareAdmin BOOTSTRAP TOPIC REPLICATION GROUP KEPT_GROUP
 *
 * TOPIC has 2 partitions. Both groups get share.auto.offset.reset=earliest. 10 records go to
 * partition 0; one share consumer per group ACCEPTs all 10 and closes. Then 5 more records go
 * to each partition, so each group starts at 10 on p0 and 0 on p1 with a lag of 5 on both.
 * KEPT_GROUP is left so (for kafka-share-groups.sh); GROUP goes through the admin steps: list
 * offsets, describe, list groups, alter p0 back to 0 (a new consumer then gets all 20 records,
 * each at delivery count 1), alter/delete offsets/delete the group while that consumer is a
 * member, then after it closed delete the topic's offsets, alter them again, and delete the
 * group. Each step prints {"step","ms","result"}; a failure's result is Kafka's error name
 * and code and the exception's class. The last line is {"observations":{step: result}}.
 */
public final class ShareAdmin {
    static final Map<String, Object> OBS = new LinkedHashMap<>();
    static final long CONSUME_WAIT_MS = 20_000;
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
        String topic = args[1];
        short replication = Short.parseShort(args[2]);
        String group = args[3];
        String kept = args[4];
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        ap.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        ap.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "15000");
        try (Admin admin = Admin.create(ap)) {
            step("setup", () -> setup(admin, topic, replication, List.of(group, kept)));
            step("produce_p0", () -> produce(topic, 0, 0, 10));
            step("consume_p0", () -> consumeInParallel(topic, List.of(group, kept), 10));
            step("produce_both", () -> {
                produce(topic, 0, 10, 5);
                return produce(topic, 1, 15, 5);
            });
            step("offsets_after_p0", () -> offsets(admin, group));
            step("offsets_of_kept", () -> offsets(admin, kept));
            step("offsets_p1_only", () -> offsets(admin, group, List.of(p1)));
            step("describe_empty", () -> describe(admin, group));
            step("describe_unknown", () -> describe(admin, group + "-nope"));
            step("offsets_unknown_group", () -> offsets(admin, group + "-nope"));
            step("list_share_groups", () -> listed(admin, ListGroupsOptions.forShareGroups(),
                    group, kept));
            step("list_consumer_groups", () -> listed(admin, ListGroupsOptions.forConsumerGroups(),
                    group, kept));
            step("alter_unknown_topic", () -> alter(admin, group,
                    Map.of(new TopicPartition(topic + "-nope", 0), 0L)));
            step("alter_unknown_partition", () -> alter(admin, group,
                    Map.of(new TopicPartition(topic, 7), 0L)));
            step("alter_negative", () -> alter(admin, group, Map.of(p1, -1L)));
            step("alter_unknown_group", () -> alter(admin, group + "-nope", Map.of(p0, 0L)));
            step("alter_p0_to_0", () -> alter(admin, group, Map.of(p0, 0L)));
            step("offsets_after_alter", () -> offsets(admin, group));
            try (KafkaShareConsumer<String, String> member = ShareScenario.shareConsumer(
                    bootstrap, group, "admin-member")) {
                member.subscribe(List.of(topic));
                step("consume_after_alter", () -> consume(member, 20));
                step("describe_with_member", () -> describe(admin, group));
                step("alter_with_member", () -> alter(admin, group, Map.of(p1, 0L)));
                step("delete_offsets_with_member", () -> deleteOffsets(admin, group, Set.of(topic)));
                step("delete_group_with_member", () -> deleteGroup(admin, group));
            }
            step("offsets_after_member", () -> offsets(admin, group));
            step("describe_after_member", () -> describe(admin, group));
            step("delete_offsets_unknown_topic", () -> deleteOffsets(admin, group,
                    Set.of(topic + "-nope")));
            step("delete_offsets", () -> deleteOffsets(admin, group, Set.of(topic)));
            step("offsets_after_delete", () -> offsets(admin, group));
            step("alter_after_delete", () -> alter(admin, group, Map.of(p0, 3L, p1, 2L)));
            step("offsets_after_realter", () -> offsets(admin, group));
            step("alter_beyond_end", () -> alter(admin, group, Map.of(p1, 100L)));
            step("offsets_after_beyond_end", () -> offsets(admin, group));
            step("delete_group", () -> deleteGroup(admin, group));
            step("describe_deleted", () -> describe(admin, group));
            step("offsets_deleted", () -> offsets(admin, group));
            step("list_after_delete", () -> listed(admin, ListGroupsOptions.forShareGroups(),
                    group, kept));
            step("delete_altered_unknown_group", () -> deleteGroup(admin, group + "-nope"));
            step("delete_unknown_group", () -> deleteGroup(admin, group + "-never"));
            step("describe_unknown_after", () -> describe(admin, group + "-never"));
        }
        Json.emit("observations", OBS);
    }

    static Object setup(Admin admin, String topic, short replication, List<String> groups)
            throws Exception {
        admin.createTopics(List.of(new NewTopic(topic, 2, replication))).all().get();
        Map<ConfigResource, Collection<AlterConfigOp>> ops = new LinkedHashMap<>();
        for (String g : groups) {
            ops.put(new ConfigResource(ConfigResource.Type.GROUP, g), List.of(new AlterConfigOp(
                    new ConfigEntry("share.auto.offset.reset", "earliest"),
                    AlterConfigOp.OpType.SET)));
        }
        admin.incrementalAlterConfigs(ops).all().get();
        return null;
    }

    /** Records v&lt;first&gt;.. to one partition; their offsets. */
    static Object produce(String topic, int partition, int first, int n) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        List<Object> offsets = new ArrayList<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            List<Future<org.apache.kafka.clients.producer.RecordMetadata>> sends = new ArrayList<>();
            for (int i = first; i < first + n; i++) {
                sends.add(producer.send(new ProducerRecord<>(topic, partition, "k" + i, "v" + i)));
            }
            for (var f : sends) offsets.add(f.get().offset());
        }
        return offsets;
    }

    /** One consumer per group at once, each ACCEPTing until it has n records, then closed. */
    static Object consumeInParallel(String topic, List<String> groups, int n) throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(groups.size());
        try {
            Map<String, Future<Object>> runs = new LinkedHashMap<>();
            for (String g : groups) {
                runs.put(g, pool.submit(() -> {
                    try (KafkaShareConsumer<String, String> c = ShareScenario.shareConsumer(
                            bootstrap, g, "admin-" + g)) {
                        c.subscribe(List.of(topic));
                        return consume(c, n);
                    }
                }));
            }
            List<Object> out = new ArrayList<>();
            for (Future<Object> f : runs.values()) out.add(f.get());
            return out;
        } finally {
            pool.shutdown();
        }
    }

    /** Poll, ACCEPT and commitSync until n records came; [partition, offset, delivery count]. */
    static Object consume(KafkaShareConsumer<String, String> c, int n) {
        List<List<Object>> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + CONSUME_WAIT_MS;
        while (got.size() < n && System.currentTimeMillis() < deadline) {
            var batch = c.poll(Duration.ofMillis(200));
            for (ConsumerRecord<String, String> r : batch) {
                c.acknowledge(r, AcknowledgeType.ACCEPT);
                got.add(List.of(r.partition(), r.offset(),
                        r.deliveryCount().map(Short::intValue).orElse(-1)));
            }
            if (!batch.isEmpty()) {
                var errors = new ArrayList<Object>();
                c.commitSync().forEach((tip, err) -> err.ifPresent(e -> errors.add(Json.obj(
                        "partition", tip.partition(), "error", Errs.describe(e).get("error")))));
                if (!errors.isEmpty()) return Json.obj("ack_errors", errors);
            }
        }
        got.sort((a, b) -> a.toString().compareTo(b.toString()));
        return got;
    }

    static Object offsets(Admin admin, String group) throws Exception {
        return offsets(admin, group, null);
    }

    /** "p&lt;n&gt;": {start, lag, leader_epoch}, sorted by partition; null means absent. */
    static Object offsets(Admin admin, String group, Collection<TopicPartition> only)
            throws Exception {
        ListShareGroupOffsetsSpec spec = new ListShareGroupOffsetsSpec();
        if (only != null) spec.topicPartitions(only);
        Map<TopicPartition, SharePartitionOffsetInfo> got = admin.listShareGroupOffsets(
                Map.of(group, spec)).partitionsToOffsetInfo(group).get();
        Map<String, Object> out = new TreeMap<>();
        for (var e : got.entrySet()) {
            SharePartitionOffsetInfo info = e.getValue();
            out.put(e.getKey().topic().endsWith("-nope") ? "nope" : "p" + e.getKey().partition(),
                    info == null ? null : Json.obj("start", info.startOffset(),
                            "lag", info.lag().orElse(null),
                            "leader_epoch", info.leaderEpoch().orElse(null)));
        }
        return out;
    }

    static Object describe(Admin admin, String group) throws Exception {
        ShareGroupDescription d = admin.describeShareGroups(List.of(group)).describedGroups()
                .get(group).get();
        List<Object> members = new ArrayList<>();
        for (ShareMemberDescription m : d.members()) {
            List<Object> parts = new ArrayList<>();
            for (TopicPartition tp : m.assignment().topicPartitions()) parts.add(tp.partition());
            parts.sort(null);
            members.add(Json.obj("client_id", m.clientId(), "partitions", parts,
                    "member_epoch", m.memberEpoch()));
        }
        return Json.obj("state", d.groupState().name(), "members", members,
                "group_epoch", d.groupEpoch(), "assignment_epoch", d.targetAssignmentEpoch(),
                "coordinator", d.coordinator() != null && d.coordinator().id() >= 0);
    }

    /** Our groups in a ListGroups answer: id -> [type, state, protocol]. */
    static Object listed(Admin admin, ListGroupsOptions options, String... ours) throws Exception {
        Collection<GroupListing> all = admin.listGroups(options).all().get();
        Map<String, Object> out = new TreeMap<>();
        for (GroupListing g : all) {
            for (String name : ours) {
                if (g.groupId().equals(name)) {
                    out.put(name.equals(ours[0]) ? "group" : "kept", List.of(
                            g.type().map(Enum::name).orElse("absent"),
                            g.groupState().map(Enum::name).orElse("absent"),
                            String.valueOf(g.protocol())));
                }
            }
        }
        return out;
    }

    static Object alter(Admin admin, String group, Map<TopicPartition, Long> offsets)
            throws Exception {
        var result = admin.alterShareGroupOffsets(group, offsets);
        Map<String, Object> out = new TreeMap<>();
        for (TopicPartition tp : offsets.keySet()) {
            out.put(tp.topic().endsWith("-nope") ? "nope" : "p" + tp.partition(),
                    outcome(() -> result.partitionResult(tp).get()));
        }
        out.put("all", outcome(() -> result.all().get()));
        return out;
    }

    static Object deleteOffsets(Admin admin, String group, Set<String> topics) throws Exception {
        var result = admin.deleteShareGroupOffsets(group, topics);
        Map<String, Object> out = new TreeMap<>();
        for (String t : topics) {
            out.put(t.endsWith("-nope") ? "nope" : "topic", outcome(() -> result.topicResult(t).get()));
        }
        out.put("all", outcome(() -> result.all().get()));
        return out;
    }

    static Object deleteGroup(Admin admin, String group) throws Exception {
        admin.deleteShareGroups(List.of(group)).all().get();
        return null;
    }

    /** "ok", or the error name and exception class of a per-item future. */
    static Object outcome(Callable<Object> f) {
        try {
            f.call();
            return "ok";
        } catch (Throwable t) {
            Map<String, Object> d = Errs.describe(t);
            return List.of(d.get("error"), d.get("exception"));
        }
    }
}
