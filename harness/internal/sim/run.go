package sim

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// Config chooses the faults of a run. The zero value runs without faults.
type Config struct {
	// Records is the input's length; 0 draws 40 to 160 from the seed.
	Records int
	// Faults turns on the faults the SDK's guarantees cover: crashes at
	// every gate, failed parts, saves and commits, declined barriers,
	// processor clock jumps, ClickHouse restarts, ClickHouse crashes that
	// cut an insert (keeping its token, losing its part), and time passing
	// while a checkpoint is pending (kept below the transaction timeout,
	// as kafkasink's Options.Tx documents).
	Faults bool
	// TxnExpiry adds pauses of the process and slow co-participants longer
	// than the broker's transaction timeout while a checkpoint is pending
	// (breach 1 of issue 41), and transactional ids that expire while the
	// partition has no owner.
	TxnExpiry bool
	// EarlyTicks turns on the window operator's early firings by
	// processing-time interval and Ticks at random points, which a replay
	// does not repeat (breach 2).
	EarlyTicks bool
	// SecondWriter adds another writer inserting blocks of the same shape
	// into the ClickHouse tables the sink writes (breach 3).
	SecondWriter bool
	// DistinctViewRows makes the view's rows carry their writer, as
	// chsink.Options.DistinctViewRows (the fix of breach 3) requires of a
	// plain MergeTree view target; without it the sink accepts the target
	// today, and refuses it once that fix is merged.
	DistinctViewRows bool
	// Zombies lets a revoked owner go on (paused past its session timeout)
	// while the new owner restores, until it learns of the revocation.
	Zombies bool
}

// faultSteps is how many steps faults may happen in; then the run must
// settle.
func (c Config) faultSteps() int { return 3*c.Records + 20 }

// Kind classifies a violation.
type Kind string

const (
	KindLoss        Kind = "loss"
	KindDuplicate   Kind = "duplicate"
	KindStuck       Kind = "stuck"
	KindWrongResult Kind = "wrong result"
	KindInvariant   Kind = "invariant"
)

// Violation is one thing a run got wrong.
type Violation struct {
	Kind   Kind
	Sink   string // the output or component: kafka, events, hourly, sessions, audit, checkpoint
	Detail string
}

func (v Violation) String() string { return fmt.Sprintf("%s: %s: %s", v.Sink, v.Kind, v.Detail) }

// Result is the outcome of one seed.
type Result struct {
	Seed       uint64
	Config     Config
	Steps      int
	Violations []Violation
	// Notes are remarkable events that are not violations by themselves
	// (a checkpoint saved naming a transaction the broker had aborted).
	Notes []string
	Trace []string
}

// Failed reports whether the run violated anything.
func (r *Result) Failed() bool { return len(r.Violations) > 0 }

// Report is the violations and the trace, for a test log.
func (r *Result) Report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d (%+v): %d violations\n", r.Seed, r.Config, len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "  %s\n", v)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	b.WriteString("trace:\n")
	for _, l := range r.Trace {
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}

// Has reports whether r has a violation of kind in sink.
func (r *Result) Has(kind Kind, sink string) bool {
	return slices.ContainsFunc(r.Violations, func(v Violation) bool { return v.Kind == kind && v.Sink == sink })
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// Run runs one seed: the same seed and Config run the same steps, with the
// same trace and the same violations.
func Run(seed uint64, cfg Config) *Result {
	w := &world{seed: seed, rng: rand.New(rand.NewPCG(seed, 0x51a1)), now: simEpoch.Add(time.Hour), declineAt: -1}
	if cfg.Records == 0 {
		cfg.Records = 40 + w.rng.IntN(121)
	}
	w.cfg = cfg
	w.mem = &storage{MemoryStorage: checkpoint.NewMemoryStorage(), w: w}
	w.broker = newBroker(func() time.Time { return w.now }, w.logf, txnTimeout, idExpiration)
	w.ch = newClickHouse()
	w.ch.distinctViewRows = cfg.DistinctViewRows
	w.journal = &journal{intents: map[int64]intent{}}
	w.winReach = map[string]int64{}
	w.winEpoch = map[string]int{}
	w.input = w.generate(cfg.Records)
	w.restart(true)
	limit := cfg.faultSteps() + 20*cfg.Records + 400
	for w.step = 0; w.step < limit; w.step++ {
		if w.settled() || w.failing >= finalRestartLimit {
			break
		}
		if w.step < cfg.faultSteps() {
			w.act()
		} else {
			w.settle()
		}
	}
	if !w.settled() {
		w.violate(KindStuck, "checkpoint", "the partition did not finish its input after faults stopped (%d restarts or failed starts since; committed offset %d of %d)",
			w.failing, w.committed, len(w.input))
	}
	if w.owner != nil {
		w.lastAudit = w.owner.audit
	}
	w.stopAll()
	w.check()
	return &Result{Seed: seed, Config: cfg, Steps: w.step, Violations: w.violations, Notes: w.notes, Trace: w.trace}
}

// generate draws the input: keys k0..k2, event times that mostly grow and
// sometimes lag by up to maxJitter (which bridges sessions), and
// duplicates of recent records (a gateway's retries).
func (w *world) generate(n int) []record {
	in := make([]record, 0, n)
	t := simEpoch
	for i := range n {
		if i > 0 && w.rng.IntN(10) == 0 {
			d := in[max(0, i-1-w.rng.IntN(5))]
			d.Offset = int64(i)
			in = append(in, d)
			continue
		}
		t = t.Add(time.Duration(w.rng.IntN(8000)) * time.Millisecond)
		at := t
		if w.rng.IntN(3) == 0 {
			at = t.Add(-time.Duration(w.rng.Int64N(int64(maxJitter))))
		}
		in = append(in, record{Offset: int64(i), ID: fmt.Sprintf("r%d", i), Key: fmt.Sprintf("k%d", w.rng.IntN(3)), Time: at})
	}
	return in
}

// advance lets time pass. Without TxnExpiry it stays below the broker's
// transaction timeout for every open transaction, as the sink's
// documentation asks (timeout > checkpoint interval + longest restart).
func (w *world) advance(d time.Duration) {
	if !w.cfg.TxnExpiry {
		if age, ok := w.broker.oldestOpen(); ok {
			d = min(d, max(0, txnTimeout*3/4-age))
		}
	}
	w.now = w.now.Add(d)
}

// act takes one step while faults may happen.
func (w *world) act() {
	c := w.cfg
	p := w.owner
	if len(w.procs) > 0 && (p == nil || w.rng.IntN(5) == 0) {
		p = w.procs[w.rng.IntN(len(w.procs))]
	}
	if p == nil {
		switch n := w.rng.IntN(12); {
		case n < 4:
			w.restart(true)
		case n == 4 && c.TxnExpiry:
			// No owner for longer than transactional.id.expiration.ms:
			// the broker forgets the id, the prepared transaction (if
			// any) aborted by timeout long before.
			w.now = w.now.Add(idExpiration + time.Minute)
			w.logf("outage: no owner for %v", idExpiration+time.Minute)
		default:
			w.advance(time.Duration(w.rng.IntN(3000)) * time.Millisecond)
		}
		return
	}
	type choice struct {
		weight int
		do     func()
	}
	var cs []choice
	add := func(weight int, on bool, do func()) {
		if on {
			cs = append(cs, choice{weight, do})
		}
	}
	parked := len(p.parked) > 0
	add(8, parked, func() { p.release(w.rng.IntN(len(p.parked)), true) })
	add(10, p.next < int64(len(w.input)), p.process)
	add(2, !p.flight, p.barrier)
	add(2, c.EarlyTicks, p.tick)
	add(2, true, p.flush)
	add(3, true, func() { w.advance(time.Duration(w.rng.IntN(2000)) * time.Millisecond) })
	if c.Faults && w.rng.IntN(6) == 0 {
		cs = nil // a step of faults only
		add(2, parked, func() { p.release(w.rng.IntN(len(p.parked)), false) })
		add(2, true, func() {
			w.logf("proc %d: crash", p.n)
			owner := w.owner == p
			p.stop()
			if owner && w.rng.IntN(2) == 0 {
				w.restart(true)
			}
		})
		add(2, !p.zombie && c.Zombies, func() {
			w.logf("proc %d: revoked; it goes on until it learns", p.n)
			p.zombie = true
			w.restart(true)
		})
		add(1, true, func() {
			d := time.Duration(w.rng.IntN(120)-60) * time.Second
			w.skew += d
			w.logf("processor clock jumps by %v", d)
		})
		add(1, true, func() {
			w.ch.Restart()
			w.logf("clickhouse: restart (boot %d)", w.ch.boot)
		})
		add(1, true, func() {
			w.ch.crashNext = 1 + w.rng.IntN(2)
			w.logf("clickhouse: the next insert is cut by a crash (kind %d)", w.ch.crashNext)
		})
		add(1, true, func() {
			w.declineAt = w.step + 1 + w.rng.IntN(20)
			w.logf("decliner: declines barriers until step %d", w.declineAt)
		})
	}
	add(2, p.zombie, func() {
		w.logf("proc %d: learns of its revocation", p.n)
		p.stop()
	})
	if c.TxnExpiry {
		add(2, parked || p.flight, func() {
			d := txnTimeout + time.Duration(w.rng.IntN(30))*time.Second
			w.now = w.now.Add(d)
			w.logf("pause: proc %d stalls for %v with a checkpoint pending (parked %d)", p.n, d, len(p.parked))
		})
	}
	if c.SecondWriter {
		add(3, true, w.otherWriter)
	}
	total := 0
	for _, c := range cs {
		total += c.weight
	}
	n := w.rng.IntN(total)
	for _, c := range cs {
		if n -= c.weight; n < 0 {
			c.do()
			return
		}
	}
}

// otherWriter inserts a block into the sink's table from another source:
// as many rows as the sink's batches, in the hour of the newest input, as
// several partitions' chains feeding one view do.
func (w *world) otherWriter() {
	w.w2++
	n := chBatch
	if w.rng.IntN(4) == 0 {
		n = 1 + w.rng.IntN(chBatch+2)
	}
	hour := w.input[0].Time.Unix() / 3600
	if w.owner != nil && w.owner.next > 0 {
		hour = w.input[w.owner.next-1].Time.Unix() / 3600
	}
	rows := make([]chRow, n)
	for i := range rows {
		rows[i] = chRow{ID: fmt.Sprintf("w2-%d-%d", w.w2, i), Hour: hour}
	}
	token := fmt.Sprintf("w2:%d", w.w2)
	hits, err := w.ch.Insert(token, rows, false)
	if err != nil {
		w.logf("clickhouse: other writer: %v", err)
		return
	}
	w.logf("clickhouse: other writer inserts %s (%d rows, hour %d) hits %v", token, n, hour, hits)
}

// settle takes one step after the faults stopped: zombies are gone, every
// pending gate opens, the owner reads to the end, ends the input and
// checkpoints.
func (w *world) settle() {
	for _, p := range slices.Clone(w.procs) {
		if p != w.owner {
			w.logf("proc %d: stops (faults over)", p.n)
			p.stop()
		}
	}
	p := w.owner
	switch {
	case p == nil:
		if w.failing < finalRestartLimit {
			w.restart(true)
		}
	case len(p.parked) > 0:
		p.release(0, true)
	case p.next < int64(len(w.input)):
		p.process()
	case !p.ended:
		p.endInput()
	case !p.flight && !p.final:
		if w.failing < finalRestartLimit {
			p.barrier()
		}
	}
}

func (w *world) settled() bool {
	return w.step >= w.cfg.faultSteps() && w.owner != nil && w.owner.final && !w.owner.flight && len(w.procs) == 1
}

func (w *world) stopAll() {
	for _, p := range slices.Clone(w.procs) {
		p.stop()
	}
}

// Shrink looks for a shorter run that shows r's first violation (same kind,
// same output): with fewer records, over up to tries seeds each, and
// returns the one with the shortest trace, or r.
func Shrink(r *Result, tries int) *Result {
	if !r.Failed() {
		return r
	}
	v := r.Violations[0]
	best := r
	for _, n := range []int{8, 12, 20, 30, 45, 70, 100} {
		if n >= best.Config.Records {
			break
		}
		cfg := r.Config
		cfg.Records = n
		for seed := uint64(1); seed <= uint64(tries); seed++ {
			c := Run(seed, cfg)
			if c.Has(v.Kind, v.Sink) && len(c.Trace) < len(best.Trace) {
				best = c
			}
		}
		if best != r {
			return best
		}
	}
	return best
}
