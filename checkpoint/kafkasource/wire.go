package kafkasource

// The chain's fetch path: internal/kafkawire's Fetcher, one Fetch request
// at a time for the chain's partition, read_committed, its response read
// whole into a fresh buffer and the record batches decoded from that buffer
// into kafka.Messages whose Key, Value and Headers are windows of it.
// kafka-go's Reader decodes the same bytes with a copy and an allocation
// per key, value and header, a read deadline per record, and a channel send
// per record to the goroutine that fetches, and hands out aborted records
// and control records; in the end-to-end benchmark the chain on it ran at
// 0.69x of this path's throughput with 15 allocations a record against 1
// (docs/bench/history.md).

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/internal/backoff"
	"github.com/exactlyonce/exactlyonce/internal/kafkawire"
)

// FormatError is the error (wrapped) a chain stops with when its partition
// holds a record batch older than the v2 format (Kafka before 0.11, not
// converted by the broker): it names the partition and the batch's offset.
// Nothing from that offset on is processed; the chain does not restart.
type FormatError = kafkawire.FormatError

// wireFetcher reads one partition from next on, for one chain, retrying
// what kafkawire.Fetcher reports as failed. It hands out a whole fetch at
// a time (fetchBatch): the chain's only way to read, since kafka-go's
// Reader and its record-at-a-time FetchMessage were replaced by this path.
type wireFetcher struct {
	f      kafkawire.Fetcher
	log    *slog.Logger
	failed int // consecutive failed fetches, for the backoff
}

// newWireFetcher returns the chain's own fetcher of p, positioned at next.
func (s *Source) newWireFetcher(p checkpoint.TopicPartition, next int64) *wireFetcher {
	return &wireFetcher{
		f: kafkawire.Fetcher{Dialer: s.opts.Dialer, Brokers: s.group.Brokers, Topic: p.Topic, Partition: p.Partition,
			Next: next, MaxBytes: s.opts.MaxBytes, MaxWait: s.opts.MaxWait},
		log: s.log,
	}
}

// fetchBatch returns the next fetched records, at least one, waiting until
// there are some or ctx ends; or none, when a fetch moved f.f.Next past
// control or aborted records only. Connection failures and broker errors are
// retried with a backoff, as kafka-go's Reader does; an offset out of range
// is returned (wrapping kafka.OffsetOutOfRange), and so is a batch older
// than v2 (*FormatError). The returned slice is reused by the next call;
// the messages' contents are not.
func (f *wireFetcher) fetchBatch(ctx context.Context) ([]kafka.Message, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		from := f.f.Next
		ms, err := f.f.Fetch(ctx)
		var ferr *FormatError
		switch {
		case err == nil:
			f.failed = 0
			if len(ms) > 0 || f.f.Next > from {
				return ms, nil
			}
			continue
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, kafka.OffsetOutOfRange), errors.As(err, &ferr):
			return nil, err
		}
		f.failed++
		level := slog.LevelDebug // a broker restarting or moving is routine
		var kerr kafka.Error
		if errors.Is(err, kafkawire.ErrMalformed) || (errors.As(err, &kerr) && !kerr.Temporary()) {
			level = slog.LevelWarn // not routine (a refused login, say): say so while retrying
		}
		f.log.Log(ctx, level, "kafkasource: fetch failed, retrying", "topic", f.f.Topic, "partition", f.f.Partition,
			"offset", f.f.Next, "failures", f.failed, "err", err)
		// Doubling from 100 ms to 1 s, no jitter: each partition's fetcher
		// is on its own schedule already.
		wait := backoff.Policy{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2}.Delay(f.failed, nil)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// Close closes the fetcher's connection. It must not be called beside a
// fetchBatch: the chain calls it once its fetch goroutine ended.
func (f *wireFetcher) Close() error {
	f.f.Close()
	return nil
}
