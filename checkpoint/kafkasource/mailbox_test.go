package kafkasource

import (
	"errors"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"
)

// TestMailboxPutAllTakesAWholeFetch: a fetch is added whole once fewer than
// max records wait, so the fetcher is free to send its next request while
// the chain works through it; it waits while max records wait; the records
// come out in order, each once, and the fetcher's error after them.
func TestMailboxPutAllTakesAWholeFetch(t *testing.T) {
	msgs := func(from, n int) []kafka.Message {
		ms := make([]kafka.Message, n)
		for i := range ms {
			ms[i].Offset = int64(from + i)
		}
		return ms
	}
	mb := newMailbox(4, 0)
	done := make(chan struct{})
	first := make(chan bool, 1)
	go func() { first <- mb.putAll(msgs(0, 10), 10, 0, nil, done) }()
	select {
	case ok := <-first:
		require.True(t, ok)
	case <-time.After(5 * time.Second):
		close(done)
		t.Fatal("ten records into room for four were not added whole: putAll waited for room")
	}

	second := make(chan bool, 1)
	go func() { second <- mb.putAll(msgs(10, 3), 13, 0, errors.New("end of fetches"), done) }()
	select {
	case <-second:
		t.Fatal("putAll did not wait while max records waited")
	case <-time.After(50 * time.Millisecond):
	}

	var got []int64
	var err error
	spare := make([]kafka.Message, 0, 4)
	for err == nil {
		<-mb.ready
		var batch []kafka.Message
		batch, _, _, err = mb.take(spare)
		for _, m := range batch {
			got = append(got, m.Offset)
		}
		spare = batch
	}
	require.True(t, <-second)
	require.EqualError(t, err, "end of fetches")
	want := make([]int64, 13)
	for i := range want {
		want[i] = int64(i)
	}
	require.Equal(t, want, got)
}
