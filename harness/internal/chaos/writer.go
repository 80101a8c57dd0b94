package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"

	"github.com/exactlyonce/exactlyonce/harness/internal/demo"
)

// writeBeside is KindClickHouseWriter: a burst of another writer's inserts
// into the pipeline's tables, each INSERT one block of rows no generated
// event has (organisations demo.OtherWriterOrg + 0..2, source
// "chaos-writer", ids unique to the burst), with the event types that feed
// every view. Hit: the processors' rows grew during the burst.
func (c *chaos) writeBeside(ctx context.Context) (bool, string) {
	d := c.d
	conn, err := ch.Dial(ctx, ch.Options{Address: d.Servers.ClickHouseAddr, DialTimeout: 5 * time.Second})
	if err != nil {
		return false, "not injected: " + err.Error()
	}
	defer conn.Close()
	theirs := func() (uint64, error) {
		var n proto.ColUInt64
		err := conn.Do(ctx, ch.Query{
			Body:   fmt.Sprintf("SELECT count() AS n FROM %s.normalized_events WHERE NOT startsWith(CAST(org_id, 'String'), '%s')", d.DB, demo.OtherWriterOrg),
			Result: proto.Results{{Name: "n", Data: &n}},
		})
		if err != nil || n.Rows() != 1 {
			return 0, err
		}
		return n.Row(0), nil
	}
	before, err := theirs()
	if err != nil {
		return false, "not injected: " + err.Error()
	}
	c.burst++
	blocks, rows := 20+c.rng.IntN(181), 0
	start := time.Now()
	for b := range blocks {
		n := 1 + c.rng.IntN(20)
		id := fmt.Sprintf("w%d-%d-", c.burst, b)
		q := fmt.Sprintf(`INSERT INTO %[1]s.normalized_events (org_id, source, event_id, event_type, employee_id, event_time, latency_s, subject, status, opened)
			SELECT '%[2]s' || toString(number %% 3), 'chaos-writer', '%[3]s' || toString(number),
				['pr.merged', 'review.comment', 'review.submitted', 'deployment', 'incident.opened'][number %% 5 + 1],
				'other', now64(3), 1.5, '%[3]s' || toString(number), 'open', now64(3)
			FROM numbers(%[4]d)`, d.DB, demo.OtherWriterOrg, id, n)
		if b%4 == 0 {
			q = fmt.Sprintf(`INSERT INTO %[1]s.employee_metrics_window
				SELECT '%[2]s' || toString(number %% 3), 'other-%[3]s' || toString(number), toStartOfHour(now64(3)),
					toStartOfHour(now64(3)) + INTERVAL 1 HOUR, 1, number, 0, 0, NULL, 0, 0
				FROM numbers(%[4]d)`, d.DB, demo.OtherWriterOrg, id, n)
		}
		if err := conn.Do(ctx, ch.Query{Body: q}); err != nil {
			return false, fmt.Sprintf("%d of %d blocks inserted (%d rows), then: %v", b, blocks, rows, err)
		}
		rows += n
	}
	took := time.Since(start)
	after, err := theirs()
	if err != nil {
		return false, fmt.Sprintf("%d blocks (%d rows) inserted in %v; count the processors' rows: %v", blocks, rows, took.Round(time.Millisecond), err)
	}
	return after > before, fmt.Sprintf("another writer inserted %d blocks (%d rows) in %v; the processors inserted %d rows meanwhile",
		blocks, rows, took.Round(time.Millisecond), after-before)
}
