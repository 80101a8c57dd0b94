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

// deadStorage fails every write once dead: the process that owns the
// journal is gone, though an insert it sent still reaches ClickHouse.
type deadStorage struct {
	checkpoint.Storage
	dead atomic.Bool
}

var errDead = errors.New("injected: the process is dead")

func (d *deadStorage) Create(ctx context.Context, name string, data []byte) (checkpoint.Version, error) {
	if d.dead.Load() {
		return "", errDead
	}
	return d.Storage.Create(ctx, name, data)
}

func (d *deadStorage) Put(ctx context.Context, name string, data []byte) error {
	if d.dead.Load() {
		return errDead
	}
	return d.Storage.Put(ctx, name, data)
}

func (d *deadStorage) Replace(ctx context.Context, name string, data []byte, v checkpoint.Version) (checkpoint.Version, error) {
	if d.dead.Load() {
		return "", errDead
	}
	return d.Storage.Replace(ctx, name, data, v)
}

func (d *deadStorage) Delete(ctx context.Context, name string) error {
	if d.dead.Load() {
		return errDead
	}
	return d.Storage.Delete(ctx, name)
}
