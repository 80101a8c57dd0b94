package peers

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// input is the generated topic's content and its ground truth.
type input struct {
	events   int              // records in the topic
	unique   int              // distinct event ids, sentinels included
	windows  map[window]int64 // first sights per tenant and minute, sentinels excluded
	realSum  int64            // sum of windows
	sentinel string           // tenant prefix of the sentinels
}

type window struct {
	tenant string
	start  int64 // Unix ms
}

// jsonEvent is a record's value.
type jsonEvent struct {
	ID      string `json:"id"`
	Tenant  string `json:"tenant"`
	TS      int64  `json:"ts"`
	Kind    string `json:"kind"`
	Payload string `json:"payload"`
}

const (
	partitions = 4
	tenants    = 200
	dupRate    = 0.05
)

var kinds = []string{"push", "pull_request", "issues", "deployment_status", "jira:issue_updated"}

// generate produces n records to topic: partition p holds the tenants
// t-XXX with XXX%4 == p, event times go forward evenly over minutes
// minutes with up to 2 s of disorder, and ~5 % of records re-send one of
// the partition's last 1,000 events (same id, time and body). The last
// record of each partition is a sentinel, tenant "~end-p", an hour after
// the rest: it moves the event-time watermark past every real window.
func generate(t testing.TB, brokers []string, topic string, n, minutes int) input {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(1<<16), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	in := input{windows: map[window]int64{}, sentinel: "~end-"}
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	spanMs := int64(minutes) * 60_000
	perPart := n / partitions
	for p := range partitions {
		rng := rand.New(rand.NewPCG(44, uint64(p)))
		recent := make([]*kgo.Record, 0, 1000)
		batch := make([]*kgo.Record, 0, 10_000)
		flush := func() {
			if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
				t.Fatalf("produce partition %d: %v", p, err)
			}
			batch = batch[:0]
		}
		for i := range perPart {
			var r *kgo.Record
			if len(recent) > 0 && rng.Float64() < dupRate {
				orig := recent[rng.IntN(len(recent))]
				dup := *orig
				r = &dup
			} else {
				ts := base + int64(i)*spanMs/int64(perPart) - rng.Int64N(2000)
				tenant := fmt.Sprintf("t-%03d", rng.IntN(tenants/partitions)*partitions+p)
				ev := jsonEvent{
					ID:     fmt.Sprintf("%08x-%04x-4%03x-%012x", rng.Uint32(), rng.IntN(1<<16), rng.IntN(1<<12), rng.Uint64()>>16),
					Tenant: tenant, TS: ts, Kind: kinds[rng.IntN(len(kinds))],
					Payload: fmt.Sprintf("repo %s/service-%d, sender dev-%d, number %d", tenant, rng.IntN(20), rng.IntN(300), rng.IntN(5000)),
				}
				r = record(t, topic, int32(p), ev)
				in.unique++
				in.windows[window{tenant, ts - ts%60_000}]++
				in.realSum++
				if len(recent) < cap(recent) {
					recent = append(recent, r)
				} else {
					recent[rng.IntN(len(recent))] = r
				}
			}
			batch = append(batch, r)
			in.events++
			if len(batch) == cap(batch) {
				flush()
			}
		}
		end := jsonEvent{ID: fmt.Sprintf("sentinel-%d", p), Tenant: fmt.Sprintf("%s%d", in.sentinel, p),
			TS: base + spanMs + time.Hour.Milliseconds(), Kind: "end"}
		batch = append(batch, record(t, topic, int32(p), end))
		in.events++
		in.unique++
		flush()
	}
	return in
}

func record(t testing.TB, topic string, p int32, ev jsonEvent) *kgo.Record {
	v, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: topic, Partition: p, Key: []byte(ev.Tenant), Value: v, Timestamp: time.UnixMilli(ev.TS)}
}
