package demo

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// publishCounts reads the faults the running gateway injected from its
// /metrics.
func (d *Pipeline) publishCounts(ctx context.Context) (unreachable, ackLost float64, err error) {
	if unreachable, err = d.Gateway.Counter(ctx, "gateway_injected_faults_total", `fault="unreachable"`); err != nil {
		return
	}
	ackLost, err = d.Gateway.Counter(ctx, "gateway_injected_faults_total", `fault="ack_lost"`)
	return
}

// deliver is stage 1: the providers deliver every event, some twice at
// once, and retry until accepted, while the fault plan strikes.
func (d *Pipeline) deliver(ctx context.Context, events []Delivery) error {
	d.Say("delivering %d webhooks (GitHub example payloads varied, Jira issue payloads, pings, 30%% of GitHub ones form-encoded) of %d organisations (%v of event time)",
		len(events), d.Config.Orgs, EventSpan)
	// Which events are delivered twice is drawn up front, from the seed.
	dups := make([]bool, len(events))
	for i := range dups {
		dups[i] = d.Rng.Float64() < d.Provider.DupRate
	}
	var (
		delivered  atomic.Int64
		deliverErr error
		errOnce    sync.Once
		wg         sync.WaitGroup
	)
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				if d.naiveProv != nil {
					d.deliverNaive(ctx, events[i], dups[i])
				}
				if err := d.Provider.Deliver(ctx, events[i], dups[i]); err != nil {
					errOnce.Do(func() { deliverErr = err })
					continue
				}
				delivered.Add(1)
			}
		})
	}
	for i := range events {
		d.faults.At(ctx, i, d.Supervisor, d.Servers, d.Say)
		if w := events[i].Want; w != nil {
			d.board.sending(w.Time)
		}
		select {
		case work <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		// Spread the deliveries over a few seconds of wall time so that the
		// faults land while data flows.
		if i%50 == 49 {
			time.Sleep(40 * time.Millisecond)
		}
	}
	close(work)
	wg.Wait()
	if deliverErr != nil {
		return deliverErr
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	d.Say("delivered: %d requests for %d webhooks (%d duplicate deliveries, %d retries after 503, %d answered from the idempotency store; %d pings and uncounted activities answered 200 unpublished, %d unnormalizable payloads answered 422)",
		d.Provider.Requests.Load(), delivered.Load(), d.Provider.Duplicates.Load(), d.Provider.Retries.Load(), d.Provider.Replayed.Load(),
		d.Provider.Ignored.Load(), d.Provider.Rejected.Load())
	unreachable, ackLost, err := d.publishCounts(ctx)
	if err != nil {
		return fmt.Errorf("the gateway's /metrics: %w", err)
	}
	records, distinct, err := topicDeliveries(ctx, d.Servers.Brokers, d.Topic, d.Config.Partitions)
	if err != nil {
		return fmt.Errorf("read %s back: %w", d.Topic, err)
	}
	d.result.Records, d.result.Distinct = records, distinct
	if d.Servers.Kfake != nil {
		armed, hit := d.faults.LostAcks(ctx, d.Servers)
		d.result.LostAcks = hit
		d.Say("Kafka publishes (idempotent producer): %d acknowledgements lost at the wire (of %d armed: the broker wrote the batch and closed the connection instead of answering), %.0f publishes failed before the write (injected at the gateway); the topic holds %d records for %d distinct deliveries: %d written twice",
			hit, armed, unreachable, records, distinct, records-distinct)
	} else {
		d.Say("Kafka publishes: %.0f acknowledgements lost (injected at the gateway after the write), %.0f publishes failed before the write (injected); the topic holds %d records for %d distinct deliveries: %d written twice",
			ackLost, unreachable, records, distinct, records-distinct)
	}
	return nil
}

// redeliverAfterGatewayRestart restarts the gateway (a deploy), then an
// operator redelivers a few past deliveries by hand, as GitHub allows for
// three days. Keys in memory are gone with the old process, so the new
// gateway publishes those events again and the stream processor's dedup
// must drop them; keys in Redis survive and the gateway answers with the
// stored 2xx.
func (d *Pipeline) redeliverAfterGatewayRestart(ctx context.Context, events []Delivery) error {
	if err := d.Gateway.Stop(); err != nil {
		return fmt.Errorf("gateway: SIGTERM: %w", err)
	}
	if err := d.StartGateway(ctx, false); err != nil {
		return err
	}
	d.Provider.SetBaseURL(d.Gateway.URL())
	n := max(len(events)/20, 1)
	replayedBefore := d.Provider.Replayed.Load()
	for range n {
		if err := d.Provider.Deliver(ctx, events[d.Rng.IntN(len(events))], false); err != nil {
			return err
		}
	}
	records, distinct, err := topicDeliveries(ctx, d.Servers.Brokers, d.Topic, d.Config.Partitions)
	if err != nil {
		return fmt.Errorf("read %s back: %w", d.Topic, err)
	}
	d.Say("fault: gateway restarted (SIGTERM, pid %d now); %d past deliveries redelivered by hand: %d written to Kafka again, %d answered from the idempotency store",
		d.Gateway.PID(), n, (records-distinct)-(d.result.Records-d.result.Distinct), d.Provider.Replayed.Load()-replayedBefore)
	return nil
}
