package chsink

// SetHooks installs test hooks that run, with the sink's lock held, just
// before an intent is recorded and just before an insert is sent.
func (s *Sink[T]) SetHooks(beforeRecord, beforeInsert func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.beforeRecord, s.beforeInsert = beforeRecord, beforeInsert
}
