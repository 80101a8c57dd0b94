package interop;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Kafka's own Java clients, driven by the Go tests of internal/kafkajava.
 * Bytes travel as fields: N for null, B followed by base64 (B alone: empty).
 *
 * <pre>
 * consume BROKERS TOPIC read_committed|read_uncommitted
 *     prints every record from the start to the end offsets (the last
 *     stable offsets under read_committed), one a line:
 *     PARTITION OFFSET KEY VALUE [HEADER-KEY HEADER-VALUE]...
 * produce BROKERS TRANSACTIONAL-ID CODEC
 *     runs the script on standard input with a transactional producer and
 *     a plain idempotent one, both compressing with CODEC, each send
 *     acknowledged before the next line: begin | commit | abort |
 *     tx TOPIC PARTITION KEY VALUE [HK HV]... | plain TOPIC PARTITION KEY VALUE [HK HV]...
 *     and prints ok.
 * </pre>
 */
public final class Main {
    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            usage();
        }
        switch (args[0]) {
            case "consume" -> consume(args[1], args[2], args[3]);
            case "produce" -> produce(args[1], args[2], args[3]);
            default -> usage();
        }
    }

    private static void usage() {
        System.err.println("usage: consume BROKERS TOPIC ISOLATION | produce BROKERS TXID CODEC");
        System.exit(2);
    }

    private static void consume(String brokers, String topic, String isolation) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo pi : c.partitionsFor(topic, Duration.ofSeconds(60))) {
                tps.add(new TopicPartition(topic, pi.partition()));
            }
            tps.sort((a, b) -> Integer.compare(a.partition(), b.partition()));
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps, Duration.ofSeconds(60));
            StringBuilder out = new StringBuilder();
            while (true) {
                boolean done = true;
                for (TopicPartition tp : tps) {
                    if (c.position(tp, Duration.ofSeconds(60)) < end.get(tp)) {
                        done = false;
                    }
                }
                if (done) {
                    break;
                }
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                    if (r.offset() >= end.get(new TopicPartition(r.topic(), r.partition()))) {
                        continue;
                    }
                    out.append(r.partition()).append(' ').append(r.offset()).append(' ')
                        .append(field(r.key())).append(' ').append(field(r.value()));
                    for (Header h : r.headers()) {
                        out.append(' ').append(field(h.key().getBytes(StandardCharsets.UTF_8))).append(' ').append(field(h.value()));
                    }
                    out.append('\n');
                }
            }
            System.out.print(out);
            System.out.flush();
        }
    }

    private static void produce(String brokers, String txid, String codec) throws Exception {
        Properties base = new Properties();
        base.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        base.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        base.put(ProducerConfig.ACKS_CONFIG, "all");
        base.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        base.put(ProducerConfig.LINGER_MS_CONFIG, "0");
        Properties txp = new Properties();
        txp.putAll(base);
        txp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txid);
        try (KafkaProducer<byte[], byte[]> tx = new KafkaProducer<>(txp, new ByteArraySerializer(), new ByteArraySerializer());
             KafkaProducer<byte[], byte[]> plain = new KafkaProducer<>(base, new ByteArraySerializer(), new ByteArraySerializer())) {
            tx.initTransactions();
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            for (String line; (line = in.readLine()) != null; ) {
                String[] f = line.trim().split(" ");
                switch (f[0]) {
                    case "" -> { }
                    case "begin" -> tx.beginTransaction();
                    case "commit" -> tx.commitTransaction();
                    case "abort" -> tx.abortTransaction();
                    case "tx" -> tx.send(record(f)).get();
                    case "plain" -> plain.send(record(f)).get();
                    default -> throw new IllegalArgumentException("unknown script line: " + line);
                }
            }
        }
        System.out.println("ok");
    }

    private static ProducerRecord<byte[], byte[]> record(String[] f) {
        ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(f[1], Integer.parseInt(f[2]), bytes(f[3]), bytes(f[4]));
        for (int i = 5; i + 1 < f.length; i += 2) {
            r.headers().add(new String(bytes(f[i]), StandardCharsets.UTF_8), bytes(f[i + 1]));
        }
        return r;
    }

    private static String field(byte[] b) {
        return b == null ? "N" : "B" + Base64.getEncoder().encodeToString(b);
    }

    private static byte[] bytes(String f) {
        if (f.equals("N")) {
            return null;
        }
        if (!f.startsWith("B")) {
            throw new IllegalArgumentException("field " + f + ": want N or B<base64>");
        }
        return Base64.getDecoder().decode(f.substring(1));
    }
}
