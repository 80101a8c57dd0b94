package chsink

// SetHooks installs test hooks that run when a batch is cut, before its
// intent is recorded (with the sink's lock held, in the goroutine that cut
// it), and just before an insert attempt is sent (in the goroutine of the
// batch in flight, or with the lock held in a replay). A hook set while a
// batch is in flight applies from the next batch on.
func (s *Sink[T]) SetHooks(beforeRecord, beforeInsert func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.beforeRecord, s.beforeInsert = beforeRecord, beforeInsert
}

// SetAfterWrite installs a hook that runs with the sink's lock held when
// ClickHouse acknowledged a batch, with its row count.
func (s *Sink[T]) SetAfterWrite(f func(rows int)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.afterWrite = f
}

// BufferedBytesPerRow returns the encoded bytes per row of the last batch,
// the size a buffered row occupies in the sink's column buffers.
func BufferedBytesPerRow[T any](s *Sink[T]) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytesPerRow
}

// rawData and appendRaw give the benchmark the same column mapping the sink
// uses, driven directly.
func RawData[T any](c Column[T]) interface{} { return c.data }

// AppendRaw appends row to every column.
func AppendRaw[T any](cols []Column[T], row *T) {
	for i := range cols {
		cols[i].add(row)
	}
}

// SetAfterRepairStep installs a hook that runs after each step of a
// lost-part check or repair ("staged", "located", "filled", "renamed",
// "moved", "derived"); an error it returns stops the repair there, as a crash would.
func (s *Sink[T]) SetAfterRepairStep(f func(step string) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.repairer.SetAfterStep(f)
}

// SetJournalHook installs a hook that a batch's goroutine runs just before
// it journals the batch's intent: the batch is cut, the chain goes on, and
// nothing of the batch is durable yet.
func (s *Sink[T]) SetJournalHook(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.beforeJournal = f
}

// KeepCheckpoints returns the number of checkpoints whose journal the sink
// keeps (Options.KeepCheckpoints, defaults applied).
func KeepCheckpoints[T any](s *Sink[T]) int { return s.opts.KeepCheckpoints }

// Database returns the database the sink writes to.
func Database[T any](s *Sink[T]) string { return s.opts.Database }
