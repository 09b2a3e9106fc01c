// Kafka Streams' word count, for bench/streams_eos.py and its tests: lines of words from the input topic, each word's running count (a Long) to
// the output topic, keyed by the word. Runs until SIGTERM (the shutdown hook closes the
// application). Prints "state=<STATE>" on each state change and "thread.error=<exception>"
// when a stream thread dies (it is replaced), as "name=value" lines on stdout. Usage:
//   StreamsWordCount <bootstrap> <application.id> <input> <output> <state.dir> <replicas> <cache>
//                    [<processing.guarantee>]
// <cache>: statestore.cache.max.bytes; 0 sends every count on at once (no cache folding
// updates together), so each word's counts are 1, 2, 3, ... in the output.
// <processing.guarantee>: exactly_once_v2 (the default) or at_least_once.

import java.time.Duration;
import java.util.Arrays;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Produced;

public final class StreamsWordCount {
    static synchronized void out(String name, Object value) {
        System.out.println(name + "=" + value);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        p.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        p.put(
                StreamsConfig.PROCESSING_GUARANTEE_CONFIG,
                args.length > 7 ? args[7] : StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, Integer.parseInt(args[5]));
        p.put(StreamsConfig.topicPrefix("min.insync.replicas"), args[5].equals("1") ? "1" : "2");
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, Long.parseLong(args[6]));
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        // A lost broker is noticed and a rebalance settles within seconds.
        p.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 10000);
        p.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), 1000);

        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(args[2])
                .flatMapValues(line -> Arrays.asList(line.split(" ")))
                .groupBy((key, word) -> word)
                .count()
                .toStream()
                .to(args[3], Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        streams.setStateListener((now, before) -> out("state", now));
        streams.setUncaughtExceptionHandler(e -> {
            out("thread.error", e.getClass().getName() + ": " + e.getMessage());
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        CountDownLatch closed = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(20));
            out("closed", "true");
            closed.countDown();
        }));
        streams.start();
        closed.await();
    }
}
