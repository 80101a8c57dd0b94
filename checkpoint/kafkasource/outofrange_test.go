package kafkasource_test

import (
	"context"
	"encoding/binary"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// A checkpoint whose offset is past the log (the topic was recreated) is
// never silently skipped: the default policy stops Run with an
// *OffsetOutOfRangeError; OutOfRangeEarliest continues at the first offset
// keeping the restored state.
func TestOffsetOutOfRangePolicy(t *testing.T) {
	const topic = "oor"
	brokers := testkit.Kafka(t)
	testkit.CreateTopic(t, brokers, topic, 1)
	produce(t, brokers, topic, 1, 0, 50)

	tests := []struct {
		name    string
		policy  kafkasource.OutOfRange
		wantErr bool
	}{
		{name: "fail", policy: kafkasource.OutOfRangeFail, wantErr: true},
		{name: "earliest", policy: kafkasource.OutOfRangeEarliest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			storage, err := checkpoint.NewFSStorage(filepath.Join(t.TempDir(), "s"))
			require.NoError(t, err)
			store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
			require.NoError(t, err)
			// State: 1000 records counted, their offsets summing to 7.
			state := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, 1000), 7)
			_, err = store.Save(ctx, &checkpoint.Checkpoint{
				ID: 9, Partition: checkpoint.TopicPartition{Topic: topic}, NextOffset: 1000,
				States: map[string][]byte{"counter": state},
			})
			require.NoError(t, err)
			coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1})
			require.NoError(t, err)
			opts := fastGroup
			opts.OutOfRange = tt.policy
			cs := &counters{}
			src, err := kafkasource.New(testGroup(t, kafkasource.Group{Brokers: brokers, ID: "oor-" + tt.name, Topics: []string{topic}}),
				coord, cs.newProcessor, opts)
			require.NoError(t, err)
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- src.Run(rctx) }()

			if tt.wantErr {
				select {
				case err := <-errc:
					var oerr *kafkasource.OffsetOutOfRangeError
					require.ErrorAs(t, err, &oerr)
					assert.Equal(t, kafkasource.OffsetOutOfRangeError{
						Partition: checkpoint.TopicPartition{Topic: topic}, Offset: 1000, First: 0, Last: 50, CheckpointID: 9,
					}, *oerr)
				case <-time.After(30 * time.Second):
					t.Fatal("Run did not fail")
				}
				return
			}
			require.Eventually(t, func() bool {
				_ = src.Checkpoint(ctx)
				cp, err := store.Latest(ctx, checkpoint.TopicPartition{Topic: topic})
				return err == nil && cp.NextOffset == 50
			}, 30*time.Second, 50*time.Millisecond)
			cp, err := store.Latest(ctx, checkpoint.TopicPartition{Topic: topic})
			require.NoError(t, err)
			count, sum := decodeCounter(t, cp.States["counter"])
			assert.Equal(t, int64(1050), count, "restored state kept, 50 records added")
			assert.Equal(t, 7+sumTo(50), sum)
			cancel()
			require.NoError(t, <-errc)
		})
	}
}
