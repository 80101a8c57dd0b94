package demo

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
	"github.com/exactlyonce/exactlyonce/examples/devmetrics"
)

// dashboard polls employee_metrics_window while the webhooks are delivered,
// as an hourly dashboard would, and records the windows it saw a row of
// before their hour closed: the early firings.
//
// How it knows an hour had not closed: a window [start, end) fires when the
// processor's watermark reaches end, and the watermark is at most the
// newest event time the processor has seen (minus the out-of-orderness
// bound), which is at most the newest event time handed to the providers
// so far (sent). Once every input is idle the watermark moves on with the
// clock, a few seconds of event time per few seconds of wall time, so the
// dashboard keeps a margin of closeMargin. A row of a window ending after
// sent+closeMargin, with sent read after the query, was therefore written
// before its window fired: an early row. Without early firings there is
// none.
type dashboard struct {
	addr, db string
	sent     atomic.Int64 // newest event time handed to the providers, Unix ms

	mu    sync.Mutex
	early map[string]uint64 // org|employee|unix hour → highest early version seen
	polls int
	err   error // the last failed poll's, reported if no poll succeeded
}

const closeMargin = time.Minute

// sending records that an event of time t is handed to a provider.
func (b *dashboard) sending(t time.Time) {
	ms := t.UnixMilli()
	for {
		cur := b.sent.Load()
		if ms <= cur || b.sent.CompareAndSwap(cur, ms) {
			return
		}
	}
}

// run polls every interval until ctx ends.
func (b *dashboard) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		b.poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (b *dashboard) poll(ctx context.Context) {
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := ch.Dial(qctx, ch.Options{Address: b.addr, DialTimeout: time.Second})
	if err != nil { // ClickHouse may be down: a fault the demo injects
		b.fail(err)
		return
	}
	defer conn.Close()
	var org, emp proto.ColStr
	var start, end proto.ColInt64
	var version proto.ColUInt64
	type row struct {
		key     string
		end     int64
		version uint64
	}
	var rows []row
	// Without FINAL: every row written so far, partial ones included.
	if err := conn.Do(qctx, ch.Query{
		Body: "SELECT org_id AS o, employee_id AS e, toInt64(toUnixTimestamp(window_start)) AS s, " +
			"toInt64(toUnixTimestamp64Milli(window_end)) AS w, max(version) AS v FROM " + b.db +
			".employee_metrics_window GROUP BY o, e, s, w",
		Result: proto.Results{{Name: "o", Data: &org}, {Name: "e", Data: &emp}, {Name: "s", Data: &start},
			{Name: "w", Data: &end}, {Name: "v", Data: &version}},
		OnResult: func(context.Context, proto.Block) error {
			for i := range version.Rows() {
				rows = append(rows, row{fmt.Sprintf("%s|%s|%d", org.Row(i), emp.Row(i), start[i]), end[i], version[i]})
			}
			return nil
		},
	}); err != nil {
		b.fail(err)
		return
	}
	sent := b.sent.Load() // after the query: every row read was written before
	b.mu.Lock()
	defer b.mu.Unlock()
	b.polls++
	for _, r := range rows {
		if r.end > sent+closeMargin.Milliseconds() && r.version > b.early[r.key] {
			b.early[r.key] = r.version
		}
	}
}

func (b *dashboard) fail(err error) {
	b.mu.Lock()
	b.err = err
	b.mu.Unlock()
}

// verdict checks that early rows appeared and were partial: each one's
// version below its window's final event count (want).
func (b *dashboard) verdict(want map[string]uint64) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.polls == 0 {
		return "", fmt.Errorf("dashboard: no poll of employee_metrics_window succeeded: %v", b.err)
	}
	if len(b.early) == 0 {
		return "", fmt.Errorf("dashboard: %d polls saw no row of a window before its hour closed: early firings are off", b.polls)
	}
	var partial uint64
	for k, v := range b.early {
		if v > want[k] {
			return "", fmt.Errorf("dashboard: early row of %s counts %d events, more than the %d of its hour", k, v, want[k])
		}
		if v < want[k] {
			partial++
		}
	}
	if partial == 0 {
		return "", fmt.Errorf("dashboard: the %d windows seen before their hour closed were already complete", len(b.early))
	}
	return fmt.Sprintf("dashboard: %d polls of employee_metrics_window during delivery saw rows of %d employee-hours before their hour closed (early firings, every %d events), %d of them partial; the final rows replaced them",
		b.polls, len(b.early), devmetrics.DefaultEarlyEvery, partial), nil
}
