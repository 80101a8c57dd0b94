package testkit

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/kafkatxn"
)

// readTopicRound bounds one fetch of ReadTopic. A read that has passed its
// last committed record fetches markers and aborted records only, which
// kafkatxn.Reader skips while it waits for a record: the round ends it,
// and the reader's offset says whether the end was reached.
const readTopicRound = time.Second

// readTopicStall is how long ReadTopic waits at a transaction that is
// still open. The marker of one just committed follows its EndTxn answer
// (the coordinator writes it after answering), within milliseconds on a
// quiet machine.
const readTopicStall = 5 * time.Second

// ReadTopic returns the committed records of topic's partition, from its
// log start offset to its high watermark as it stands at the call, in
// offset order. It reads with isolation level read_committed through
// kafkatxn.Reader, which drops the records of aborted transactions and the
// transaction control records the way the Java consumer does (kafka-go's
// own ReadCommitted only stops at the last stable offset and hands out
// both). A transaction still open below that high watermark hides its
// records and all after them, as from any read_committed consumer: the read
// ends once it has not moved for five seconds. It fails the test on error.
func ReadTopic(t testing.TB, brokers []string, topic string, partition int) []kafka.Message {
	t.Helper()
	ctx, cancel := setupContext(t)
	defer cancel()
	ms, err := readTopic(ctx, brokers, topic, partition)
	if err != nil {
		t.Fatalf("testkit: ReadTopic: %v", err)
	}
	return ms
}

func readTopic(ctx context.Context, brokers []string, topic string, partition int) ([]kafka.Message, error) {
	conn, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, partition)
	if err != nil {
		return nil, fmt.Errorf("leader of %s/%d: %w", topic, partition, err)
	}
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	start, end, err := conn.ReadOffsets()
	_ = conn.Close()
	if err != nil {
		return nil, fmt.Errorf("offsets of %s/%d: %w", topic, partition, err)
	}
	r, err := kafkatxn.NewReader(brokers, topic, partition, start, kafkatxn.ReaderOptions{MaxWait: 100 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []kafka.Message
	pos, moved := r.Offset(), time.Now()
	for r.Offset() < end {
		round, cancel := context.WithTimeout(ctx, readTopicRound)
		ms, err := r.Fetch(round)
		cancel()
		for _, m := range ms {
			if m.Offset < end {
				out = append(out, m)
			}
		}
		if r.Offset() != pos {
			pos, moved = r.Offset(), time.Now()
		}
		var kerr kafka.Error
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return nil, fmt.Errorf("%s/%d at offset %d of %d: %w", topic, partition, r.Offset(), end, err)
		case round.Err() != nil:
			// Only markers or aborted records were left (the loop's
			// condition ends the read), or a transaction is open.
			if time.Since(moved) >= readTopicStall {
				return out, nil
			}
		case errors.As(err, &kerr) && kerr.Temporary():
			// A leader moving, for example; the reader dials again.
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		default:
			return nil, err
		}
	}
	return out, nil
}
