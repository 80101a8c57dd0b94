package kafkatxn_test

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// The broker stops answering (SIGSTOP) while a batch is in flight, for
// longer than the DeliveryTimeout. With SettleUnknown the Produce does not
// give up with ErrOutcomeUnknown: it sends the batch again with its
// sequence number until the broker, resumed, answers, and returns its
// offset; the batch is in the log once. A Produce of the same partition
// waiting behind it ends with its ctx, having sent nothing (a definite
// error), rather than wait for the outage to end.
func TestProducerSettlesUnknownOutcome(t *testing.T) {
	kb := testkit.StartApacheKafka(t)
	brokers := kb.Brokers()
	topic := testkit.Name(t, "settle")
	testkit.CreateTopic(t, brokers, topic, 1)
	p, err := kafkatxn.NewProducer(context.Background(), brokers, kafkatxn.ProducerOptions{
		DeliveryTimeout: time.Second, RequestTimeout: 500 * time.Millisecond, SettleUnknown: true,
	})
	require.NoError(t, err)
	defer p.Close()
	_, err = p.Produce(context.Background(), topic, 0, kafkatxn.Record{Value: []byte("warm-up")})
	require.NoError(t, err)

	pid := kb.NodePID(1)
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	var once sync.Once
	resume := func() { once.Do(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) }
	t.Cleanup(resume)

	type result struct {
		off int64
		err error
	}
	first := make(chan result, 1)
	go func() {
		off, err := p.Produce(context.Background(), topic, 0, kafkatxn.Record{Value: []byte("in-flight")})
		first <- result{off, err}
	}()
	// The first takes the partition's turn (nothing to wait for before it
	// sends); the second then waits behind it.
	require.Eventually(t, func() bool { return kafkatxn.Sending(p, topic, 0) }, time.Minute, time.Millisecond,
		"the first Produce never took the partition's turn")
	time.Sleep(100 * time.Millisecond) // into its request
	select {
	case r := <-first:
		t.Fatalf("Produce returned during the outage: %d, %v", r.off, r.err)
	default:
	}
	queued := make(chan error, 1)
	start := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := p.Produce(ctx, topic, 0, kafkatxn.Record{Value: []byte("queued")})
		queued <- err
	}()
	select {
	case err = <-queued:
	case <-time.After(time.Minute):
		// It was sent after all and settles until the broker answers:
		// resume it so the test ends, failing, rather than hang.
		resume()
		t.Fatal("the queued Produce did not end with its ctx")
	}
	waited := time.Since(start)
	require.Error(t, err)
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	assert.False(t, kafkatxn.IsOutcomeUnknown(err), "nothing was sent: %v", err)
	assert.Less(t, waited, 30*time.Second, "ended with its ctx, not with the outage")

	time.Sleep(3 * time.Second) // past the DeliveryTimeout, thrice
	select {
	case r := <-first:
		t.Fatalf("Produce returned during the outage: %d, %v", r.off, r.err)
	default:
	}
	resume()
	var r result
	select {
	case r = <-first:
	case <-time.After(2 * time.Minute):
		t.Fatal("Produce did not return after the broker resumed")
	}
	require.NoError(t, r.err)
	assert.Equal(t, int64(1), r.off)
	assert.Equal(t, map[string]int{"warm-up": 1, "in-flight": 1}, readAll(t, brokers, topic, 1))
}
