package main

import (
	"context"
	"log/slog"
	"sync"

	"github.com/exactlyonce/exactlyonce/idempotency"
)

// naivePublish is the first article's gateway, kept as its bug for
// demonstrations (-naive gateway): the publish runs in the background and
// is never awaited, so the handler marks the delivery id done and answers
// 2xx before Kafka acknowledged anything. A publish that fails is only
// logged: the provider got its 2xx and does not retry, and a retry or
// redelivery would be answered from the store as a duplicate. The event is
// lost.
type naivePublish struct {
	next     idempotency.Func
	log      *slog.Logger
	inflight sync.WaitGroup
}

func (n *naivePublish) publish(_ context.Context, d idempotency.Delivery) error {
	n.inflight.Go(func() {
		if err := n.next(context.Background(), d); err != nil {
			n.log.Warn("naive gateway: publish failed after the delivery was answered 2xx: the event is lost", "delivery", d.Key, "err", err)
		}
	})
	return nil
}

// wait waits for the publishes in flight, at shutdown.
func (n *naivePublish) wait() { n.inflight.Wait() }
