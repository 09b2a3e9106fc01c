// Apache Kafka's Java consumer with group.protocol=consumer (KIP-848) as one member of a group
// whose other member is another client, for tests/compat/test_consumer_protocol.py.
// It waits until the group is stable with <members> members sharing all <partitions>
// partitions, then produces <records> records (record i, key "k<i>", to partition i mod
// <partitions>), reads those of its own partitions, commits, and prints what it read and what
// the Java Admin client shows of the group (describeConsumerGroups, listGroups with a type
// filter, and with a type and a state filter) as name=value lines.
// Usage: ConsumerProtocol <bootstrap> <topic> <group> <partitions> <records> <members>
//        ConsumerProtocol describe <bootstrap> <group>   (only what describeConsumerGroups shows,
//        or error=<the exception's class>)

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.MemberAssignment;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class ConsumerProtocol {
    static final String CLIENT_ID = "java-member";

    public static void main(String[] args) throws Exception {
        if (args[0].equals("describe")) {
            Properties a = new Properties();
            a.put("bootstrap.servers", args[1]);
            try (Admin admin = Admin.create(a)) {
                printDescription(describe(admin, args[2]));
            } catch (ExecutionException e) {
                System.out.println("error=" + e.getCause().getClass().getSimpleName());
            }
            System.out.println("done=true");
            return;
        }
        String bootstrap = args[0];
        String topic = args[1];
        String group = args[2];
        int partitions = Integer.parseInt(args[3]);
        int records = Integer.parseInt(args[4]);
        int members = Integer.parseInt(args[5]);

        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", group);
        c.put("group.protocol", "consumer");
        c.put("client.id", CLIENT_ID);
        c.put("enable.auto.commit", "false");
        c.put("auto.offset.reset", "earliest");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        Properties a = new Properties();
        a.put("bootstrap.servers", bootstrap);

        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c);
                Admin admin = Admin.create(a)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 40_000;
            ConsumerGroupDescription stable = null;
            while (stable == null) {
                if (System.currentTimeMillis() > deadline) {
                    System.out.println("error=the group did not become stable with " + members
                            + " members: " + describe(admin, group));
                    return;
                }
                consumer.poll(Duration.ofMillis(200));
                ConsumerGroupDescription d = describe(admin, group);
                if (isStable(d, members, partitions, mine(consumer))) {
                    stable = d;
                }
            }
            Set<Integer> mine = mine(consumer);
            System.out.println("assigned=" + joined(mine));

            Properties p = new Properties();
            p.put("bootstrap.servers", bootstrap);
            p.put("key.serializer", StringSerializer.class.getName());
            p.put("value.serializer", StringSerializer.class.getName());
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
                for (int i = 0; i < records; i++) {
                    producer.send(new ProducerRecord<>(topic, i % partitions, "k" + i, "v" + i));
                }
                producer.flush();
            }
            int expected = 0;
            for (int i = 0; i < records; i++) {
                if (mine.contains(i % partitions)) {
                    expected++;
                }
            }
            List<String> keys = new ArrayList<>();
            deadline = System.currentTimeMillis() + 30_000;
            while (keys.size() < expected && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    keys.add(r.key());
                }
            }
            consumer.commitSync();
            System.out.println("keys=" + String.join(",", keys));

            printDescription(describe(admin, group));

            Collection<GroupListing> consumerGroups =
                    admin.listGroups(ListGroupsOptions.forConsumerGroups()).all().get();
            for (GroupListing g : consumerGroups) {
                if (g.groupId().equals(group)) {
                    System.out.println("list.type=" + g.type().map(Object::toString).orElse("none"));
                    System.out.println("list.protocol=" + g.protocol());
                    System.out.println("list.state="
                            + g.groupState().map(Object::toString).orElse("none"));
                }
            }
            Collection<GroupListing> classic = admin.listGroups(
                    new ListGroupsOptions().withTypes(Set.of(GroupType.CLASSIC))).all().get();
            System.out.println("listClassic.has=" + classic.stream()
                    .anyMatch(g -> g.groupId().equals(group)));
            Collection<GroupListing> stableConsumer = admin.listGroups(
                    new ListGroupsOptions().withTypes(Set.of(GroupType.CONSUMER))
                            .inGroupStates(Set.of(GroupState.STABLE))).all().get();
            System.out.println("listStableConsumer.has=" + stableConsumer.stream()
                    .anyMatch(g -> g.groupId().equals(group)));
        }
        System.out.println("done=true");
    }

    static void printDescription(ConsumerGroupDescription d) {
        System.out.println("describe.type=" + d.type());
        System.out.println("describe.state=" + d.groupState());
        System.out.println("describe.assignor=" + d.partitionAssignor());
        System.out.println("describe.simple=" + d.isSimpleConsumerGroup());
        System.out.println("describe.members=" + d.members().size());
        System.out.println("describe.epochs=" + d.groupEpoch().isPresent() + ","
                + d.targetAssignmentEpoch().isPresent() + ","
                + d.groupEpoch().equals(d.targetAssignmentEpoch()));
        for (MemberDescription m : d.members()) {
            String at = "member." + m.clientId();
            System.out.println(at + ".assignment=" + joined(partitionsOf(m.assignment())));
            System.out.println(at + ".target=" + m.targetAssignment()
                    .map(t -> joined(partitionsOf(t))).orElse("none"));
            System.out.println(at + ".epoch=" + m.memberEpoch()
                    .map(e -> e > 0 ? "positive" : "" + e).orElse("none"));
            System.out.println(at + ".upgraded=" + m.upgraded().map(Object::toString)
                    .orElse("none"));
            System.out.println(at + ".host=" + m.host());
            System.out.println(at + ".idLength=" + m.consumerId().length());
        }
    }

    static ConsumerGroupDescription describe(Admin admin, String group) throws Exception {
        return admin.describeConsumerGroups(List.of(group)).all().get().get(group);
    }

    // Stable, with `members` members whose assignments cover all partitions once, ours among them.
    static boolean isStable(
            ConsumerGroupDescription d, int members, int partitions, Set<Integer> mine) {
        if (d.groupState() != GroupState.STABLE || d.members().size() != members || mine.isEmpty()) {
            return false;
        }
        List<Integer> all = new ArrayList<>();
        boolean mineSeen = false;
        for (MemberDescription m : d.members()) {
            Set<Integer> theirs = partitionsOf(m.assignment());
            if (theirs.isEmpty()) {
                return false;
            }
            mineSeen |= m.clientId().equals(CLIENT_ID) && theirs.equals(mine);
            all.addAll(theirs);
        }
        return mineSeen && all.size() == partitions && new TreeSet<>(all).size() == partitions;
    }

    static Set<Integer> mine(KafkaConsumer<String, String> consumer) {
        return consumer.assignment().stream().map(TopicPartition::partition)
                .collect(Collectors.toCollection(TreeSet::new));
    }

    static Set<Integer> partitionsOf(MemberAssignment assignment) {
        return assignment.topicPartitions().stream().map(TopicPartition::partition)
                .collect(Collectors.toCollection(TreeSet::new));
    }

    static String joined(Set<Integer> partitions) {
        return partitions.stream().map(String::valueOf).collect(Collectors.joining(","));
    }
}
