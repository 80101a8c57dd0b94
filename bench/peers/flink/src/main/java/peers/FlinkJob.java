package peers;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.time.Duration;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichFilterFunction;
import org.apache.flink.api.common.serialization.AbstractDeserializationSchema;
import org.apache.flink.api.common.state.StateTtlConfig;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.ExternalizedCheckpointRetention;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.configuration.StateRecoveryOptions;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.core.execution.CheckpointingMode;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.Collector;

/**
 * The Flink side of make bench-peers: the job of examples/processor in the DataStream API. Kafka
 * (KafkaSource, earliest) → keyed dedup by event id (ValueState with a 24 h TTL) → first sights to
 * the events table, and their event-time one-minute tumbling counts per tenant to tenant_minute,
 * both through {@link ClickHouseSink} (batches flushed at every checkpoint: at-least-once). One JVM,
 * a local MiniCluster.
 *
 * <p>Arguments: brokers topic clickhouseHttpUrl database parallelism checkpointMs stateBackend
 * (hashmap or rocksdb) checkpointDir (a file: URI; checkpoints go to the file system, as the
 * SDK's do: the JobManager's memory refuses state over 5 MB) [restorePath]. checkpointMs 0 runs
 * without checkpoints; the sinks then send their buffers a second after their first row.
 *
 * <p>A local MiniCluster dies with its JVM: after a kill -9 nothing restarts the job, so the driver
 * starts the JVM again with restorePath, the last completed checkpoint (a chk-N directory of the
 * killed job under checkpointDir), kept by externalized retention: the job resumes from its state
 * and its sources' offsets there, as a cluster's JobManager would after a failover.
 */
public final class FlinkJob {
    public static void main(String[] args) throws Exception {
        if (args.length != 8 && args.length != 9) {
            throw new IllegalArgumentException(
                    "usage: FlinkJob brokers topic clickhouseUrl database parallelism checkpointMs hashmap|rocksdb checkpointDir [restorePath]");
        }
        String brokers = args[0], topic = args[1], url = args[2], db = args[3];
        int parallelism = Integer.parseInt(args[4]);
        long checkpointMs = Long.parseLong(args[5]);

        Configuration conf = new Configuration();
        conf.set(StateBackendOptions.STATE_BACKEND, args[6]);
        conf.set(CheckpointingOptions.CHECKPOINT_STORAGE, "filesystem");
        conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, args[7]);
        // Completed checkpoints outlive the job (a kill -9 ends it without cleanup anyway); two
        // kept, so the one before stays whole while the next is written.
        conf.set(CheckpointingOptions.EXTERNALIZED_CHECKPOINT_RETENTION, ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION);
        conf.set(CheckpointingOptions.MAX_RETAINED_CHECKPOINTS, 2);
        if (args.length == 9) {
            conf.set(StateRecoveryOptions.SAVEPOINT_PATH, args[8]);
        }
        // A failure ends the run (the driver reports it) instead of a silent restart loop.
        conf.set(RestartStrategyOptions.RESTART_STRATEGY, "disable");
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(parallelism, conf);
        if (checkpointMs > 0) {
            env.enableCheckpointing(checkpointMs, CheckpointingMode.EXACTLY_ONCE);
        }

        KafkaSource<Event> source =
                KafkaSource.<Event>builder()
                        .setBootstrapServers(brokers)
                        .setTopics(topic)
                        .setGroupId("peers-flink")
                        .setStartingOffsets(OffsetsInitializer.earliest())
                        .setValueOnlyDeserializer(new EventSchema())
                        .build();
        WatermarkStrategy<Event> watermarks =
                WatermarkStrategy.<Event>forBoundedOutOfOrderness(Duration.ofSeconds(5))
                        .withTimestampAssigner((e, recordTs) -> e.ts)
                        // Watermarks are not in a checkpoint: after a restore, a partition read to
                        // its end before the checkpoint sends nothing again and would hold every
                        // window back for good. Idle for 10 s, it no longer counts (the SDK's
                        // windows, one per partition, have no such wait).
                        .withIdleness(Duration.ofSeconds(10));
        DataStream<Event> events = env.fromSource(source, watermarks, "kafka");
        DataStream<Event> firsts = events.keyBy(e -> e.id).filter(new FirstSight()).name("dedup");
        long flushMs = checkpointMs > 0 ? 0 : 1000;
        firsts.sinkTo(new ClickHouseSink<Event>(url, db + ".events", FlinkJob::eventRow, flushMs)).name("events");
        firsts.keyBy(e -> e.tenant)
                .window(TumblingEventTimeWindows.of(Duration.ofMinutes(1)))
                .aggregate(new Count(), new MinuteRow())
                .sinkTo(new ClickHouseSink<String>(url, db + ".tenant_minute", s -> s, flushMs))
                .name("tenant_minute");
        env.execute("peers");
    }

    static String eventRow(Event e) {
        return e.tenant + "\t" + e.id + "\t" + time(e.ts);
    }

    private static final java.time.format.DateTimeFormatter TIME =
            java.time.format.DateTimeFormatter.ofPattern("yyyy-MM-dd HH:mm:ss.SSS").withZone(java.time.ZoneOffset.UTC);

    /** Unix milliseconds as a DateTime64(3) text value. */
    static String time(long ms) {
        return TIME.format(java.time.Instant.ofEpochMilli(ms));
    }

    /** Decodes the JSON value with Jackson. */
    static final class EventSchema extends AbstractDeserializationSchema<Event> {
        private transient ObjectMapper mapper;

        @Override
        public Event deserialize(byte[] message) throws IOException {
            if (mapper == null) {
                mapper = new ObjectMapper().configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, false);
            }
            return mapper.readValue(message, Event.class);
        }
    }

    /** Keeps the first sight of each event id: keyed ValueState with a 24 h TTL. */
    static final class FirstSight extends RichFilterFunction<Event> {
        private transient ValueState<Boolean> seen;

        @Override
        public void open(OpenContext ctx) {
            ValueStateDescriptor<Boolean> d = new ValueStateDescriptor<>("seen", Boolean.class);
            d.enableTimeToLive(
                    StateTtlConfig.newBuilder(Duration.ofHours(24))
                            .setUpdateType(StateTtlConfig.UpdateType.OnCreateAndWrite)
                            .setStateVisibility(StateTtlConfig.StateVisibility.NeverReturnExpired)
                            .build());
            seen = getRuntimeContext().getState(d);
        }

        @Override
        public boolean filter(Event e) throws Exception {
            if (seen.value() != null) {
                return false;
            }
            seen.update(Boolean.TRUE);
            return true;
        }
    }

    static final class Count implements AggregateFunction<Event, Long, Long> {
        @Override
        public Long createAccumulator() {
            return 0L;
        }

        @Override
        public Long add(Event e, Long acc) {
            return acc + 1;
        }

        @Override
        public Long getResult(Long acc) {
            return acc;
        }

        @Override
        public Long merge(Long a, Long b) {
            return a + b;
        }
    }

    /** A tenant_minute row: tenant, window start, version (the window's end), count. */
    static final class MinuteRow extends ProcessWindowFunction<Long, String, String, TimeWindow> {
        @Override
        public void process(String tenant, Context ctx, Iterable<Long> counts, Collector<String> out) {
            long n = counts.iterator().next();
            long start = ctx.window().getStart();
            out.collect(tenant + "\t" + time(start) + "\t" + ctx.window().getEnd() + "\t" + n);
        }
    }
}
