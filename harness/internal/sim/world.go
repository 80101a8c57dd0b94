package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce/audit"
	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/dedup"
	"github.com/exactlyonce/exactlyonce/window"
)

// Simulated constants: the broker's transaction timeout, the session gap
// and bounds that keep every event on time (see the input's generation).
const (
	txnTimeout        = 60 * time.Second
	idExpiration      = 10 * time.Minute
	sessionGap        = 10 * time.Second
	outOfOrderness    = 20 * time.Second
	maxJitter         = 15 * time.Second // < outOfOrderness: no event is late
	earlyInterval     = 2 * time.Second
	hopSize           = 30 * time.Second
	hopSlide          = 10 * time.Second
	kafkaBatch        = 3
	chBatch           = 4
	auditStage        = "sink.sim"
	auditBucket       = time.Minute
	finalRestartLimit = 6
)

var partition = checkpoint.TopicPartition{Topic: "in", Partition: 0}

// record is one input record: its ID is the idempotency key (a duplicate
// repeats an earlier record's ID, Key and Time).
type record struct {
	Offset int64
	ID     string
	Key    string
	Time   time.Time
}

// world is one seed's run: the input, the shared outside systems
// (checkpoint Storage, Kafka, ClickHouse, the sink journal) and the
// processes that own the partition in turn.
type world struct {
	cfg  Config
	seed uint64
	rng  *rand.Rand

	now   time.Time     // the outside world's clock (the brokers')
	skew  time.Duration // the processor's wall clock minus now
	step  int
	trace []string

	input   []record
	mem     *storage
	broker  *Broker
	ch      *ClickHouse
	journal *journal

	procs     []*proc          // live processes; the owner is last
	winReach  map[string]int64 // per window table, the last position any run wrote a row at
	winEpoch  map[string]int   // per window table, its journal's owner epoch
	owner     *proc            // nil while no process owns the partition
	gen       int64
	incarn    int
	committed int64 // the consumer group's offset
	newest    int64 // NextOffset of the newest saved checkpoint
	declineAt int   // the decliner declines while step < declineAt
	w2        int   // the second writer's inserts
	failing   int   // failed starts or chain restarts since faults stopped

	lastAudit *audit.Counter // the settled owner's, for the check

	violations []Violation
	notes      []string
}

func (w *world) procNow() time.Time { return w.now.Add(w.skew) }

func (w *world) logf(format string, args ...any) {
	w.trace = append(w.trace, fmt.Sprintf("%4d %8s  ", w.step, w.now.Sub(simEpoch).Truncate(time.Millisecond))+fmt.Sprintf(format, args...))
}

// note records something remarkable that is not by itself a violation.
func (w *world) note(format string, args ...any) {
	n := fmt.Sprintf(format, args...)
	w.notes = append(w.notes, n)
	w.logf("NOTE %s", n)
}

func (w *world) violate(kind Kind, sink, format string, args ...any) {
	v := Violation{Kind: kind, Sink: sink, Detail: fmt.Sprintf(format, args...)}
	w.violations = append(w.violations, v)
	w.logf("VIOLATION %s", v)
}

var simEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// proc is one incarnation of the chain of the partition in one process:
// the real checkpoint Coordinator and Task, the real dedup, window and
// audit participants, and the stand-in sinks.
type proc struct {
	w      *world
	n      int
	gen    int64
	ctx    context.Context
	cancel context.CancelFunc
	coord  *checkpoint.Coordinator
	task   *checkpoint.Task

	events      chan event
	parked      []*gateWait
	active      int // threads of the pending checkpoint that run
	outstanding int // pending parts not returned
	parts       int // pending parts taken by the last Begin
	flight      bool
	zombie      bool // revoked, and does not know yet
	next        int64
	ended       bool // EndInput was called
	final       bool // a checkpoint begun after EndInput completed
	savedTxn    int  // the transaction its newest saved checkpoint names

	dd    *dedup.Deduplicator
	op    *window.Operator[int, uint64, uint64] // sessions
	hop   *window.Operator[int, uint64, uint64] // hopping windows
	audit *audit.Counter
	kafka *txSink
	chs   *chSink
	win   *winSink
	hwin  *winSink
}

// decliner is a participant that declines barriers when the scheduler
// says so: a slow co-participant in the middle of work it must finish.
type decliner struct{ w *world }

func (d decliner) Snapshot(context.Context, checkpoint.ID) ([]byte, error) {
	if d.w.step < d.w.declineAt {
		return nil, fmt.Errorf("sim: decline: %w", checkpoint.ErrDeclined)
	}
	return []byte{0}, nil
}
func (decliner) Restore(context.Context, []byte) error                    { return nil }
func (decliner) CheckpointCompleted(context.Context, checkpoint.ID) error { return nil }

// start starts a new incarnation of the chain: it attaches to the newest
// checkpoint (restoring every participant) and becomes the owner.
func (w *world) start(newGen bool) (*proc, error) {
	if newGen {
		w.gen++
	}
	w.incarn++
	p := &proc{w: w, n: w.incarn, gen: w.gen, events: make(chan event, 64)}
	p.ctx, p.cancel = context.WithCancel(context.WithValue(context.Background(), procKey{}, p))
	store, err := checkpoint.NewStore(w.mem, checkpoint.StoreOptions{Keep: 3})
	if err != nil {
		return nil, err
	}
	if p.coord, err = checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1, Now: w.procNow}); err != nil {
		return nil, err
	}
	if p.dd, err = dedup.New(time.Hour, dedup.Options{}); err != nil {
		return nil, err
	}
	early := window.EarlyFiring{Every: 3}
	if w.cfg.EarlyTicks {
		early.Interval = earlyInterval
	}
	if p.op, err = window.New(window.Session(sessionGap), window.Checkpointable[int, uint64, uint64](window.Count[int]{}),
		window.Options{MaxOutOfOrderness: outOfOrderness, IdleTimeout: -1, Early: early, Now: w.procNow}); err != nil {
		return nil, err
	}
	if p.hop, err = window.New(window.Hopping(hopSize, hopSlide), window.Checkpointable[int, uint64, uint64](window.Count[int]{}),
		window.Options{MaxOutOfOrderness: outOfOrderness, IdleTimeout: -1, Early: early, Now: w.procNow, Name: "hopping"}); err != nil {
		return nil, err
	}
	if p.audit, err = audit.NewCounter("in/0", audit.Options{Bucket: auditBucket, Retention: 24 * time.Hour}); err != nil {
		return nil, err
	}
	p.kafka = &txSink{b: w.broker, txid: "sim-in-0", batch: kafkaBatch}
	p.chs = &chSink{w: w, gen: p.gen, batch: chBatch}
	p.win = &winSink{w: w, table: "sessions", op: p.op}
	p.hwin = &winSink{w: w, table: "hopping", op: p.hop}
	parts := map[string]checkpoint.Participant{
		"dedup":    p.dd,
		"window":   p.op,
		"audit":    p.audit,
		"kafka":    &gated{p: p, name: "kafka", inner: p.kafka},
		"events":   &gated{p: p, name: "events", inner: p.chs, quietNotify: true},
		"sessions": p.win,
		"hop":      p.hop,
		"hopping":  p.hwin,
		"decliner": decliner{w},
	}
	if p.task, err = p.coord.Attach(p.ctx, partition, parts); err != nil {
		p.stop()
		w.logf("proc %d gen %d: attach failed: %v", p.n, p.gen, err)
		return nil, err
	}
	if cp := p.task.Restored(); cp != nil {
		p.next = cp.NextOffset
		w.logf("proc %d gen %d: restored checkpoint %d at offset %d", p.n, p.gen, cp.ID, cp.NextOffset)
	} else {
		w.logf("proc %d gen %d: fresh start", p.n, p.gen)
	}
	w.procs = append(w.procs, p)
	w.owner = p
	return p, nil
}

// stop ends p: its pending checkpoint's threads see their context end and
// pass no more gates; Detach waits for them.
func (p *proc) stop() {
	p.cancel()
	if p.task != nil {
		p.task.Detach()
	}
	_ = p.coord.Close()
	_ = p.dd.Close()
	w := p.w
	w.procs = slices.DeleteFunc(w.procs, func(q *proc) bool { return q == p })
	if w.owner == p {
		w.owner = nil
	}
}

// fail ends p after an error of its chain; the owner restarts (a chain
// restart from the last checkpoint, kafkasource's reaction to any error).
func (p *proc) fail(err error) {
	w := p.w
	w.logf("proc %d: chain failed: %v", p.n, err)
	owner := w.owner == p
	p.stop()
	if owner {
		w.restart(false)
	}
}

func (w *world) restart(newGen bool) {
	if _, err := w.start(newGen); err != nil && w.step >= w.cfg.faultSteps() {
		w.failing++
	}
}

// quiesce waits until every thread of p's pending checkpoint is parked at a
// gate or the checkpoint ended.
func (p *proc) quiesce() {
	for p.active > 0 {
		ev := <-p.events
		switch ev.kind {
		case evArrive:
			p.active--
			// The coordinator starts the parts' threads in map order:
			// sorted, the seed alone picks which goes first.
			p.parked = append(p.parked, ev.gate)
			slices.SortFunc(p.parked, func(a, b *gateWait) int { return strings.Compare(a.name, b.name) })
		case evReturned:
			p.active--
			p.outstanding--
			if p.outstanding == 0 {
				p.active++ // the coordinator's goroutine goes on
			}
		case evDone:
			p.active = 0
			p.flight = false
			p.done(ev.err)
			return
		}
	}
}

func (p *proc) done(err error) {
	w := p.w
	if err != nil {
		w.logf("proc %d: checkpoint failed: %v", p.n, err)
		p.fail(err)
		return
	}
	w.logf("proc %d: checkpoint completed", p.n)
	if p.ended {
		p.final = true
	}
}

// release lets the parked thread i go on (ok) or fail.
func (p *proc) release(i int, ok bool) {
	g := p.parked[i]
	p.parked = slices.Delete(p.parked, i, i+1)
	p.w.logf("proc %d: release %s ok=%v", p.n, g.name, ok)
	g.release <- ok
	p.active++
	p.quiesce()
}

// barrier takes a checkpoint at p's position (Trigger, then Begin at the
// barrier, as kafkasource's chain loop does).
func (p *proc) barrier() {
	w := p.w
	p.parts = 0
	go func() {
		err := p.coord.Trigger(context.Background())
		p.events <- event{kind: evDone, err: err}
	}()
	b := <-p.task.Barriers()
	w.logf("proc %d: barrier at offset %d", p.n, p.next)
	err := p.task.Begin(p.ctx, b, p.next, checkpoint.Meta{Generation: p.gen}, p.commit)
	if err != nil {
		ev := <-p.events // the Trigger's end: Begin finished the barrier
		for ev.kind != evDone {
			ev = <-p.events
		}
		if errors.Is(err, checkpoint.ErrDeclined) {
			w.logf("proc %d: checkpoint declined: %v", p.n, err)
			return
		}
		w.logf("proc %d: begin failed: %v", p.n, err)
		p.fail(err)
		return
	}
	p.flight = true
	p.outstanding = p.parts
	p.active = max(p.parts, 1)
	p.quiesce()
}

// commit is the source's offset commit, run by the coordinator after the
// checkpoint's save; a revoked generation's commit fails, as the group
// coordinator refuses it.
func (p *proc) commit(ctx context.Context, next int64) error {
	if err := p.gate(ctx, "commit"); err != nil {
		return err
	}
	w := p.w
	if p.gen != w.gen {
		return fmt.Errorf("sim: commit of generation %d refused: generation %d owns the partition", p.gen, w.gen)
	}
	if next > w.newest {
		w.violate(KindInvariant, "checkpoint", "offset %d committed beyond the newest saved checkpoint's %d", next, w.newest)
	}
	if t := w.broker.txnOf(p.savedTxn); t != nil && t.state != txnCommitted {
		// The restore falls back past a checkpoint whose transaction
		// aborts, and the group's offset would go back.
		w.violate(KindInvariant, "checkpoint", "offset %d committed while its checkpoint's transaction %d is %v",
			next, t.seq, t.state)
	}
	w.committed = next
	w.logf("proc %d: committed offset %d", p.n, next)
	return nil
}

// saved checks a checkpoint file as it is written.
func (w *world) saved(p *proc, data []byte) {
	cp, err := checkpoint.Decode(data)
	if err != nil {
		w.violate(KindInvariant, "checkpoint", "saved an undecodable checkpoint: %v", err)
		return
	}
	w.newest = max(w.newest, cp.NextOffset)
	w.broker.advance() // the broker aborts on its own clock, not when asked
	var st txSinkState
	p.savedTxn = 0
	if b, ok := cp.States["kafka"]; ok && jsonUnmarshal(b, &st) == nil && st.Txn != nil {
		p.savedTxn = st.Txn.Seq
		if t := w.broker.txnOf(st.Txn.Seq); t != nil && t.state == txnAborted {
			// Not a violation by itself: the fix of breach 1 cannot rule it
			// out (a pause between its Expired check and the write) and
			// makes restore fall back past it. The outputs say whether
			// anything was lost.
			w.note("checkpoint %d (proc %d gen %d, offset %d) saved with transaction %d aborted (by timeout: %v, age %v)",
				cp.ID, p.n, p.gen, cp.NextOffset, t.seq, t.byTimeout, w.now.Sub(t.start))
		}
	}
	w.logf("proc %d: saved checkpoint %d at offset %d", p.n, cp.ID, cp.NextOffset)
}

// process feeds p's next record to its chain.
func (p *proc) process() {
	w := p.w
	r := w.input[p.next]
	first, err := p.dd.Observe([]byte(r.ID), r.Time)
	if err != nil {
		p.fail(err)
		return
	}
	if first {
		p.audit.At(r.Offset)
		p.audit.Add(auditStage, r.Key, r.Time, 1)
		if err := p.kafka.Add(r.ID); err != nil {
			p.fail(err)
			return
		}
		if err := p.chs.Add(r.Offset, chRow{ID: r.ID, Hour: r.Time.Unix() / 3600}); err != nil {
			p.fail(err)
			return
		}
		var out window.Output[int, uint64]
		p.win.track(r.Offset)
		if err := p.op.Add(window.Event[int]{Key: r.Key, Time: r.Time, Value: 1}, &out); err != nil {
			p.fail(err)
			return
		}
		if len(out.Late) > 0 {
			w.violate(KindInvariant, "window", "event %s at %v is late; the input is generated to be on time", r.ID, r.Time)
		}
		p.win.add(r.Offset, out.Rows)
		out.Reset()
		p.hwin.track(r.Offset)
		if err := p.hop.Add(window.Event[int]{Key: r.Key, Time: r.Time, Value: 1}, &out); err != nil {
			p.fail(err)
			return
		}
		if len(out.Late) > 0 {
			w.violate(KindInvariant, "window", "event %s at %v is late for a hopping window; the input is generated to be on time", r.ID, r.Time)
		}
		p.hwin.add(r.Offset, out.Rows)
	}
	p.next++
	if strings.HasSuffix(r.ID, "0") {
		w.logf("proc %d: processed up to offset %d", p.n, p.next)
	}
}

func (p *proc) tick() {
	var out window.Output[int, uint64]
	p.win.track(p.next)
	p.op.Tick(&out)
	n := len(out.Rows)
	p.win.add(p.next, out.Rows)
	out.Reset()
	p.hwin.track(p.next)
	p.hop.Tick(&out)
	p.hwin.add(p.next, out.Rows)
	if n += len(out.Rows); n > 0 {
		p.w.logf("proc %d: tick emitted %d rows", p.n, n)
	}
}
