package dedup

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// awaitCompaction waits for the running compaction to finish, or ctx.
func (d *Deduplicator) awaitCompaction(ctx context.Context) {
	select {
	case r := <-d.inc.done:
		d.inc.done <- r // for adoptCompaction
	case <-ctx.Done():
	}
}

// adoptCompaction takes the result of a finished compaction, if any, without
// waiting for a running one.
func (d *Deduplicator) adoptCompaction() {
	inc := &d.inc
	if !inc.running {
		return
	}
	select {
	case r := <-inc.done:
		inc.running = false
		switch {
		case r.err != nil:
			d.opts.Logger.Warn("dedup: compaction failed; the deltas stay and a later checkpoint tries again",
				slog.Any("err", r.err))
		case r.gen == inc.gen:
			inc.base = r.base
			inc.deltas = slices.Clone(inc.deltas[r.merged:])
		default: // the chain was replaced (a restore) meanwhile
			inc.objs.Abandon(r.base.name)
		}
	default:
	}
}

// maybeCompact starts a background compaction of the chain into a new base
// when it holds MaxDeltas deltas or its deltas outweigh half the base. The
// compaction reads the objects, not the table, so the chain goes on
// processing, and no checkpoint waits for it. clock and exact are the
// barrier's: it may run in a pending part, beside the chain.
func (d *Deduplicator) maybeCompact(clock int64, exact bool) {
	inc := &d.inc
	if inc.running || len(inc.deltas) == 0 {
		return
	}
	var deltaBytes int64
	for _, r := range inc.deltas {
		deltaBytes += r.size
	}
	if len(inc.deltas) < d.opts.MaxDeltas && deltaBytes*compactFractionDen <= inc.base.size*compactFractionNum {
		return
	}
	if inc.done == nil {
		inc.done = make(chan compactResult, 1)
		inc.ctx, inc.cancel = context.WithCancel(context.Background())
	}
	job := compactJob{
		objs: inc.objs, base: inc.base, deltas: slices.Clone(inc.deltas),
		clock: clock, exact: exact, gen: inc.gen,
		// Named after the last delta it folds in: the state it holds.
		name: "base-" + inc.deltas[len(inc.deltas)-1].name[len("delta-"):],
	}
	inc.running = true
	inc.wg.Add(1)
	go func() {
		defer inc.wg.Done()
		inc.done <- job.run(inc.ctx)
	}()
}

// stopCompaction cancels a running compaction and waits for it.
func (d *Deduplicator) stopCompaction() {
	if d.inc.cancel != nil {
		d.inc.cancel()
	}
	d.inc.wg.Wait()
	if d.inc.running {
		<-d.inc.done
		d.inc.running = false
	}
}

type compactJob struct {
	objs   *checkpoint.Objects
	base   objRef
	deltas []objRef
	clock  int64
	exact  bool
	gen    uint64
	name   string
}

// run merges base and deltas into a new base object.
func (j compactJob) run(ctx context.Context) compactResult {
	fail := func(err error) compactResult { return compactResult{gen: j.gen, err: err} }
	inputs, err := readChain(ctx, j.objs, j.base, j.deltas, j.exact, j.clock)
	if err != nil {
		return fail(err)
	}
	nowSec := uint32(j.clock / int64(time.Second))
	var n uint64
	if err := mergeEntries(inputs, nowSec, func(*slot, []byte) error { n++; return nil }); err != nil {
		return fail(err)
	}
	var sum uint32
	info, err := j.objs.Write(ctx, j.name, func(w io.Writer) error {
		c := &chunkWriter{w: w, buf: make([]byte, 0, writeChunk), ctx: ctx}
		defer func() { sum = c.crc }()
		c.header(j.clock, j.exact, n)
		err := mergeEntries(inputs, nowSec, func(s *slot, key []byte) error {
			c.entry(s, key, j.exact)
			return c.err
		})
		if err != nil {
			return err
		}
		return c.finish()
	})
	if err != nil {
		j.objs.Abandon(j.name)
		return fail(fmt.Errorf("dedup: compaction into %s: %w", j.name, err))
	}
	return compactResult{gen: j.gen, base: objRef{name: j.name, size: info.Size, crc: sum, count: n}, merged: len(j.deltas)}
}
