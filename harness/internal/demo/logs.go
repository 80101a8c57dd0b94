package demo

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// Logs keeps every binary's log in a file of its own under Dir, at level
// info, so that a failed run can be traced afterwards (a breach of the
// 100,000-event chaos run was traced through ClickHouse's log because the
// processors' were gone), while the terminal shows only the lines at
// Terminal's level or above, as before: ERROR, or WARN with -v. A line
// that is not one of the binaries' JSON records (a panic, a runtime
// message) always reaches the terminal too.
type Logs struct {
	Dir      string
	Terminal io.Writer
	Verbose  bool // WARN lines reach the terminal too

	mu    sync.Mutex // orders whole lines on Terminal
	files map[string]*os.File
}

// Writer returns the output of the process called name (gateway,
// processor-2): each of its lines goes to Dir/name.log, appended across
// its restarts, and to the terminal when its level says so. start is
// written first, as a line of its own, to tell restarts apart.
func (l *Logs) Writer(name, start string) (io.Writer, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.files == nil {
		l.files = map[string]*os.File{}
	}
	f := l.files[name]
	if f == nil {
		if err := os.MkdirAll(l.Dir, 0o755); err != nil {
			return nil, err
		}
		var err error
		if f, err = os.OpenFile(filepath.Join(l.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			return nil, err
		}
		l.files[name] = f
	}
	if _, err := fmt.Fprintf(f, "--- %s\n", start); err != nil {
		return nil, err
	}
	return &lineWriter{logs: l, file: f}, nil
}

// Close closes the files.
func (l *Logs) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first error
	for _, f := range l.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	l.files = nil
	return first
}

// toTerminal reports whether line reaches the terminal.
func (l *Logs) toTerminal(line []byte) bool {
	if !bytes.HasPrefix(line, []byte("{")) {
		return true
	}
	return bytes.Contains(line, []byte(`"level":"ERROR"`)) || l.Verbose && bytes.Contains(line, []byte(`"level":"WARN"`))
}

// lineWriter splits one process's output into lines. exec copies a
// process's output from one goroutine, so a lineWriter is not shared.
type lineWriter struct {
	logs    *Logs
	file    *os.File
	partial []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := w.partial[:i+1]
		// O_APPEND writes of one line each are not interleaved with
		// another process's lines in the same file (each has its own).
		if _, err := w.file.Write(line); err != nil {
			return 0, err
		}
		if w.logs.toTerminal(line) {
			w.logs.mu.Lock()
			_, _ = w.logs.Terminal.Write(line)
			w.logs.mu.Unlock()
		}
		w.partial = w.partial[i+1:]
	}
}
