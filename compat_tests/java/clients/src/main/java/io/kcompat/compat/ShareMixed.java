package io.kcompat.compat;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.ShareMemberDescription;
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.GroupIdNotFoundException;

/**
 * The Java half of a share group shared with other clients (compat_tests/java/
 * test_share_mixed_clients.py runs confluent-kafka ShareConsumers in the same group).
 *
 * Usage: ShareMixed BOOTSTRAP TOPIC GROUP CONSUMERS GROUP_MEMBERS MAX_WAIT_MS
 *
 * Starts CONSUMERS KafkaShareConsumers (threads, client ids java-0..; explicit acknowledgement)
 * subscribed to TOPIC in GROUP, then describes GROUP with the Admin until it has GROUP_MEMBERS
 * members, each with a partition assigned (or 20 s passed), and prints "group_ready". The
 * consumers poll until stdin is closed (or MAX_WAIT_MS), then close; last the Admin lists the
 * group's share-partition start offsets. Records carry a decimal value i; the decision is
 * {@link #decide} (the same as the "modulo-limit" policy of compat_tests/_share_member.py).
 * Consumer 0 sends its acknowledgements with commitSync() (ShareAcknowledge), the others on
 * their next poll (ShareFetch) and in close(). Lines (wall-clock ms):
 *   {"event":"group_ready","ready","members":[{client_id,partitions}],"coordinator"}
 *   {"event":"delivered","consumer","partition","offset","key","value","delivery_count","ack","ms"}
 *   {"event":"ack_callback","consumer","offsets":{"p":[offsets]},"error","ms"}
 *   {"event":"committed","consumer","errors":[...]}
 *   {"event":"closed","consumer"} {"event":"offsets","offsets":{"p<n>":{start,lag}}}
 *   {"event":"failed","stage","error"}
 */
public final class ShareMixed {
    private static final long READY_WAIT_MS = 20_000;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        String group = args[2];
        int consumers = Integer.parseInt(args[3]);
        int groupMembers = Integer.parseInt(args[4]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[5]);
        AtomicBoolean stop = new AtomicBoolean(false);
        List<Thread> threads = new ArrayList<>();
        for (int c = 0; c < consumers; c++) {
            final int id = c;
            Thread t = new Thread(() -> runConsumer(bootstrap, topic, group, id, stop, deadline),
                    "java-" + c);
            t.start();
            threads.add(t);
        }
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(props)) {
            awaitMembers(admin, group, groupMembers);
            while (System.in.read() >= 0 && System.currentTimeMillis() < deadline) {
                // the test closes our stdin when it has seen everything it waits for
            }
            stop.set(true);
            for (Thread t : threads) t.join();
            Json.emit("event", "offsets", "offsets", startOffsets(admin, group));
        } catch (Exception e) {
            Json.emit("event", "failed", "stage", "admin", "error", Errs.describe(e));
            stop.set(true);
            for (Thread t : threads) t.join();
            System.exit(2);
        }
        System.exit(0);
    }

    /** i % 10 == 3: RELEASE on the first delivery; 7: REJECT; 9: always RELEASE; else ACCEPT. */
    static AcknowledgeType decide(String value, int deliveryCount) {
        int i = Integer.parseInt(value);
        if (i % 10 == 7) return AcknowledgeType.REJECT;
        if (i % 10 == 9 || (i % 10 == 3 && deliveryCount == 1)) return AcknowledgeType.RELEASE;
        return AcknowledgeType.ACCEPT;
    }

    static void awaitMembers(Admin admin, String group, int want) throws Exception {
        long until = System.currentTimeMillis() + READY_WAIT_MS;
        while (true) {
            ShareGroupDescription d = describe(admin, group);
            List<Object> members = new ArrayList<>();
            boolean assigned = true;
            for (ShareMemberDescription m : d == null ? List.<ShareMemberDescription>of()
                    : d.members()) {
                Set<TopicPartition> tps = m.assignment().topicPartitions();
                List<Integer> parts = new ArrayList<>();
                for (TopicPartition tp : tps) parts.add(tp.partition());
                parts.sort(null);
                members.add(Json.obj("client_id", m.clientId(), "partitions", parts));
                assigned &= !parts.isEmpty();
            }
            boolean ready = members.size() >= want && assigned;
            if (ready || System.currentTimeMillis() > until) {
                Json.emit("event", "group_ready", "ready", ready, "members", members,
                        "coordinator", d == null || d.coordinator() == null ? null
                                : d.coordinator().id());
                return;
            }
            Thread.sleep(100);
        }
    }

    /** The group's description; null while it does not exist (Kafka: GROUP_ID_NOT_FOUND
     *  until the first member's heartbeat created it). */
    static ShareGroupDescription describe(Admin admin, String group) throws Exception {
        try {
            return admin.describeShareGroups(List.of(group)).describedGroups().get(group).get();
        } catch (ExecutionException e) {
            if (e.getCause() instanceof GroupIdNotFoundException) return null;
            throw e;
        }
    }

    static void runConsumer(String bootstrap, String topic, String group, int id,
                            AtomicBoolean stop, long deadline) {
        KafkaShareConsumer<String, String> consumer =
                ShareScenario.shareConsumer(bootstrap, group, "java-" + id);
        consumer.setAcknowledgementCommitCallback((offsets, error) -> {
            Map<String, Object> byPartition = new TreeMap<>();
            offsets.forEach((tip, offs) -> byPartition.put(
                    String.valueOf(tip.partition()), new ArrayList<>(offs)));
            Json.emit("event", "ack_callback", "consumer", id, "offsets", byPartition,
                    "error", error == null ? null : Errs.describe(error),
                    "ms", System.currentTimeMillis());
        });
        try {
            consumer.subscribe(List.of(topic));
            while (!stop.get() && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> r : batch) {
                    int dc = r.deliveryCount().map(Short::intValue).orElse(-1);
                    AcknowledgeType ack = decide(r.value(), dc);
                    Json.emit("event", "delivered", "consumer", id, "partition", r.partition(),
                            "offset", r.offset(), "key", r.key(), "value", r.value(),
                            "delivery_count", dc, "ack", ack.name(),
                            "ms", System.currentTimeMillis());
                    consumer.acknowledge(r, ack);
                }
                if (id == 0 && !batch.isEmpty()) {
                    Map<TopicIdPartition, Optional<KafkaException>> res = consumer.commitSync();
                    List<Object> errors = new ArrayList<>();
                    res.forEach((tip, err) -> err.ifPresent(e -> errors.add(Json.obj(
                            "partition", tip.partition(), "error", Errs.describe(e)))));
                    Json.emit("event", "committed", "consumer", id, "errors", errors);
                }
            }
        } catch (Exception e) {
            Json.emit("event", "failed", "stage", "java-" + id, "error", Errs.describe(e));
        } finally {
            consumer.close(Duration.ofSeconds(10));
            Json.emit("event", "closed", "consumer", id);
        }
    }

    /** "p&lt;n&gt;": {start, lag} of every share-partition of the group; null if absent. */
    static Object startOffsets(Admin admin, String group) throws Exception {
        Map<TopicPartition, SharePartitionOffsetInfo> got = admin.listShareGroupOffsets(
                Map.of(group, new ListShareGroupOffsetsSpec())).partitionsToOffsetInfo(group).get();
        Map<String, Object> out = new TreeMap<>();
        got.forEach((tp, info) -> out.put("p" + tp.partition(), info == null ? null
                : Json.obj("start", info.startOffset(), "lag", info.lag().orElse(null))));
        return out;
    }
}
