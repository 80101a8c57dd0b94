package crashfs

import (
	"io/fs"
	"time"
)

type file struct {
	fs     *FS
	n      *node
	name   string
	closed bool
}

func (w *file) Write(p []byte) (int, error) {
	w.fs.mu.Lock()
	defer w.fs.mu.Unlock()
	if err := w.fs.mutate(); err != nil {
		return 0, err
	}
	if w.closed {
		return 0, fs.ErrClosed
	}
	w.n.data = append(w.n.data, p...)
	return len(p), nil
}

func (w *file) Sync() error {
	w.fs.mu.Lock()
	defer w.fs.mu.Unlock()
	if err := w.fs.mutate(); err != nil {
		return err
	}
	w.n.synced = append([]byte(nil), w.n.data...)
	return nil
}

func (w *file) Close() error {
	w.fs.mu.Lock()
	defer w.fs.mu.Unlock()
	w.closed = true
	return nil
}

func (w *file) Name() string { return w.name }

type info struct {
	name string
	n    *node
}

func (i info) Name() string { return i.name }
func (i info) Size() int64  { return int64(len(i.n.data)) }
func (i info) Mode() fs.FileMode {
	if i.n.dir {
		return fs.ModeDir | 0o755
	}
	return 0o644
}
func (i info) ModTime() time.Time { return time.Time{} }
func (i info) IsDir() bool        { return i.n.dir }
func (i info) Sys() any           { return nil }
