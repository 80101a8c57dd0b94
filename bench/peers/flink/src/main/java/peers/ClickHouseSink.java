package peers;

import java.io.IOException;
import java.io.Serializable;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import org.apache.flink.api.common.operators.ProcessingTimeService;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;

/**
 * A batching ClickHouse sink over ClickHouse's HTTP interface (POST /?query=INSERT … FORMAT
 * TabSeparated, the rows as the body). Rows wait in a buffer, sent when it holds maxRows rows and at
 * every checkpoint (flush before the barrier), so a checkpoint completes only once its rows are in:
 * at-least-once, the usual guarantee of a ClickHouse sink without a two-phase commit (a replay after
 * a failure inserts again what followed the last checkpoint). Without checkpoints (flushMs above 0)
 * a buffer is also sent flushMs after its first row, by a processing-time timer, as the SDK's chsink
 * does with its MaxDelay: otherwise the last rows would wait for the end of an input that never ends.
 */
public final class ClickHouseSink<T> implements Sink<T> {
    /** Turns a value into one TabSeparated line, without its newline. */
    public interface Row<T> extends Serializable {
        String line(T value);
    }

    static final int MAX_ROWS = 50_000;

    private final String url;
    private final String table;
    private final Row<T> row;
    private final long flushMs;

    /** flushMs: send a buffer that long after its first row; 0: only by size and at checkpoints. */
    public ClickHouseSink(String url, String table, Row<T> row, long flushMs) {
        this.url = url;
        this.table = table;
        this.row = row;
        this.flushMs = flushMs;
    }

    @Override
    public SinkWriter<T> createWriter(WriterInitContext context) {
        // The driver's log shows that a restart resumed (and from where).
        context.getRestoredCheckpointId().ifPresent(id -> System.err.printf("peers: %s writer %d restored from checkpoint %d%n",
                table, context.getTaskInfo().getIndexOfThisSubtask(), id));
        return new Writer<>(url, table, row, flushMs, context.getProcessingTimeService());
    }

    static final class Writer<T> implements SinkWriter<T> {
        private final HttpClient client = HttpClient.newHttpClient();
        private final URI uri;
        private final Row<T> row;
        private final StringBuilder buf = new StringBuilder(1 << 20);
        private final long flushMs;
        private final ProcessingTimeService timers;
        private int rows;
        private long sent; // sends so far: a timer set for an earlier buffer does nothing

        Writer(String url, String table, Row<T> row, long flushMs, ProcessingTimeService timers) {
            String q = "INSERT INTO " + table + " FORMAT TabSeparated";
            this.uri = URI.create(url + "/?query=" + URLEncoder.encode(q, StandardCharsets.UTF_8));
            this.row = row;
            this.flushMs = flushMs;
            this.timers = timers;
        }

        @Override
        public void write(T value, Context context) throws IOException, InterruptedException {
            buf.append(row.line(value)).append('\n');
            if (++rows == 1 && flushMs > 0) {
                // The timer fires in the task's mailbox thread, as write does: no locking.
                long buffer = sent;
                timers.registerTimer(timers.getCurrentProcessingTime() + flushMs, t -> {
                    if (sent == buffer) {
                        send();
                    }
                });
            }
            if (rows >= MAX_ROWS) {
                send();
            }
        }

        @Override
        public void flush(boolean endOfInput) throws IOException, InterruptedException {
            send();
        }

        private void send() throws IOException, InterruptedException {
            if (rows == 0) {
                return;
            }
            HttpRequest req = HttpRequest.newBuilder(uri).POST(HttpRequest.BodyPublishers.ofString(buf.toString())).build();
            HttpResponse<String> resp = client.send(req, HttpResponse.BodyHandlers.ofString());
            if (resp.statusCode() != 200) {
                throw new IOException("ClickHouse insert: HTTP " + resp.statusCode() + ": " + resp.body());
            }
            buf.setLength(0);
            rows = 0;
            sent++;
        }

        @Override
        public void close() {}
    }
}
