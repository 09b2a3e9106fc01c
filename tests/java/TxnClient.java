// Apache Kafka's Java client (kafka-clients) doing transactions, for tests/txn: one scenario
// group per run, its observations printed as "name=value" lines on stdout for the Python
// test to check (this program asserts nothing itself). Usage:
//   TxnClient <bootstrap> commit-abort <topic>
//   TxnClient <bootstrap> consume-transform-produce <input> <output> <group>
//   TxnClient <bootstrap> fencing <topic>
// Every topic has PARTITIONS partitions, created by the test.

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class TxnClient {
    static final int PARTITIONS = 2;
    static final Duration WAIT = Duration.ofSeconds(30);

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        switch (args[1]) {
            case "commit-abort" -> commitAbort(bootstrap, args[2]);
            case "consume-transform-produce" -> consumeTransformProduce(
                    bootstrap, args[2], args[3], args[4]);
            case "fencing" -> fencing(bootstrap, args[2]);
            default -> throw new IllegalArgumentException("unknown scenario " + args[1]);
        }
    }

    static void out(String name, Object value) {
        System.out.println(name + "=" + value);
        System.out.flush();
    }

    static KafkaProducer<String, String> transactional(
            String bootstrap, String transactionalId, int timeoutMs) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", transactionalId);
        p.put("transaction.timeout.ms", Integer.toString(timeoutMs));
        p.put("linger.ms", "5");
        p.put("max.block.ms", "60000");
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        KafkaProducer<String, String> producer = new KafkaProducer<>(p);
        producer.initTransactions();
        return producer;
    }

    static KafkaConsumer<String, String> consumer(
            String bootstrap, String group, String isolation) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        if (group != null) {
            p.put("group.id", group);
        }
        p.put("isolation.level", isolation);
        p.put("enable.auto.commit", "false");
        p.put("auto.offset.reset", "earliest");
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        return new KafkaConsumer<>(p);
    }

    static List<TopicPartition> partitions(String topic) {
        List<TopicPartition> tps = new ArrayList<>();
        for (int i = 0; i < PARTITIONS; i++) {
            tps.add(new TopicPartition(topic, i));
        }
        return tps;
    }

    /** Sends values round-robin over the partitions, waiting for each to be written. */
    static void send(KafkaProducer<String, String> producer, String topic, String... values)
            throws Exception {
        for (int i = 0; i < values.length; i++) {
            producer.send(new ProducerRecord<>(topic, i % PARTITIONS, null, values[i]))
                    .get(30, TimeUnit.SECONDS);
        }
    }

    /**
     * Everything a new consumer at this isolation level reads of the topic, from the start up
     * to the end it is told of (the high watermark, or for read_committed the last stable
     * offset), as "partition:value" items in partition then offset order.
     */
    static String readAll(String bootstrap, String topic, String isolation) {
        try (KafkaConsumer<String, String> c = consumer(bootstrap, null, isolation)) {
            List<TopicPartition> tps = partitions(topic);
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> ends = c.endOffsets(tps, WAIT);
            Map<Integer, List<String>> found = new TreeMap<>();
            long deadline = System.nanoTime() + WAIT.toNanos();
            while (true) {
                boolean done = true;
                for (TopicPartition tp : tps) {
                    done &= c.position(tp, WAIT) >= ends.get(tp);
                }
                if (done) {
                    break;
                }
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("did not reach " + ends + " of " + topic);
                }
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    found.computeIfAbsent(r.partition(), k -> new ArrayList<>()).add(r.value());
                }
            }
            List<String> items = new ArrayList<>();
            found.forEach((p, values) -> values.forEach(v -> items.add(p + ":" + v)));
            return String.join(",", items);
        }
    }

    static String[] values(String prefix, int count) {
        String[] values = new String[count];
        for (int i = 0; i < count; i++) {
            values[i] = prefix + i;
        }
        return values;
    }

    /** A committed, an aborted and an open transaction, as each isolation level reads them. */
    static void commitAbort(String bootstrap, String topic) throws Exception {
        try (KafkaProducer<String, String> p = transactional(bootstrap, "java-ca-" + topic, 60000)) {
            p.beginTransaction();
            send(p, topic, values("a", 4));
            p.commitTransaction();
            p.beginTransaction();
            send(p, topic, values("b", 4));
            p.abortTransaction();
            p.beginTransaction();
            send(p, topic, values("c", 4));
            out("open.read_committed", readAll(bootstrap, topic, "read_committed"));
            out("open.read_uncommitted", readAll(bootstrap, topic, "read_uncommitted"));
            p.commitTransaction();
            out("after.read_committed", readAll(bootstrap, topic, "read_committed"));
            out("after.read_uncommitted", readAll(bootstrap, topic, "read_uncommitted"));
        }
    }

    /**
     * A stream processor's loop: a read_committed member of a group reads the input; each
     * poll's records go upper-cased to the output with the member's positions, in one
     * transaction (sendOffsetsToTransaction). The first round is aborted and read again.
     */
    static void consumeTransformProduce(String bootstrap, String input, String output, String group)
            throws Exception {
        int count = 20;
        Properties plain = new Properties();
        plain.put("bootstrap.servers", bootstrap);
        plain.put("acks", "all");
        plain.put("key.serializer", StringSerializer.class.getName());
        plain.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> p = new KafkaProducer<>(plain)) {
            send(p, input, values("v", count));
        }
        int processed = 0;
        int aborted = 0;
        int rounds = 0;
        try (KafkaProducer<String, String> p = transactional(bootstrap, "java-ctp-" + group, 60000);
                KafkaConsumer<String, String> c = consumer(bootstrap, group, "read_committed")) {
            c.subscribe(Collections.singletonList(input));
            long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
            while (processed < count) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("processed " + processed + " of " + count);
                }
                ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(200));
                if (records.isEmpty()) {
                    continue;
                }
                Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
                Map<TopicPartition, Long> first = new HashMap<>();
                p.beginTransaction();
                for (ConsumerRecord<String, String> r : records) {
                    p.send(new ProducerRecord<>(output, r.partition(), null, r.value().toUpperCase()));
                    TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                    next.put(tp, new OffsetAndMetadata(r.offset() + 1));
                    first.putIfAbsent(tp, r.offset());
                }
                p.sendOffsetsToTransaction(next, c.groupMetadata());
                rounds++;
                if (rounds == 1) {
                    // Written first: an abort drops whatever the producer has not sent yet.
                    p.flush();
                    p.abortTransaction();
                    aborted += records.count();
                    first.forEach(c::seek);
                    continue;
                }
                p.commitTransaction();
                processed += records.count();
            }
            Map<TopicPartition, OffsetAndMetadata> committed =
                    c.committed(new java.util.HashSet<>(partitions(input)), WAIT);
            List<String> offsets = new ArrayList<>();
            for (TopicPartition tp : partitions(input)) {
                OffsetAndMetadata o = committed.get(tp);
                offsets.add(tp.partition() + ":" + (o == null ? -1 : o.offset()));
            }
            out("committed.offsets", String.join(",", offsets));
        }
        out("aborted", aborted);
        out("output.read_committed", readAll(bootstrap, output, "read_committed"));
        out("output.read_uncommitted", readAll(bootstrap, output, "read_uncommitted"));
    }

    static String failure(ThrowingRunnable action) {
        try {
            action.run();
            return "none";
        } catch (KafkaException e) {
            // A plain KafkaException: an error the client has no exception of its own for;
            // its message names the broker's error.
            return e.getClass() == KafkaException.class
                    ? "KafkaException: " + e.getMessage()
                    : e.getClass().getSimpleName();
        } catch (Exception e) {
            Throwable cause = e.getCause() == null ? e : e.getCause();
            return cause.getClass().getSimpleName();
        }
    }

    interface ThrowingRunnable {
        void run() throws Exception;
    }

    /**
     * Zombie fencing: a second producer with the same transactional id fences the first,
     * whose open transaction is aborted; a transaction left open past its
     * transaction.timeout.ms is aborted by the coordinator, its producer fenced; an
     * administrator fences a transactional id; a timeout above the broker's maximum.
     */
    static void fencing(String bootstrap, String topic) throws Exception {
        String id = "java-fence-" + topic;
        KafkaProducer<String, String> old = transactional(bootstrap, id, 60000);
        old.beginTransaction();
        send(old, topic, values("old", 2));
        try (KafkaProducer<String, String> current = transactional(bootstrap, id, 60000)) {
            out("old.commit", failure(old::commitTransaction));
            old.close(Duration.ZERO);
            current.beginTransaction();
            send(current, topic, values("new", 2));
            current.commitTransaction();
        }
        try (KafkaProducer<String, String> slow = transactional(bootstrap, id + "-slow", 1500)) {
            slow.beginTransaction();
            send(slow, topic, values("slow", 2));
            Thread.sleep(4000);
            out("slow.commit", failure(slow::commitTransaction));
        }
        // An administrator fences a transactional id (Admin.fenceProducers, as Kafka Connect
        // does before its exactly-once source tasks start): the open transaction is aborted
        // and its producer fenced.
        try (KafkaProducer<String, String> fenced = transactional(bootstrap, id + "-admin", 60000);
                Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            fenced.beginTransaction();
            send(fenced, topic, values("admin", 2));
            out("admin.fence", failure(() -> admin.fenceProducers(List.of(id + "-admin")).all().get()));
            out("admin.commit", failure(fenced::commitTransaction));
        }
        // A transaction timeout above the broker's transaction.max.timeout.ms (15 minutes).
        out("too.long.init", failure(() -> transactional(bootstrap, id + "-long", 900_001)));
        out("read_committed", readAll(bootstrap, topic, "read_committed"));
        out("read_uncommitted", readAll(bootstrap, topic, "read_uncommitted"));
    }
}
