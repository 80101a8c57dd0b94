package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/harness/internal/chaos/history"
	"github.com/exactlyonce/exactlyonce/harness/internal/demo"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
	"github.com/exactlyonce/exactlyonce/internal/embedded"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
)

// The run's history (package history): every webhook send and its answer,
// the transactions of a transactional writer of the harness's own and
// their outcomes, the polls of a consumer of the harness's own on the
// pipeline's topic, on the writer's and on the processors' output (with
// Config.KafkaSink), the consumer group's committed
// offsets as seen every half second, and at the end the final reads of
// ClickHouse and of the topics. The checkers run on it beside the count
// comparison, and any finding fails the run.
//
// The streams and stores of the history:
//   - stream "webhooks": the counted deliveries (Delivery.Want set), key
//     source/event id; held by the stores "kafka.<topic>" (a key may be
//     there twice: a lost acknowledgement's retry writes it again) and
//     "clickhouse.normalized_events" (exactly once);
//   - stream "txn": the writer's keys, held by "kafka.<topic>_txn"
//     (exactly once, none of an aborted transaction);
//   - with Config.KafkaSink, stream "processed": one acknowledged write
//     (process "input") per record of the pipeline's topic the final read
//     found, poison records aside, key <partition>/<offset>; held by
//     "kafka.<topic>_out" (exactly once).

const (
	streamWebhooks = "webhooks"
	streamTxn      = "txn"
	// streamProcessed is what the processors' output leg (Config.KafkaSink)
	// must write once each: every record of the pipeline's topic but the
	// poison ones, key <partition>/<offset>, as the final read of the
	// topic finds them.
	streamProcessed = "processed"
	// outTxnTimeout is the output leg's transaction timeout.
	outTxnTimeout = 6 * time.Second
	// txnPartitions is the partition count of the writer's topic.
	txnPartitions = 2
	// txnTimeout is the writer's transaction timeout: its transactions
	// last milliseconds, and one left open by a fault ends this soon.
	txnTimeout = 4 * time.Second
	// Keys of records no operation of the history wrote: deliveries the
	// metrics do not count (published, never in ClickHouse), records
	// without the gateway's headers (the demo's poison records), the
	// second writer's rows.
	uncountedKey = "uncounted:"
	rawKey       = "raw:"
	otherKey     = "other:"
)

// recorder is the run's history and what fills it.
type recorder struct {
	h    *history.Recorder
	file *os.File // History's, nil when none was asked for

	mu      sync.Mutex
	counted map[string]bool // keys of the counted deliveries sent so far

	stop func() // stops the writer, the pollers and the commit looker
}

func deliveryKey(source, id string) string { return source + "/" + id }

// startHistory opens the history and starts its writer, pollers and commit
// looker; stopHistory stops them.
func (c *chaos) startHistory(ctx context.Context) error {
	r := &recorder{counted: map[string]bool{}}
	if c.cfg.History != "" {
		f, err := os.Create(c.cfg.History)
		if err != nil {
			return fmt.Errorf("chaos: the history file: %w", err)
		}
		r.file = f
		r.h = history.NewRecorder(f)
	} else {
		r.h = history.NewRecorder(nil)
	}
	c.hist = r
	d := c.d
	d.Provider.Trace = c.traceSend
	if err := embedded.CreateTopic(ctx, d.Servers.Brokers, c.txnTopic(), txnPartitions); err != nil {
		return fmt.Errorf("chaos: the transactional writer's topic: %w", err)
	}
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { c.writeTransactions(bg) })
	for p := range c.cfg.Partitions {
		wg.Go(func() { c.poll(bg, d.Topic, p) })
	}
	for p := range txnPartitions {
		wg.Go(func() { c.poll(bg, c.txnTopic(), p) })
	}
	if c.cfg.KafkaSink {
		for p := range c.cfg.Partitions {
			wg.Go(func() { c.poll(bg, c.outTopic(), p) })
		}
	}
	wg.Go(func() { c.lookAtCommits(bg) })
	r.stop = func() { stop(); wg.Wait() }
	d.Cleanups = append(d.Cleanups, c.stopHistory)
	return nil
}

// stopHistory stops the writer, the pollers and the commit looker; safe to
// call again.
func (c *chaos) stopHistory() {
	if c.hist != nil && c.hist.stop != nil {
		c.hist.stop()
		c.hist.stop = nil
	}
}

func (c *chaos) txnTopic() string { return c.d.Topic + "_txn" }

// outTopic is the processors' output leg's topic (Config.KafkaSink).
func (c *chaos) outTopic() string { return c.d.Topic + "_out" }

// sent notes that the counted delivery with key is about to be sent, so
// that the pollers tell its records from the uncounted ones.
func (r *recorder) sent(key string) {
	r.mu.Lock()
	r.counted[key] = true
	r.mu.Unlock()
}

// keyOf is the history's key of a record of the pipeline's topic.
func (r *recorder) keyOf(m kafka.Message) string {
	md, err := kafkapub.ReadMetadata(m)
	if err != nil {
		return fmt.Sprintf("%s%d/%d", rawKey, m.Partition, m.Offset)
	}
	k := deliveryKey(md.Source, md.EventID)
	r.mu.Lock()
	counted := r.counted[k]
	r.mu.Unlock()
	if !counted {
		return uncountedKey + k
	}
	return k
}

// traceSend records one request of a counted delivery (demo.Provider's
// Trace): 2xx acknowledged, 4xx refused, anything else unknown.
func (c *chaos) traceSend(d demo.Delivery) func(int, error) {
	if d.Want == nil {
		return func(int, error) {}
	}
	v := history.Value{Table: streamWebhooks, Key: deliveryKey(d.Want.Source, d.Want.EventID)}
	c.hist.h.Add(history.Op{Process: d.Provider, Type: history.Invoke, F: history.Send, Value: v})
	return func(status int, err error) {
		t := history.Info
		switch {
		case err == nil && status/100 == 2:
			t = history.OK
		case err == nil && status/100 == 4:
			t = history.Fail
		}
		v := v
		if err != nil {
			v.Detail = err.Error()
		} else {
			v.Detail = fmt.Sprint(status)
		}
		c.hist.h.Add(history.Op{Process: d.Provider, Type: t, F: history.Send, Value: v})
	}
}

// keyFunc returns how the history keys a record of topic.
func (c *chaos) keyFunc(topic string) func(kafka.Message) string {
	if topic == c.d.Topic {
		return c.hist.keyOf
	}
	return func(m kafka.Message) string { return string(m.Key) }
}

// poll reads one partition of topic with isolation read_committed from its
// start until ctx ends, recording each fetch. After an error (a broker
// killed, a fault) it reads on from where it stood, with a new
// connection.
func (c *chaos) poll(ctx context.Context, topic string, partition int) {
	key := c.keyFunc(topic)
	process := fmt.Sprintf("poller-%s-%d", strings.TrimPrefix(topic, c.d.Topic), partition)
	next := int64(0)
	for ctx.Err() == nil {
		r, err := kafkatxn.NewReader(c.d.Servers.Brokers, topic, partition, next, kafkatxn.ReaderOptions{MaxWait: 200 * time.Millisecond})
		if err != nil {
			demo.Sleep(ctx, nil, 200*time.Millisecond)
			continue
		}
		for ctx.Err() == nil {
			fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			ms, err := r.Fetch(fctx)
			cancel()
			if err != nil {
				break
			}
			v := history.Value{Table: "kafka." + topic, Partition: partition, Offsets: make([]int64, len(ms)), Keys: make([]string, len(ms))}
			for i, m := range ms {
				v.Offsets[i], v.Keys[i] = m.Offset, key(m)
			}
			c.hist.h.Add(history.Op{Process: process, Type: history.OK, F: history.Poll, Value: v})
		}
		next = r.Offset()
		_ = r.Close()
		demo.Sleep(ctx, nil, 100*time.Millisecond)
	}
}

// lookAtCommits records the consumer group's committed offsets of the
// pipeline's topic every half second, each time one changed.
func (c *chaos) lookAtCommits(ctx context.Context) {
	d := c.d
	all := make([]int, c.cfg.Partitions)
	for p := range all {
		all[p] = p
	}
	seen := map[int]int64{}
	for demo.Sleep(ctx, nil, 500*time.Millisecond) {
		client, closeClient := demo.KafkaClient(d.Servers.Brokers, 2*time.Second)
		resp, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: d.Supervisor.Group, Topics: map[string][]int{d.Topic: all}})
		closeClient()
		if err != nil || resp.Error != nil {
			continue
		}
		for _, p := range resp.Topics[d.Topic] {
			if p.Error != nil || p.CommittedOffset < 0 {
				continue
			}
			if o, ok := seen[p.Partition]; ok && o == p.CommittedOffset {
				continue
			}
			seen[p.Partition] = p.CommittedOffset
			c.hist.h.Add(history.Op{Process: "group", Type: history.OK, F: history.Commit,
				Value: history.Value{Table: "kafka." + d.Topic, Partition: p.Partition, Offset: p.CommittedOffset}})
		}
	}
}

// checkHistory runs the checkers on the history and fails the run on any
// finding. A failing run's history is written to a file (History's, or one
// in the temporary directory) and its path said.
func (c *chaos) checkHistory(ctx context.Context) error {
	c.stopHistory()
	if err := c.finalReads(ctx); err != nil {
		return fmt.Errorf("chaos: the history's final reads: %w", err)
	}
	ops := c.hist.h.Ops()
	res := c.res
	res.judgeHistory(ops, c.d.Topic)
	if err := c.hist.h.Flush(); err != nil {
		return fmt.Errorf("chaos: write the history: %w", err)
	}
	res.History = c.cfg.History
	if len(res.HistoryFindings) > 0 {
		dir := c.cfg.Dir
		if dir == "" {
			dir = os.TempDir()
		}
		files, err := dumpPartitions(ctx, c.d.Servers.Brokers, res.HistoryFindings, dir)
		if len(files) > 0 {
			c.say("the Kafka partitions the history's findings name, batch by batch as the broker holds them: %s", strings.Join(files, " "))
		}
		if err != nil {
			c.say("chaos: dumping the partitions the findings name: %v", err)
		}
		if res.History == "" {
			path := filepath.Join(os.TempDir(), fmt.Sprintf("exactlyonce-chaos-history-%d.jsonl", c.cfg.Seed))
			f, err := os.Create(path)
			if err == nil {
				err = errors.Join(history.Encode(f, ops), f.Close())
			}
			if err != nil {
				return fmt.Errorf("chaos: write the failing run's history: %w", err)
			}
			res.History = path
		}
	}
	return nil
}

// closeHistory closes History's file.
func (c *chaos) closeHistory() error {
	if c.hist == nil || c.hist.file == nil {
		return nil
	}
	err := errors.Join(c.hist.h.Flush(), c.hist.file.Close())
	c.hist.file = nil
	return err
}

// judgeHistory runs the checkers on ops, the history of a run on the
// pipeline's topic, and fails r on any finding, listing the first twenty
// among its differences.
func (r *Result) judgeHistory(ops []history.Op, topic string) {
	findings := history.Check(ops, history.Options{
		MayDuplicate: []string{"kafka." + topic},
		Foreign: func(k string) bool {
			return strings.HasPrefix(k, uncountedKey) || strings.HasPrefix(k, rawKey) || strings.HasPrefix(k, otherKey)
		},
	})
	r.HistoryOps, r.HistoryFindings = len(ops), findings
	if r.Transactions == nil {
		r.Transactions = map[string]int{}
	}
	for _, op := range ops {
		if op.F == history.Txn && op.Type != history.Invoke {
			r.Transactions[string(op.Type)]++
		}
	}
	if len(findings) == 0 {
		return
	}
	r.Pass = false
	for _, f := range findings[:min(len(findings), 20)] {
		r.Differences = append(r.Differences, "history: "+f.String())
	}
	if len(findings) > 20 {
		r.Differences = append(r.Differences, fmt.Sprintf("history: ... and %d more findings", len(findings)-20))
	}
}
