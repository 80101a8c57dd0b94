package peers;

/** One input record: {"id":…,"tenant":…,"ts":<Unix ms>,"kind":…,"payload":…}. A Flink POJO. */
public class Event {
    public String id;
    public String tenant;
    public long ts;
    public String kind;

    public Event() {}
}
