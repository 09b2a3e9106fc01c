// Apache Kafka's Java producer sending one record that the broker refuses inside its batch,
// for tests/broker/test_produce_record_errors.py: prints what the application sees as
// "error=<exception class>: <message>" (or "offset=<n>" if the record was accepted).
// Usage: ProduceRecordError <bootstrap> <topic> keyless|old-timestamp

import java.util.Properties;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.StringSerializer;

public final class ProduceRecordError {
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("delivery.timeout.ms", "30000");
        p.put("request.timeout.ms", "10000");
        String topic = args[1];
        long dayAgo = System.currentTimeMillis() - 24L * 3600 * 1000;
        ProducerRecord<String, String> record = switch (args[2]) {
            case "keyless" -> new ProducerRecord<>(topic, 0, null, "no key");
            case "old-timestamp" -> new ProducerRecord<>(topic, 0, dayAgo, "k", "a day old");
            default -> throw new IllegalArgumentException("unknown case " + args[2]);
        };
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            RecordMetadata sent = producer.send(record).get();
            System.out.println("offset=" + sent.offset());
        } catch (ExecutionException e) {
            Throwable cause = e.getCause();
            System.out.println("error=" + cause.getClass().getName() + ": " + cause.getMessage());
        }
    }
}
