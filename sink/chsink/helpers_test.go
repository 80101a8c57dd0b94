package chsink_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/internal/netfail"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// event is the row type of the tests.
type event struct {
	ID    uint64
	Org   string
	Kind  string
	At    time.Time
	Score float64
	Tags  []string
	Note  proto.Nullable[string]
}

func eventSchema() []chsink.Column[event] {
	return []chsink.Column[event]{
		chsink.UInt64("id", func(e *event) uint64 { return e.ID }),
		chsink.String("org", func(e *event) string { return e.Org }),
		chsink.LowCardinality("kind", func(e *event) string { return e.Kind }),
		chsink.DateTime64("at", proto.PrecisionMilli, func(e *event) time.Time { return e.At }),
		chsink.Float64("score", func(e *event) float64 { return e.Score }),
		chsink.Array("tags", new(proto.ColStr), func(e *event) []string { return e.Tags }),
		chsink.Nullable("note", new(proto.ColStr), func(e *event) proto.Nullable[string] { return e.Note }),
	}
}

const eventsDDL = `CREATE TABLE %s.events (
	id UInt64, org String, kind LowCardinality(String), at DateTime64(3),
	score Float64, tags Array(String), note Nullable(String)
) ENGINE = MergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 1000, enable_block_number_column = 1`

// rowsOf is the deterministic processing of the tests: record at offset o
// produces o%3 rows (so a third of the records produce none).
func rowsOf(o int64) []event {
	n := int(o % 3)
	out := make([]event, n)
	for i := range out {
		id := uint64(o)*10 + uint64(i)
		out[i] = event{
			ID: id, Org: fmt.Sprintf("org-%d", o%4), Kind: []string{"push", "pr.merged", "issue"}[id%3],
			At: time.UnixMilli(1_700_000_000_000 + int64(id)).UTC(), Score: float64(id) / 2,
			Tags: []string{"a", fmt.Sprint(i)},
		}
		if i == 1 {
			out[i].Note = proto.NewNullable("second")
		}
	}
	return out
}

// expectedRows is how many rows records [from, to) produce.
func expectedRows(from, to int64) int {
	n := 0
	for o := from; o < to; o++ {
		n += len(rowsOf(o))
	}
	return n
}

// feed hands records [from, to) to s.
func feed(ctx context.Context, t *testing.T, s *chsink.Sink[event], from, to int64) error {
	t.Helper()
	for o := from; o < to; o++ {
		for i, r := range rowsOf(o) {
			if err := s.Add(ctx, sink.Position{Offset: o, Index: uint32(i)}, r); err != nil {
				return err
			}
		}
	}
	return nil
}

type chEnv struct {
	addr, db string
	conn     *ch.Client
	// redial makes count dial anew for every query (supervisedClickHouse).
	redial bool
	// user is the user newSink's sinks connect as, "" for the default.
	user string
}

func setup(t *testing.T, ddl ...string) chEnv {
	t.Helper()
	addr, db := testkit.ClickHouse(t)
	ctx := context.Background()
	c, err := ch.Dial(ctx, ch.Options{Address: addr, Database: db})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	env := chEnv{addr: addr, db: db, conn: c}
	for _, q := range ddl {
		env.exec(t, fmt.Sprintf(q, db))
	}
	return env
}

func (e chEnv) exec(t testing.TB, q string) {
	t.Helper()
	require.NoError(t, e.conn.Do(context.Background(), ch.Query{Body: q}), q)
}

// count runs a query returning one UInt64.
func (e chEnv) count(t *testing.T, q string) uint64 {
	t.Helper()
	if e.redial {
		return e.countRedialing(t, q)
	}
	var col proto.ColUInt64
	body := "SELECT toUInt64(assumeNotNull((" + q + "))) AS c"
	require.NoError(t, e.conn.Do(context.Background(), ch.Query{Body: body, Result: proto.Results{{Name: "c", Data: &col}}}), q)
	require.Equal(t, 1, col.Rows(), q)
	return col.Row(0)
}

func (e chEnv) newSink(t *testing.T, store checkpoint.Storage, opts chsink.Options) *chsink.Sink[event] {
	t.Helper()
	return e.newSinkAt(t, e.addr, store, opts)
}

func (e chEnv) newSinkAt(t *testing.T, addr string, store checkpoint.Storage, opts chsink.Options) *chsink.Sink[event] {
	t.Helper()
	opts.Database = e.db
	if opts.User == "" {
		opts.User = e.user
	}
	// The tests' views write rows no other writer of theirs repeats (a
	// test of that case builds its sink itself).
	opts.DistinctViewRows = true
	s, err := chsink.New(context.Background(), chsink.Table{Addr: addr, Name: "events"},
		checkpoint.TopicPartition{Topic: "events", Partition: 0}, store, eventSchema, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// proxy forwards TCP to a ClickHouse server (internal/netfail's Proxy).
// Armed, it cuts the first connection that sends more than cutAfter bytes:
// it swallows the server's answer and closes the connection, so the client
// cannot know whether the insert it sent landed. With stall set, it
// swallows the answer but keeps the connection open, so the client waits
// until its own timeout. With refuse set, it closes every new connection.
type proxy struct {
	*netfail.Proxy
	cutAfter atomic.Int64 // 0: disarmed
	cuts     atomic.Int64
	stall    atomic.Bool
	refuse   atomic.Bool
	conns    sync.Map // *netfail.Conn -> *proxyConn
}

// proxyConn is what the proxy keeps of one connection.
type proxyConn struct {
	sent int64 // bytes from the client; read by its reader only
	cut  atomic.Bool
}

func newProxy(t *testing.T, target string) *proxy {
	p := &proxy{}
	np, err := netfail.NewProxy(target, netfail.ProxyOptions{
		Accept:  func(net.Conn) bool { return !p.refuse.Load() },
		Forward: p.forward,
	})
	require.NoError(t, err)
	p.Proxy = np
	t.Cleanup(np.Close)
	return p
}

func (p *proxy) forward(c *netfail.Conn, toBackend bool, b []byte) bool {
	v, _ := p.conns.LoadOrStore(c, new(proxyConn))
	pc := v.(*proxyConn)
	if !toBackend {
		return !pc.cut.Load()
	}
	pc.sent += int64(len(b))
	if lim := p.cutAfter.Load(); lim > 0 && pc.sent > lim && p.cutAfter.CompareAndSwap(lim, 0) {
		pc.cut.Store(true)
		p.cuts.Add(1)
		if !p.stall.Load() { // stalled: answer swallowed, connection kept, the client times out
			go func() { // let the server finish the insert, then cut
				time.Sleep(300 * time.Millisecond)
				c.Close()
			}()
		}
	}
	return true
}

// closeAll drops every open connection.
func (p *proxy) closeAll() { p.Cut() }
