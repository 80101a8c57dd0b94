package chaudit_test

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/audit"
	"github.com/exactlyonce/exactlyonce/audit/chaudit"
	"github.com/exactlyonce/exactlyonce/audit/kafkaaudit"
	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/dedup"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// handWiredFolder is the folder as NewFolder wired it before Folder: a
// Participants map filled by name and chsink.New, the old form a deployment
// upgraded in place wrote its checkpoints with. Kept here verbatim in what
// reaches a checkpoint (names, operators, options) to prove the upgrade.
func handWiredFolder(addr, db string, storage checkpoint.Storage) kafkasource.ProcessorFunc {
	return func(ctx context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
		proc := &kafkasource.Processor{Participants: map[string]checkpoint.Participant{}}
		d, err := dedup.New(7*24*time.Hour, dedup.Options{})
		if err != nil {
			return proc, err
		}
		proc.Participants["dedup"] = d
		counter, err := audit.NewCounter(p.String(), audit.Options{})
		if err != nil {
			return proc, err
		}
		proc.Participants["counter"] = counter
		s, err := chsink.New(ctx, chsink.Table{Addr: addr, Name: chaudit.DefaultTable}, p, storage, chaudit.Schema,
			chsink.Options{Database: db, MaxDelay: 100 * time.Millisecond, OnMismatch: chsink.MismatchReinsert})
		if err != nil {
			return proc, err
		}
		proc.Participants["audit"] = s
		var (
			key  []byte
			rows []audit.Row
			pos  []sink.Position
		)
		proc.Process = func(ctx context.Context, m kafka.Message) error {
			counter.At(m.Offset)
			delta, err := audit.DecodeDelta(m.Value)
			if err != nil {
				return kafkasource.Poison(err)
			}
			seq := make([]byte, 8)
			for i := range 8 {
				seq[7-i] = byte(delta.Seq >> (8 * i))
			}
			key = dedup.AppendKey(key[:0], delta.Source, string(seq))
			first, err := d.Observe(key, delta.Bucket)
			if err != nil || !first {
				return err
			}
			counter.Add(delta.Stage, delta.Tenant, delta.Bucket, delta.Count)
			return nil
		}
		proc.Tick = func(ctx context.Context) error { return chaudit.Flush(ctx, counter, s, &rows, &pos) }
		return proc, nil
	}
}

// TestFolderUpgradeRestoresHandWiredCheckpoint: a folder wired by hand (the
// form before Folder) checkpoints, then Folder on kafkasource.Chains runs
// over the same checkpoints. Every participant name the new chain registers
// is one the old checkpoint holds state under, and the other way round (a
// name the chain lacked would fail Attach with ErrUnknownState, a new name
// would start empty); and the state is the old one: a delta the old folder
// counted, sent again after the upgrade, is not counted twice (dedup
// restored), and new deltas add to the old counts (the counters restored).
func TestFolderUpgradeRestoresHandWiredCheckpoint(t *testing.T) {
	addr, db := testkit.ClickHouse(t)
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "audit")
	testkit.CreateTopic(t, brokers, topic, 2)
	ctx := context.Background()
	require.NoError(t, chaudit.CreateTable(ctx, ch.Options{Address: addr}, db, chaudit.DefaultTable))
	a, err := kafkaaudit.New(brokers, topic, kafkaaudit.Options{Source: "gw-a"})
	require.NoError(t, err)
	defer a.Close()
	for i := range 20 {
		a.Add(audit.StageAccepted, "org"+string(rune('0'+i%4)), t0, 1)
	}
	flushUntilSent(t, a)
	b, err := kafkaaudit.New(brokers, topic, kafkaaudit.Options{Source: "gw-b"})
	require.NoError(t, err)
	defer b.Close()
	b.Add(audit.StageAccepted, "org2", t0, 1000) // gw-b's delta 1, the only one
	flushUntilSent(t, b)
	want := map[string]uint64{}
	for i := range 4 {
		want[audit.StageAccepted+" org"+string(rune('0'+i))+" 10:00"] = 5
	}
	want[audit.StageAccepted+" org2 10:00"] += 1000
	storage := checkpoint.NewMemoryStorage()
	runChains(t, brokers, topic, storage, addr, db, want, true, func(*checkpoint.Store) kafkasource.ProcessorFunc {
		return handWiredFolder(addr, db, storage)
	})

	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	require.NoError(t, err)
	old := map[int][]string{}
	for p := range 2 {
		cp, err := store.Latest(ctx, checkpoint.TopicPartition{Topic: topic, Partition: p})
		require.NoError(t, err, "the hand-wired folder's checkpoint of partition %d", p)
		old[p] = slices.Sorted(maps.Keys(cp.States))
		assert.Equal(t, []string{"audit", "counter", "dedup"}, old[p], "the names today's folder writes")
	}

	// After the upgrade: gw-b's delta again (as its Publisher sends it when
	// the broker's answer was lost: same number, same key), and new counts.
	again := audit.Delta{Source: "gw-b", Seq: 1, Stage: audit.StageAccepted, Tenant: "org2", Bucket: t0, Count: 1000}
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), RequiredAcks: kafka.RequireAll, Topic: topic, Balancer: &kafka.Hash{}}
	defer w.Close()
	require.NoError(t, w.WriteMessages(ctx, kafka.Message{Key: []byte("org2"), Value: again.Encode()}))
	a.Add(audit.StageAccepted, "org0", t0, 3)
	a.Add(audit.StageAccepted, "org1", t0, 2)
	flushUntilSent(t, a)
	want[audit.StageAccepted+" org0 10:00"] += 3
	want[audit.StageAccepted+" org1 10:00"] += 2

	var mu sync.Mutex
	registered := map[int][]string{}
	runChains(t, brokers, topic, storage, addr, db, want, true, func(store *checkpoint.Store) kafkasource.ProcessorFunc {
		build := chaudit.Folder(chaudit.FolderOptions{
			ClickHouse: chsink.DB{Addr: addr, Database: db}, Sink: chsink.Options{MaxDelay: 100 * time.Millisecond},
		})
		return kafkasource.Chains(store, func(ctx context.Context, c *checkpoint.Chain) (*kafkasource.Processor, error) {
			proc, err := build(ctx, c)
			mu.Lock()
			registered[c.Partition().Partition] = slices.Sorted(maps.Keys(c.Participants()))
			mu.Unlock()
			return proc, err
		})
	})
	time.Sleep(time.Second) // a double count, had there been one, is in by now
	assert.Equal(t, want, totals(t, addr, db))
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, old, registered, "the new chain's names are the old checkpoint's")
}
