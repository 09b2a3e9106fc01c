// Reads __consumer_offsets from its beginning to its end and decodes every record with Kafka's
// own group coordinator serde (GroupCoordinatorRecordSerde, from kafka-group-coordinator), for
// tests/compat/test_consumer_protocol.py: prints, in log order per partition, each record of
// group <group> as "record.<n>=<key type> <value type>@<version>" (or "<key type> tombstone"),
// its fields as "fields.<n>=<value's toString>", and "undecodable.<n>=<error>" for a record the
// serde refuses.
// Usage: GroupRecords <bootstrap> <group>

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.coordinator.common.runtime.CoordinatorRecord;
import org.apache.kafka.coordinator.group.GroupCoordinatorRecordSerde;

public final class GroupRecords {
    public static void main(String[] args) throws Exception {
        String group = args[1];
        Properties c = new Properties();
        c.put("bootstrap.servers", args[0]);
        c.put("key.deserializer", ByteArrayDeserializer.class.getName());
        c.put("value.deserializer", ByteArrayDeserializer.class.getName());
        c.put("enable.auto.commit", "false");
        c.put("exclude.internal.topics", "false");
        GroupCoordinatorRecordSerde serde = new GroupCoordinatorRecordSerde();
        int n = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c)) {
            List<TopicPartition> partitions = consumer.partitionsFor("__consumer_offsets").stream()
                    .map(p -> new TopicPartition(p.topic(), p.partition()))
                    .collect(Collectors.toList());
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            Map<TopicPartition, Long> ends = consumer.endOffsets(partitions);
            long deadline = System.currentTimeMillis() + 30_000;
            while (!ends.entrySet().stream().allMatch(e -> consumer.position(e.getKey()) >= e.getValue())) {
                if (System.currentTimeMillis() > deadline) {
                    System.out.println("error=__consumer_offsets not read to its end in 30 s");
                    return;
                }
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    CoordinatorRecord record;
                    try {
                        record = serde.deserialize(ByteBuffer.wrap(r.key()),
                                r.value() == null ? null : ByteBuffer.wrap(r.value()));
                    } catch (RuntimeException e) {
                        System.out.println("undecodable." + n++ + "=" + e);
                        continue;
                    }
                    String key = record.key().toString();
                    if (!key.contains("roupId='" + group + "'") && !key.contains("group='" + group + "'")) {
                        continue;
                    }
                    String keyType = record.key().getClass().getSimpleName();
                    if (record.value() == null) {
                        System.out.println("record." + n + "=" + keyType + " tombstone");
                    } else {
                        System.out.println("record." + n + "=" + keyType + " "
                                + record.value().message().getClass().getSimpleName()
                                + "@" + record.value().version());
                        System.out.println("fields." + n + "=" + record.value().message());
                    }
                    n++;
                }
            }
        }
        System.out.println("records=" + n);
        System.out.println("done=true");
    }
}
