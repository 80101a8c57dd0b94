package kafkasource

import (
	"context"
	"fmt"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
)

// fetcher is what a chain reads its partition with: its own wireFetcher,
// a kafka-go Reader (Options.KafkaGoReader, or a Dialer with TLS, SASL or a
// Resolver), or with Options.FilterAborted a kafkatxn.Reader.
type fetcher interface {
	FetchMessage(ctx context.Context) (kafka.Message, error)
	Close() error
}

// newFetcher returns the chain's reader of p, positioned at next.
func (s *Source) newFetcher(p checkpoint.TopicPartition, next int64) (fetcher, error) {
	if s.opts.FilterAborted && !s.opts.ReadUncommitted {
		r, err := kafkatxn.NewReader(s.group.Brokers, p.Topic, p.Partition, next,
			kafkatxn.ReaderOptions{MaxBytes: s.opts.MaxBytes, MaxWait: s.opts.MaxWait})
		if err != nil {
			return nil, fmt.Errorf("kafkasource: %s: %w", p, err)
		}
		return &committedFetcher{r: r}, nil
	}
	if !s.opts.KafkaGoReader && wireUsable(s.opts.Dialer) {
		return s.newWireFetcher(p, next), nil
	}
	return s.newKafkaGoReader(p, next)
}

// batchFetcher is a fetcher that also hands out a whole fetch at once.
type batchFetcher interface {
	fetchBatch(ctx context.Context) ([]kafka.Message, error)
}

// newKafkaGoReader returns kafka-go's Reader of p, positioned at next.
func (s *Source) newKafkaGoReader(p checkpoint.TopicPartition, next int64) (fetcher, error) {
	iso := kafka.ReadCommitted
	if s.opts.ReadUncommitted {
		iso = kafka.ReadUncommitted
	}
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: s.group.Brokers, Topic: p.Topic, Partition: p.Partition, Dialer: s.opts.Dialer,
		MinBytes: 1, MaxBytes: s.opts.MaxBytes, MaxWait: s.opts.MaxWait,
		IsolationLevel: iso, OffsetOutOfRangeError: true,
		ErrorLogger: kafka.LoggerFunc(func(f string, a ...any) {
			s.log.Debug("kafkasource: kafka-go reader: " + fmt.Sprintf(f, a...))
		}),
	})
	if err := r.SetOffset(next); err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("kafkasource: %s: set offset %d: %w", p, next, err)
	}
	return r, nil
}

// committedFetcher hands out a kafkatxn.Reader's batches one message at a
// time.
type committedFetcher struct {
	r   *kafkatxn.Reader
	buf []kafka.Message
}

func (f *committedFetcher) FetchMessage(ctx context.Context) (kafka.Message, error) {
	for len(f.buf) == 0 {
		ms, err := f.r.Fetch(ctx)
		if err != nil {
			return kafka.Message{}, err
		}
		f.buf = ms
	}
	m := f.buf[0]
	f.buf = f.buf[1:]
	return m, nil
}

func (f *committedFetcher) Close() error { return f.r.Close() }
