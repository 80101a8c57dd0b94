package kafkasource

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
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

// TestWireFetcherMatchesKafkaGo writes a partition the way producers do
// (franz-go, test data from outside this package): batches uncompressed
// and in each of Kafka's four codecs, keys and values null, empty and set,
// records with no headers and with several (empty values among them),
// transactions that commit and abort (their control records included),
// then reads it with kafka-go's Reader and with the chain's own fetcher,
// from the start and from offsets inside compressed batches, with small and
// large fetches. Both must hand out the same messages, field for field.
func TestWireFetcherMatchesKafkaGo(t *testing.T) {
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
		require.NoError(t, tx.EndTransaction(ctx, kgo.TransactionEndTry(i%2 == 0)))
	}
	tx.Close()

	conn, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, 0)
	require.NoError(t, err)
	end, err := conn.ReadLastOffset()
	require.NoError(t, err)
	require.NoError(t, conn.Close())

	src := &Source{group: Group{Brokers: brokers, ID: "wire", Topics: []string{topic}},
		opts: Options{Dialer: kafka.DefaultDialer, MaxWait: 100 * time.Millisecond}, log: slog.New(slog.DiscardHandler)}
	p := checkpoint.TopicPartition{Topic: topic, Partition: 0}
	readAll := func(t *testing.T, f fetcher, from int64) []kafka.Message {
		t.Helper()
		defer f.Close()
		var out []kafka.Message
		for next := from; next < end; {
			fctx, fcancel := context.WithTimeout(ctx, 5*time.Second)
			m, err := f.FetchMessage(fctx)
			fcancel()
			if err != nil && errors.Is(err, context.DeadlineExceeded) {
				break // only control records past the last message? then both stop here
			}
			require.NoError(t, err)
			out = append(out, m)
			next = m.Offset + 1
		}
		return out
	}
	for _, maxBytes := range []int{1 << 20, 700} {
		src.opts.MaxBytes = maxBytes
		for _, from := range []int64{0, 1, 161, 162, 290, 410, 500} {
			t.Run(fmt.Sprintf("max %d from %d", maxBytes, from), func(t *testing.T) {
				kr, err := src.newKafkaGoReader(p, from)
				require.NoError(t, err)
				want := readAll(t, kr, from)
				got := readAll(t, src.newWireFetcher(p, from), from)
				require.NotEmpty(t, want)

				require.Equal(t, len(want), len(got), "messages")
				for i := range want {
					require.Equal(t, want[i], got[i], "message %d (offset %d)", i, want[i].Offset)
				}
			})
		}
	}
}

// TestWireFetcherRefusesCorruptBatches: a batch whose CRC does not match,
// or that is cut inside a record, is an error, never records; a batch in a
// format before v2 is handed to kafka-go's Reader (errLegacyFormat).
func TestWireFetcherRefusesCorruptBatches(t *testing.T) {
	batch := func() []byte {
		// One uncompressed batch of one record (key "k", value "v").
		rec := []byte{0}                  // attributes
		rec = binary.AppendVarint(rec, 0) // timestamp delta
		rec = binary.AppendVarint(rec, 0) // offset delta
		rec = binary.AppendVarint(rec, 1)
		rec = append(rec, 'k')
		rec = binary.AppendVarint(rec, 1)
		rec = append(rec, 'v')
		rec = binary.AppendVarint(rec, 0)
		b := binary.BigEndian.AppendUint64(nil, 7) // base offset
		b = binary.BigEndian.AppendUint32(b, 0)    // length, below
		b = binary.BigEndian.AppendUint32(b, 0)    // leader epoch
		b = append(b, 2)                           // magic
		b = binary.BigEndian.AppendUint32(b, 0)    // crc, below
		b = binary.BigEndian.AppendUint16(b, 0)    // attributes
		b = binary.BigEndian.AppendUint32(b, 0)    // last offset delta
		b = binary.BigEndian.AppendUint64(b, 1000) // first timestamp
		b = binary.BigEndian.AppendUint64(b, 1000) // max timestamp
		b = binary.BigEndian.AppendUint64(b, ^uint64(0))
		b = binary.BigEndian.AppendUint16(b, 0xffff)
		b = binary.BigEndian.AppendUint32(b, 0xffffffff)
		b = binary.BigEndian.AppendUint32(b, 1) // records
		b = binary.AppendVarint(b, int64(len(rec)))
		b = append(b, rec...)
		binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
		binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
		return b
	}
	response := func(records []byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, 0) // throttle
		b = binary.BigEndian.AppendUint32(b, 1)
		b = appendString(b, "t")
		b = binary.BigEndian.AppendUint32(b, 1)
		b = binary.BigEndian.AppendUint32(b, 0) // partition
		b = binary.BigEndian.AppendUint16(b, 0) // error
		b = binary.BigEndian.AppendUint64(b, 8) // high watermark
		b = binary.BigEndian.AppendUint64(b, 8) // last stable offset
		b = binary.BigEndian.AppendUint32(b, 0) // aborted transactions
		b = binary.BigEndian.AppendUint32(b, uint32(len(records)))
		return append(b, records...)
	}
	f := &wireFetcher{topic: "t"}
	ms, err := f.decodeResponse(response(batch()))
	require.NoError(t, err)
	require.Len(t, ms, 1)
	require.Equal(t, "k", string(ms[0].Key))
	require.Equal(t, int64(7), ms[0].Offset)
	require.Equal(t, int64(8), f.next)

	bad := batch()
	bad[len(bad)-2] ^= 1 // a bit of the value
	f = &wireFetcher{topic: "t"}
	_, err = f.decodeResponse(response(bad))
	require.ErrorIs(t, err, errMalformed)

	old := batch()
	old[16] = 1 // magic 1: only kafka-go's Reader reads it
	f = &wireFetcher{topic: "t"}
	_, err = f.decodeResponse(response(old))
	require.ErrorIs(t, err, errLegacyFormat)

	cut := batch()
	cut = cut[:len(cut)-3]
	binary.BigEndian.PutUint32(cut[8:], uint32(len(cut)-12))
	binary.BigEndian.PutUint32(cut[17:], crc32.Checksum(cut[21:], castagnoli)) // a valid CRC over a cut record
	f = &wireFetcher{topic: "t"}
	_, err = f.decodeResponse(response(cut))
	require.ErrorIs(t, err, errMalformed)
	require.Equal(t, int64(0), f.next)
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
	m, err := f.FetchMessage(ctx)
	require.NoError(t, err)
	require.Equal(t, "big", string(m.Key))
	require.True(t, bytes.Equal(big, m.Value), "a value of %d bytes, want %d", len(m.Value), len(big))
	m, err = f.FetchMessage(ctx)
	require.NoError(t, err)
	require.Equal(t, "after", string(m.Key))
	require.Equal(t, int64(1), m.Offset)
}
