package io.kcompat.compat;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;

/**
 * What the Java Admin client reports about one consumer group: describeConsumerGroups
 * (type, state, assignor, epochs; per member its epoch, the sizes of its assignment and
 * target assignment, whether it was upgraded from the classic protocol), listGroups with the
 * consumer type filter, and listConsumerGroupOffsets.
 * Usage: DescribeConsumerGroup BOOTSTRAP GROUP. Prints one JSON line {"described": {...}},
 * or {"error": ...} with Kafka's error name.
 */
public final class DescribeConsumerGroup {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        String group = args[1];
        try (Admin admin = Admin.create(props)) {
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group))
                    .describedGroups().get(group).get();
            List<MemberDescription> sorted = new ArrayList<>(d.members());
            sorted.sort(Comparator.comparing(MemberDescription::consumerId));
            List<Object> members = new ArrayList<>();
            for (MemberDescription m : sorted) {
                members.add(Json.obj(
                        "id", m.consumerId(),
                        "instance", m.groupInstanceId().orElse(null),
                        "client", m.clientId(),
                        "epoch", m.memberEpoch().orElse(null),
                        "assigned", m.assignment().topicPartitions().size(),
                        "target", m.targetAssignment().map(a -> a.topicPartitions().size()).orElse(null),
                        "upgraded", m.upgraded().orElse(null)));
            }
            List<Object> listed = new ArrayList<>();
            for (GroupListing g : admin.listGroups(new ListGroupsOptions().withTypes(Set.of(GroupType.CONSUMER)))
                    .all().get()) {
                if (g.groupId().equals(group)) {
                    listed.add(Json.obj("type", String.valueOf(g.type().orElse(null)),
                            "state", String.valueOf(g.groupState().orElse(null)),
                            "protocol", g.protocol(), "simple", g.isSimpleConsumerGroup()));
                }
            }
            Map<String, Object> offsets = new TreeMap<>();
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata().get().entrySet()) {
                offsets.put(e.getKey().toString(), e.getValue() == null ? null : e.getValue().offset());
            }
            Json.emit("described", Json.obj(
                    "type", String.valueOf(d.type()),
                    "state", String.valueOf(d.groupState()),
                    "simple", d.isSimpleConsumerGroup(),
                    "assignor", d.partitionAssignor(),
                    "group_epoch", d.groupEpoch().orElse(null),
                    "assignment_epoch", d.targetAssignmentEpoch().orElse(null),
                    "members", members,
                    "listed", listed,
                    "offsets", offsets));
        } catch (Exception e) {
            Json.emit("error", Errs.describe(e));
        }
    }
}
