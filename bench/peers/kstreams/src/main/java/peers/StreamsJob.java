package peers;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.processor.TimestampExtractor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * The Kafka Streams side of make bench-peers: the job of examples/processor. The input is keyed by
 * tenant (one tenant, one partition), so dedup runs on the input's partitions: a FixedKeyProcessor
 * keeps the first sight of each event id in a KeyValueStore (id → time seen); first sights go to
 * the topic OUT-events, and their one-minute event-time counts per tenant (windowed count with a
 * grace period, no repartition: the key is unchanged) go to OUT-minutes as "start\tcount" keyed by
 * tenant, every update of a window a record, the last one its count. exactly_once_v2. A plain
 * consumer (the driver) loads both topics into ClickHouse.
 *
 * <p>Arguments: brokers topic applicationId outputPrefix rocksdb|memory commitMs
 * exactly_once_v2|at_least_once. at_least_once is the run without checkpoints: Kafka Streams
 * cannot stop committing, but without transactions a commit is only a flush and an offset commit.
 */
public final class StreamsJob {
    public static void main(String[] args) throws Exception {
        if (args.length != 7) {
            throw new IllegalArgumentException(
                    "usage: StreamsJob brokers topic applicationId outputPrefix rocksdb|memory commitMs exactly_once_v2|at_least_once");
        }
        String brokers = args[0], topic = args[1], app = args[2], out = args[3];
        boolean rocks = args[4].equals("rocksdb");

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, app);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, args[6]);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 2);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, Long.parseLong(args[5]));
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 64L << 20);
        props.put(StreamsConfig.STATE_DIR_CONFIG, System.getProperty("java.io.tmpdir") + "/peers-kstreams-" + app);
        props.put(StreamsConfig.DEFAULT_TIMESTAMP_EXTRACTOR_CLASS_CONFIG, EventTime.class);
        props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        props.put(StreamsConfig.consumerPrefix("max.poll.records"), 2000);
        // After a kill -9 the dead member keeps its partitions until its session times out (45 s by
        // default): 10 s, the SDK's kafkasource default, so the recovery runs compare like with like.
        props.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 10_000);
        // With five requests in flight, a produce answered CONCURRENT_TRANSACTIONS (the previous
        // commit still completing) leaves the next batches OUT_OF_ORDER_SEQUENCE_NUMBER, retried
        // without end (seen on the kit's Apache Kafka 4.4 broker): one in flight avoids it.
        props.put(StreamsConfig.producerPrefix("max.in.flight.requests.per.connection"), 1);

        StreamsBuilder b = new StreamsBuilder();
        var seen = rocks ? Stores.persistentKeyValueStore("seen") : Stores.inMemoryKeyValueStore("seen");
        b.addStateStore(Stores.keyValueStoreBuilder(seen, Serdes.String(), Serdes.Long()));
        KStream<String, String> in = b.stream(topic, Consumed.with(Serdes.String(), Serdes.String()));
        KStream<String, String> firsts = in.processValues(FirstSight::new, "seen");
        firsts.to(out + "events", Produced.with(Serdes.String(), Serdes.String()));
        var windows = TimeWindows.ofSizeAndGrace(Duration.ofMinutes(1), Duration.ofSeconds(5));
        var counted =
                rocks
                        ? Materialized.<String, Long>as(Stores.persistentTimestampedWindowStore("minutes", Duration.ofHours(1), Duration.ofMinutes(1), false))
                        : Materialized.<String, Long>as(Stores.inMemoryWindowStore("minutes", Duration.ofHours(1), Duration.ofMinutes(1), false));
        firsts.groupByKey(Grouped.with(Serdes.String(), Serdes.String()))
                .windowedBy(windows)
                .count(counted.withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
                .toStream()
                .map((w, n) -> KeyValue.pair(w.key(), w.window().start() + "\t" + n))
                .to(out + "minutes", Produced.with(Serdes.String(), Serdes.String()));

        KafkaStreams streams = new KafkaStreams(b.build(), props);
        CountDownLatch done = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(10));
            done.countDown();
        }));
        streams.setUncaughtExceptionHandler(e -> {
            e.printStackTrace();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_APPLICATION;
        });
        streams.start();
        done.await();
    }

    /** The event time is the "ts" field of the JSON value. */
    public static final class EventTime implements TimestampExtractor {
        @Override
        public long extract(org.apache.kafka.clients.consumer.ConsumerRecord<Object, Object> r, long partitionTime) {
            return r.timestamp(); // the producer set it to ts; FirstSight checks the value
        }
    }

    /** Forwards the first sight of each event id (the JSON's "id") as "id\tts". */
    static final class FirstSight implements FixedKeyProcessor<String, String, String> {
        private final ObjectMapper mapper = new ObjectMapper().configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, false);
        private FixedKeyProcessorContext<String, String> ctx;
        private KeyValueStore<String, Long> seen;

        @Override
        public void init(FixedKeyProcessorContext<String, String> ctx) {
            this.ctx = ctx;
            this.seen = ctx.getStateStore("seen");
        }

        @Override
        public void process(FixedKeyRecord<String, String> r) {
            Event e;
            try {
                e = mapper.readValue(r.value(), Event.class);
            } catch (Exception ex) {
                throw new IllegalArgumentException("not an event: " + r.value(), ex);
            }
            if (seen.get(e.id) != null) {
                return;
            }
            seen.put(e.id, e.ts);
            ctx.forward(r.withValue(e.id + "\t" + e.ts).withTimestamp(e.ts));
        }
    }
}
