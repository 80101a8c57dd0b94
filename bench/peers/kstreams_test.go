package peers

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactlyonce/exactlyonce/testkit"
)

// kstreams runs the Kafka Streams app (stores rocksdb or memory, two
// stream threads, commits every second, as the other systems'
// checkpoints; exactly_once_v2, or at_least_once for the run without
// checkpoints: doc.go says why) and, beside it in this process, the plain
// consumer that loads its output topics into ClickHouse. A restart after
// a kill is the same command: the app resumes from its committed offsets,
// its state directory and its changelogs.
func kstreams(stores string) func(t *testing.T, e *env, db string, checkpoints bool) *job {
	return func(t *testing.T, e *env, db string, checkpoints bool) *job {
		t.Helper()
		guarantee := "exactly_once_v2"
		if !checkpoints {
			guarantee = "at_least_once"
		}
		return startKStreams(t, e, db, stores, guarantee)
	}
}

func startKStreams(t *testing.T, e *env, db, stores, guarantee string) *job {
	t.Helper()
	out := db + "-"
	testkit.CreateTopic(t, e.brokers, out+"events", partitions)
	testkit.CreateTopic(t, e.brokers, out+"minutes", partitions)
	argv := javaJob(t, e, "kstreams", "peers.StreamsJob", strings.Join(e.brokers, ","), e.topic, db, out, stores, "1000", guarantee)
	// The app's state directory goes under java.io.tmpdir: the run's own.
	argv = slices.Insert(argv, 1, "-Djava.io.tmpdir="+e.stateDir)
	j := startProcess(t, "kstreams", argv)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- load(ctx, e, db, out) }()
	j.extra = append(j.extra, func() {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("kstreams loader: %v", err)
		}
	})
	return j
}

// load is the plain consumer that copies the app's output topics into
// ClickHouse: read_committed, each fetch one insert per table. A window's
// row is versioned by its record's offset, so FINAL keeps the last update
// (a tenant's updates share a partition: the topic is keyed by tenant).
func load(ctx context.Context, e *env, db, out string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ConsumeTopics(out+"events", out+"minutes"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	c, err := ch.Dial(ctx, ch.Options{Address: e.chAddr})
	if err != nil {
		return err
	}
	defer c.Close()
	var evs, mins bytes.Buffer
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err := fs.Err0(); err != nil {
			return err
		}
		evs.Reset()
		mins.Reset()
		var bad error
		fs.EachRecord(func(r *kgo.Record) {
			id, ts, ok := strings.Cut(string(r.Value), "\t")
			if !ok {
				bad = fmt.Errorf("%s: %q", r.Topic, r.Value)
				return
			}
			if strings.HasSuffix(r.Topic, "-events") {
				ms, _ := strconv.ParseInt(ts, 10, 64)
				fmt.Fprintf(&evs, "%s\t%s\t%s\n", r.Key, id, chTime(ms))
				return
			}
			start, _ := strconv.ParseInt(id, 10, 64)
			fmt.Fprintf(&mins, "%s\t%s\t%d\t%s\n", r.Key, chTime(start), r.Offset+1, ts)
		})
		if bad != nil {
			return bad
		}
		for _, x := range []struct {
			table string
			rows  *bytes.Buffer
		}{{"events", &evs}, {"tenant_minute", &mins}} {
			if x.rows.Len() == 0 {
				continue
			}
			q := fmt.Sprintf("INSERT INTO %s.%s FORMAT TabSeparated\n%s", db, x.table, x.rows.String())
			if err := c.Do(ctx, ch.Query{Body: q}); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
	}
}

// chTime writes Unix milliseconds as a DateTime64(3) text value.
func chTime(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05.000")
}
