package kafkajava_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
	"github.com/exactlyonce/exactlyonce/internal/embedded"
	"github.com/exactlyonce/exactlyonce/internal/kafkajava"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/sink/kafkasink"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// built is the Java program, built once per test binary.
var built struct {
	sync.Mutex
	p   *kafkajava.Program
	err error
}

// program returns the Java program; without java or mvn it skips, or
// fails with CI=true (testkit.Unavailable); a failed build fails.
func program(t *testing.T) *kafkajava.Program {
	t.Helper()
	built.Lock()
	defer built.Unlock()
	if built.p == nil && built.err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		built.p, built.err = kafkajava.Build(ctx, os.Stderr)
	}
	switch {
	case errors.Is(built.err, embedded.ErrNotInstalled), errors.Is(built.err, embedded.ErrShort):
		testkit.Unavailable(t, "Kafka's Java clients", built.err)
	case built.err != nil:
		t.Fatalf("building Kafka's Java clients: %v", built.err) // a broken build is no missing tool
	}
	return built.p
}

// rec is a record without its position, as both sides compare them.
type rec struct {
	Key, Value []byte
	Headers    []kafkajava.Header
}

func fromJava(rs []kafkajava.Record) []rec {
	var out []rec
	for _, r := range rs {
		out = append(out, rec{Key: r.Key, Value: r.Value, Headers: r.Headers})
	}
	return out
}

func fromTxn(rs ...kafkatxn.Record) []rec {
	var out []rec
	for _, r := range rs {
		var hs []kafkajava.Header
		for _, h := range r.Headers {
			hs = append(hs, kafkajava.Header{Key: h.Key, Value: h.Value})
		}
		out = append(out, rec{Key: r.Key, Value: r.Value, Headers: hs})
	}
	return out
}

func fromKafkaGo(ms []kafka.Message) []rec {
	var out []rec
	for _, m := range ms {
		var hs []kafkajava.Header
		for _, h := range m.Headers {
			hs = append(hs, kafkajava.Header{Key: h.Key, Value: h.Value})
		}
		out = append(out, rec{Key: m.Key, Value: m.Value, Headers: hs})
	}
	return out
}

// records are the records the tests write: null and empty keys, values
// and header values apart, several headers, one of them repeated.
func records(prefix string) []kafkatxn.Record {
	return []kafkatxn.Record{
		{Key: []byte(prefix + "-k1"), Value: []byte(prefix + "-v1"), Headers: []kafkatxn.Header{
			{Key: "h", Value: []byte("x")}, {Key: "null", Value: nil}, {Key: "empty", Value: []byte{}}, {Key: "h", Value: []byte("y")},
		}},
		{Key: nil, Value: []byte(prefix + "-nullkey")},
		{Key: []byte{}, Value: nil},
		{Key: []byte(prefix + "-tombstone"), Value: nil},
		{Key: []byte(prefix + "-emptyvalue"), Value: []byte{}},
	}
}

// TestJavaReadsSDKWrites: Kafka's Java consumer with
// isolation.level=read_committed sees exactly the records the SDK's
// producers committed, in order, with their keys, values and headers
// (null and empty apart): kafkatxn.TxProducer's committed transactions and
// not its aborted one, kafkatxn.Producer's and kafkapub's records, and a
// kafkasink's committed checkpoint, not the transaction a fenced sink had
// prepared. read_uncommitted sees the aborted records too, so they were
// written. Kafka's kafka-transactions.sh then describes and lists the
// SDK's transactional ids.
func TestJavaReadsSDKWrites(t *testing.T) {
	java := program(t)
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "sdkwrites")
	testkit.CreateTopic(t, brokers, topic, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	txid := testkit.Name(t, "tx")
	tx, err := kafkatxn.NewTxProducer(ctx, brokers, txid, kafkatxn.TxOptions{})
	require.NoError(t, err)
	defer tx.Close()
	var want []rec
	committed1, aborted, committed2 := records("c1"), records("aborted"), records("c2")
	_, err = tx.Produce(ctx, topic, 0, committed1...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	want = append(want, fromTxn(committed1...)...)
	_, err = tx.Produce(ctx, topic, 0, aborted...)
	require.NoError(t, err)
	require.NoError(t, tx.Abort(ctx))
	_, err = tx.Produce(ctx, topic, 0, committed2...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	want = append(want, fromTxn(committed2...)...)

	plain, err := kafkatxn.NewProducer(ctx, brokers, kafkatxn.ProducerOptions{})
	require.NoError(t, err)
	defer plain.Close()
	plainRecs := records("plain")
	_, err = plain.Produce(ctx, topic, 0, plainRecs...)
	require.NoError(t, err)
	want = append(want, fromTxn(plainRecs...)...)

	// kafkapub's two publishers, the idempotent one (kafkatxn's producer)
	// and the kafka-go Writer one.
	for i, newPub := range []func() (publisher, error){
		func() (publisher, error) { return kafkapub.NewIdempotent(ctx, brokers, topic, kafkapub.Options{}) },
		func() (publisher, error) { return kafkapub.New(ctx, brokers, topic, kafkapub.Options{}) },
	} {
		d := idempotency.Delivery{Key: "delivery-" + strconv.Itoa(i), Source: "github", Event: "push", Partition: "tenant", Body: []byte(`{"a":1}`)}
		pub, err := newPub()
		require.NoError(t, err)
		require.NoError(t, pub.Publish(ctx, d))
		require.NoError(t, pub.Close())
		var pubHeaders []kafkajava.Header
		for _, h := range kafkapub.Headers(d) {
			pubHeaders = append(pubHeaders, kafkajava.Header{Key: h.Key, Value: h.Value})
		}
		want = append(want, rec{Key: []byte("tenant"), Value: d.Body, Headers: pubHeaders})
	}

	src := checkpoint.TopicPartition{Topic: "in", Partition: 0}
	prefix := testkit.Name(t, "sink")
	sink, err := kafkasink.New(brokers, prefix, src, kafkasink.Options{CheckpointInterval: -1})
	require.NoError(t, err)
	defer sink.Close()
	sinkRecs := records("sink")
	require.NoError(t, sink.Add(ctx, topic, 0, sinkRecs...))
	_, err = sink.Snapshot(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, sink.CheckpointCompleted(ctx, 1))
	want = append(want, fromTxn(sinkRecs...)...)
	require.NoError(t, sink.Add(ctx, topic, 0, records("sink-fenced")...))
	_, err = sink.Snapshot(ctx, 2) // prepared, never committed:
	require.NoError(t, err)
	next, err := kafkasink.New(brokers, prefix, src, kafkasink.Options{CheckpointInterval: -1})
	require.NoError(t, err)
	defer next.Close()
	require.NoError(t, next.Start(ctx)) // the next incarnation fences it and aborts it

	got, err := java.Consume(ctx, brokers, topic, true)
	require.NoError(t, err)
	assert.Equal(t, want, fromJava(got), "read_committed")
	all, err := java.Consume(ctx, brokers, topic, false)
	require.NoError(t, err)
	assert.Len(t, all, len(want)+len(aborted)+len(records("sink-fenced")), "read_uncommitted sees the aborted records too")

	// Kafka's own transaction tool on the SDK's transactional ids: one
	// with a transaction open, the sink's, committed and fenced.
	_, err = tx.Produce(ctx, topic, 0, records("open")...)
	require.NoError(t, err)
	bs := strings.Join(brokers, ",")
	out, err := java.Run(ctx, "", kafkajava.TransactionsCommand, "--bootstrap-server", bs, "describe", "--transactional-id", txid)
	require.NoError(t, err)
	assert.Contains(t, out, txid)
	assert.Contains(t, out, "Ongoing")
	out, err = java.Run(ctx, "", kafkajava.TransactionsCommand, "--bootstrap-server", bs, "describe", "--transactional-id", next.TransactionalID())
	require.NoError(t, err)
	assert.Contains(t, out, next.TransactionalID())
	out, err = java.Run(ctx, "", kafkajava.TransactionsCommand, "--bootstrap-server", bs, "list")
	require.NoError(t, err)
	assert.Contains(t, out, txid)
	assert.Contains(t, out, next.TransactionalID())
	require.NoError(t, tx.Abort(ctx))
}

// publisher is what kafkapub's two publishers have in common.
type publisher interface {
	Publish(context.Context, idempotency.Delivery) error
	Close() error
}

// codecs are the compression codecs of Kafka's producer.
var codecs = []string{"none", "gzip", "snappy", "lz4", "zstd"}

// TestSDKReadsJavaWrites: the SDK's readers, kafkatxn.Reader and a
// kafkasource pipeline, see exactly what a Java transactional producer
// committed, with every compression codec: its committed transactions, the
// plain records written between them, none of its aborted transaction,
// keys, values and headers as written, null and empty apart. Kafka's
// kafka-consumer-groups.sh then describes the pipeline's group.
func TestSDKReadsJavaWrites(t *testing.T) {
	java := program(t)
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "javawrites")
	testkit.CreateTopic(t, brokers, topic, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	var want []rec
	for _, codec := range codecs {
		step := func(op string, r kafkatxn.Record) kafkajava.Step {
			s := kafkajava.Step{Op: op, Topic: topic, Record: kafkajava.Record{Key: r.Key, Value: r.Value}}
			for _, h := range r.Headers {
				s.Record.Headers = append(s.Record.Headers, kafkajava.Header{Key: h.Key, Value: h.Value})
			}
			return s
		}
		var script []kafkajava.Step
		c1, ab, c2 := records(codec+"-c1"), records(codec+"-aborted"), records(codec+"-c2")
		p := records(codec + "-plain")
		script = append(script, kafkajava.Step{Op: "begin"})
		for i, r := range c1 {
			script = append(script, step("tx", r))
			want = append(want, fromTxn(r)...)
			if i == 1 { // a plain record inside the open transaction's span
				script = append(script, step("plain", p[0]))
				want = append(want, fromTxn(p[0])...)
			}
		}
		script = append(script, kafkajava.Step{Op: "commit"}, kafkajava.Step{Op: "begin"})
		for i, r := range ab {
			script = append(script, step("tx", r))
			if i == 2 {
				script = append(script, step("plain", p[1]))
				want = append(want, fromTxn(p[1])...)
			}
		}
		script = append(script, kafkajava.Step{Op: "abort"}, kafkajava.Step{Op: "begin"})
		for _, r := range c2 {
			script = append(script, step("tx", r))
			want = append(want, fromTxn(r)...)
		}
		script = append(script, kafkajava.Step{Op: "commit"}, step("plain", p[2]))
		want = append(want, fromTxn(p[2])...)
		require.NoError(t, java.Produce(ctx, brokers, testkit.Name(t, "java-"+codec), codec, script), codec)
	}

	// kafkatxn.Reader (testkit.ReadTopic), to the end: the last record is
	// a plain one, after every transaction ended.
	got := testkit.ReadTopic(t, brokers, topic, 0)
	assert.Equal(t, want, fromKafkaGo(got), "kafkatxn.Reader")

	// A kafkasource pipeline, checkpointed once it has seen everything.
	group := testkit.Name(t, "group")
	store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1})
	require.NoError(t, err)
	defer coord.Close()
	var mu sync.Mutex
	var seen []kafka.Message
	src, err := kafkasource.New(kafkasource.Group{Brokers: brokers, ID: group, Topics: []string{topic}}, coord,
		kafkasource.Chains(store, func(context.Context, *checkpoint.Chain) (*kafkasource.Processor, error) {
			return &kafkasource.Processor{Process: func(_ context.Context, m kafka.Message) error {
				mu.Lock()
				defer mu.Unlock()
				seen = append(seen, m)
				return nil
			}}, nil
		}), kafkasource.Options{HeartbeatInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(runCtx) }()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}
	for count() < len(want) {
		select {
		case err := <-done:
			t.Fatalf("kafkasource stopped after %d of %d records: %v", count(), len(want), err)
		case <-ctx.Done():
			t.Fatalf("kafkasource saw %d of %d records: %v", count(), len(want), ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	require.NoError(t, src.Checkpoint(ctx))
	mu.Lock()
	assert.Equal(t, want, fromKafkaGo(seen), "kafkasource")
	mu.Unlock()

	// Kafka's own group tool on the pipeline's group, members and
	// committed offsets.
	out, err := java.Run(ctx, "", kafkajava.ConsumerGroupCommand, "--bootstrap-server", strings.Join(brokers, ","), "--describe", "--group", group)
	require.NoError(t, err)
	assert.Contains(t, out, topic)
	assert.NotContains(t, out, "Error")
	stop()
	assert.NoError(t, <-done)
}
