package peers;

import java.io.IOException;
import java.io.Serializable;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;

/**
 * A batching ClickHouse sink over ClickHouse's HTTP interface (POST /?query=INSERT … FORMAT
 * TabSeparated, the rows as the body). Rows wait in a buffer, sent when it holds maxRows rows and at
 * every checkpoint (flush before the barrier), so a checkpoint completes only once its rows are in:
 * at-least-once, the usual guarantee of a ClickHouse sink without a two-phase commit (a replay after
 * a failure inserts again what followed the last checkpoint).
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

    public ClickHouseSink(String url, String table, Row<T> row) {
        this.url = url;
        this.table = table;
        this.row = row;
    }

    @Override
    public SinkWriter<T> createWriter(WriterInitContext context) {
        return new Writer<>(url, table, row);
    }

    static final class Writer<T> implements SinkWriter<T> {
        private final HttpClient client = HttpClient.newHttpClient();
        private final URI uri;
        private final Row<T> row;
        private final StringBuilder buf = new StringBuilder(1 << 20);
        private int rows;

        Writer(String url, String table, Row<T> row) {
            String q = "INSERT INTO " + table + " FORMAT TabSeparated";
            this.uri = URI.create(url + "/?query=" + URLEncoder.encode(q, StandardCharsets.UTF_8));
            this.row = row;
        }

        @Override
        public void write(T value, Context context) throws IOException, InterruptedException {
            buf.append(row.line(value)).append('\n');
            if (++rows >= MAX_ROWS) {
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
        }

        @Override
        public void close() {}
    }
}
