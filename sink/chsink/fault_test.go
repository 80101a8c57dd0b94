package chsink_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// faultStorage fails the ack write of a journal entry (the second Put of
// the same entry) while failAck is set.
type faultStorage struct {
	checkpoint.Storage
	failAck atomic.Bool
}

func (f *faultStorage) Put(ctx context.Context, name string, data []byte) error {
	if f.failAck.Load() && strings.Contains(string(data), `"acked":true`) {
		return errors.New("injected: ack write lost")
	}
	return f.Storage.Put(ctx, name, data)
}
