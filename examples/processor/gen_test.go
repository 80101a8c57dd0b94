package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
)

// genSpec describes an input of gateway-shaped records, as kafkapub
// publishes them: the tenant as key, the delivery's metadata in headers, a
// JSON body as value (about 300 bytes here; real provider payloads are
// larger, but this chain never reads them).
type genSpec struct {
	partitions, perPart int
	tenants             int
	dupRate             float64 // share of records that repeat an earlier delivery
	seed                uint64
}

var eventTypes = []struct{ source, typ string }{
	{"github", "pull_request"}, {"github", "pull_request_review"}, {"github", "push"},
	{"github", "issues"}, {"github", "deployment_status"}, {"jira", "jira:issue_created"},
	{"jira", "jira:issue_updated"},
}

// genRecords returns partition p's records and the number of distinct
// deliveries among them. Event time goes forward by ~100 ms a record
// (with a little disorder); a duplicate repeats one of the last 1,000
// deliveries, later, as a provider's redelivery does.
func genRecords(s genSpec, p int) ([]*kgo.Record, int) {
	rng := rand.New(rand.NewPCG(s.seed, uint64(p)))
	base := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	recs := make([]*kgo.Record, 0, s.perPart)
	distinct := 0
	for i := range s.perPart {
		at := base.Add(time.Duration(i)*100*time.Millisecond - time.Duration(rng.IntN(2000))*time.Millisecond)
		if len(recs) > 0 && rng.Float64() < s.dupRate {
			orig := recs[len(recs)-1-rng.IntN(min(len(recs), 1000))]
			dup := *orig
			dup.Timestamp = at
			dup.Headers = append(dup.Headers[:len(dup.Headers):len(dup.Headers)], kgo.RecordHeader{Key: kafkapub.HeaderRetry, Value: []byte("1")})
			recs = append(recs, &dup)
			continue
		}
		distinct++
		et := eventTypes[rng.IntN(len(eventTypes))]
		tenant := fmt.Sprintf("org-%04d", rng.IntN(s.tenants))
		id := fmt.Sprintf("%08x-%04x-4%03x-a%03x-%012x", rng.Uint32(), rng.IntN(1<<16), rng.IntN(1<<12), rng.IntN(1<<12), rng.Uint64()>>16)
		hs := []kgo.RecordHeader{
			{Key: kafkapub.HeaderEventID, Value: []byte(id)},
			{Key: kafkapub.HeaderSource, Value: []byte(et.source)},
			{Key: kafkapub.HeaderEventType, Value: []byte(et.typ)},
		}
		if et.source == "github" {
			hs = append(hs, kgo.RecordHeader{Key: kafkapub.HeaderHookID, Value: []byte("30991")})
		}
		body := fmt.Sprintf(`{"action":"opened","number":%d,"organization":{"login":%q},"repository":{"full_name":"%s/service-%d"},`+
			`"sender":{"login":"dev-%d","id":%d},"created_at":%q,"html_url":"https://example.com/%s/pulls/%d"}`,
			rng.IntN(5000), tenant, tenant, rng.IntN(20), rng.IntN(300), rng.IntN(1<<24), at.Format(time.RFC3339), tenant, rng.IntN(5000))
		recs = append(recs, &kgo.Record{Partition: int32(p), Key: []byte(tenant), Value: []byte(body), Headers: hs, Timestamp: at})
	}
	return recs, distinct
}

// produceEvents writes s's records to topic and returns the number of
// distinct deliveries.
func produceEvents(t testing.TB, brokers []string, topic string, s genSpec) int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(1<<16))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	distinct := 0
	for p := range s.partitions {
		recs, d := genRecords(s, p)
		distinct += d
		for i := 0; i < len(recs); i += 50_000 {
			batch := recs[i:min(i+50_000, len(recs))]
			for _, r := range batch {
				r.Topic = topic
			}
			require.NoError(t, cl.ProduceSync(ctx, batch...).FirstErr(), "produce partition %d", p)
		}
	}
	return distinct
}
