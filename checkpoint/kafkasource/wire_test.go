package kafkasource

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestWireFetcherReadsCommitted writes a partition the way producers do
// (franz-go, test data from outside this package): batches uncompressed
// and in each of Kafka's four codecs, keys and values null, empty and set,
// records with no headers and with several (empty values among them),
// transactions that commit and abort, then reads it with the chain's
// fetcher from the start and from offsets inside compressed batches, with
// small and large fetches. It must hand out exactly the records the
// producer had acknowledged outside aborted transactions, at the offsets
// the broker gave them, field for field; no control record.
func TestWireFetcherReadsCommitted(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "wire")
	testkit.CreateTopic(t, brokers, topic, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Recent timestamps: records older than the topic's retention (7 days
	// by default) are deleted by a real broker's retention check, every 5
	// minutes, whole active segment included; on Apache Kafka 3.9 the
	// shared broker of the test binary did so midway (OFFSET_OUT_OF_RANGE
	// at offset 0) when these were fixed at November 2023. kfake keeps
	// everything.
	base := time.Now().Truncate(time.Millisecond)
	n := 0
	record := func() *kgo.Record {
		n++
		r := &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "value-%d", n), Timestamp: base.Add(time.Duration(n) * 37 * time.Millisecond)}
		switch n % 5 {
		case 0:
			r.Key = nil
		case 1:
			r.Key = []byte{}
		default:
			r.Key = fmt.Appendf(nil, "key-%d", n%7)
		}
		switch n % 11 {
		case 3:
			r.Value = nil
		case 4:
			r.Value = []byte{}
		}
		for h := range n % 4 {
			v := fmt.Appendf(nil, "h%d-%d", h, n)
			if h == 2 {
				v = nil
			}
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: fmt.Sprintf("k%d", h), Value: v})
		}
		return r
	}
	var want []*kgo.Record // acknowledged, not aborted, with their offsets
	codecs := []kgo.CompressionCodec{kgo.NoCompression(), kgo.GzipCompression(), kgo.SnappyCompression(),
		kgo.Lz4Compression(), kgo.ZstdCompression()}
	for _, codec := range codecs {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerBatchCompression(codec), kgo.ProducerLinger(0))
		require.NoError(t, err)
		for range 3 {
			var recs []*kgo.Record
			for range 40 {
				recs = append(recs, record())
			}
			require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
			want = append(want, recs...)
		}
		cl.Close()
	}
	tx, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(topic+"-tx"),
		kgo.ProducerBatchCompression(kgo.SnappyCompression()))
	require.NoError(t, err)
	for i := range 4 {
		require.NoError(t, tx.BeginTransaction())
		var recs []*kgo.Record
		for range 10 {
			recs = append(recs, record())
		}
		require.NoError(t, tx.ProduceSync(ctx, recs...).FirstErr())
		commit := i%2 == 0
		require.NoError(t, tx.EndTransaction(ctx, kgo.TransactionEndTry(commit)))
		if commit {
			want = append(want, recs...)
		}
	}
	tx.Close()
	last := record() // after the last marker: the reads stop here
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	require.NoError(t, err)
	require.NoError(t, cl.ProduceSync(ctx, last).FirstErr())
	cl.Close()
	want = append(want, last)
	slices.SortFunc(want, func(a, b *kgo.Record) int { return cmp.Compare(a.Offset, b.Offset) })

	src := &Source{group: Group{Brokers: brokers, ID: "wire", Topics: []string{topic}},
		opts: Options{Dialer: kafka.DefaultDialer, MaxWait: 100 * time.Millisecond}, log: slog.New(slog.DiscardHandler)}
	p := checkpoint.TopicPartition{Topic: topic, Partition: 0}
	for _, maxBytes := range []int{1 << 20, 700} {
		src.opts.MaxBytes = maxBytes
		for _, from := range []int64{0, 1, 161, 162, 290, 410, 500} {
			t.Run(fmt.Sprintf("max %d from %d", maxBytes, from), func(t *testing.T) {
				f := src.newWireFetcher(p, from)
				defer f.Close()
				i := slices.IndexFunc(want, func(w *kgo.Record) bool { return w.Offset >= from })
				require.GreaterOrEqual(t, i, 0)
				got := fetchN(ctx, t, f, len(want)-i)
				for j, w := range want[i:] {
					m := got[j]
					wm := kafka.Message{Topic: topic, Offset: w.Offset, HighWaterMark: m.HighWaterMark,
						Key: w.Key, Value: w.Value, Time: w.Timestamp.UTC()} // null is nil, empty is []byte{}, as the producer wrote them
					for _, h := range w.Headers {
						wm.Headers = append(wm.Headers, kafka.Header{Key: h.Key, Value: h.Value})
					}
					require.Equal(t, wm, m, "offset %d", w.Offset)
					require.Positive(t, m.HighWaterMark)
				}
				require.Len(t, got, len(want)-i, "records after the last one")
			})
		}
	}
}

// TestWireFetcherReadsBatchLargerThanMaxBytes: a broker returns a record
// batch larger than the fetch's max bytes whole, so that the consumer makes
// progress (KIP-74), and a topic may allow batches of many megabytes
// (max.message.bytes). Such a response is read, not refused as malformed
// and fetched again forever.
func TestWireFetcherReadsBatchLargerThanMaxBytes(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "big")
	admin, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerBatchMaxBytes(16<<20),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	require.NoError(t, err)
	defer admin.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, 1, 1
	cfg := kmsg.NewCreateTopicsRequestTopicConfig()
	cfg.Name, cfg.Value = "max.message.bytes", kmsg.StringPtr(strconv.Itoa(16<<20))
	rt.Configs = append(rt.Configs, cfg)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, admin)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(resp.Topics[0].ErrorCode))

	big := bytes.Repeat([]byte("0123456789abcdef"), (5<<20)/16) // 5 MiB, sent uncompressed
	require.NoError(t, admin.ProduceSync(ctx,
		&kgo.Record{Topic: topic, Key: []byte("big"), Value: big},
	).FirstErr())
	require.NoError(t, admin.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("after"), Value: []byte("small")}).FirstErr())

	src := &Source{group: Group{Brokers: brokers, ID: "wire", Topics: []string{topic}},
		opts: Options{Dialer: kafka.DefaultDialer, MaxWait: 100 * time.Millisecond, MaxBytes: 1 << 20},
		log:  slog.New(slog.DiscardHandler)}
	f := src.newWireFetcher(checkpoint.TopicPartition{Topic: topic, Partition: 0}, 0)
	defer f.Close()
	got := fetchN(ctx, t, f, 2)
	require.Len(t, got, 2)
	m := got[0]
	require.Equal(t, "big", string(m.Key))
	require.True(t, bytes.Equal(big, m.Value), "a value of %d bytes, want %d", len(m.Value), len(big))
	m = got[1]
	require.Equal(t, "after", string(m.Key))
	require.Equal(t, int64(1), m.Offset)
}

// fetchN reads f's fetches (as the chain does, a whole fetch at a time)
// until it holds at least n records, and returns them all: more than n when
// the last fetch went past them.
func fetchN(ctx context.Context, t *testing.T, f *wireFetcher, n int) []kafka.Message {
	t.Helper()
	var got []kafka.Message
	for len(got) < n {
		ms, err := f.fetchBatch(ctx)
		require.NoError(t, err)
		got = append(got, ms...) // ms is reused by the next fetch; its records are not
	}
	return got
}
