// Package crashfs is an in-memory checkpoint.FS that remembers what was made
// durable, for crash tests: Crash throws away every file content not synced
// with File.Sync and every directory entry not synced with SyncDir, as a
// power loss may, so a test can check that an FSStorage keeps every write it
// acknowledged and never shows a half-written one. SetCrashAfter makes the
// filesystem die in the middle of an operation sequence, after a given
// number of mutating calls, so a test can crash at every step.
//
// The model is strict like pebble's vfs.NewCrashableMem (nothing unsynced
// survives) unless Crash is given a random source, which keeps each unsynced
// file content and each unsynced directory's current entries with
// probability one half, independently: writes reaching the disk in another
// order than issued.
package crashfs

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"sort"
	"strings"
	"sync"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// ErrCrashed is returned by every call after the crash point set by
// SetCrashAfter, until Crash.
var ErrCrashed = errors.New("crashfs: crashed")

type node struct {
	dir bool
	// files
	data, synced []byte
	// temporary files: the LockTemp lock, held by a live writer
	locked *int
	// directories
	children, syncedChildren map[string]*node
}

func newDir() *node {
	return &node{dir: true, children: map[string]*node{}, syncedChildren: map[string]*node{}}
}

// FS is the crashable filesystem. It is safe for concurrent use.
type FS struct {
	mu       sync.Mutex
	root     *node
	locks    map[string]*sync.Mutex
	seq      int
	ops      int // mutating calls so far
	crashAt  int // ops at which the crash happens; 0: never
	crashed  bool
	lockWait sync.Mutex // guards locks
}

var (
	_ checkpoint.FS         = (*FS)(nil)
	_ checkpoint.TempLocker = (*FS)(nil)
)

// New returns an empty filesystem: just "/", durable.
func New() *FS { return &FS{root: newDir(), locks: map[string]*sync.Mutex{}} }

// SetCrashAfter makes the filesystem crash at its n-th mutating call from
// now (n >= 1): that call and every later one fail with ErrCrashed and change
// nothing, until Crash.
func (f *FS) SetCrashAfter(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.crashAt = f.ops + n
}

// Ops returns the number of mutating calls made so far.
func (f *FS) Ops() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ops
}

// Crash simulates a power loss and reboot: unsynced content and entries are
// lost (with rng, each kept with probability one half), open files are
// invalid, and the filesystem works again.
func (f *FS) Crash(rng *rand.Rand) {
	f.mu.Lock()
	defer f.mu.Unlock()
	keep := func() bool { return rng != nil && rng.IntN(2) == 0 }
	seen := map[*node]bool{}
	var reset func(n *node)
	reset = func(n *node) {
		if seen[n] {
			return
		}
		seen[n] = true
		if !n.dir {
			n.locked = nil // the writers died
			if !keep() {
				n.data = n.synced
			}
			n.data = append([]byte(nil), n.data...)
			n.synced = append([]byte(nil), n.data...)
			return
		}
		if !keep() {
			n.children = n.syncedChildren
		}
		n.children = clone(n.children)
		n.syncedChildren = clone(n.children)
		for _, c := range n.children {
			reset(c)
		}
	}
	reset(f.root)
	f.crashed = false
	f.crashAt = 0
}

func clone(m map[string]*node) map[string]*node {
	c := make(map[string]*node, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// mutate counts a mutating call and reports whether it may proceed; f.mu is
// held.
func (f *FS) mutate() error {
	if f.crashed {
		return ErrCrashed
	}
	f.ops++
	if f.crashAt != 0 && f.ops >= f.crashAt {
		f.crashed = true
		return ErrCrashed
	}
	return nil
}

func split(name string) []string {
	name = path.Clean("/" + strings.ReplaceAll(name, "\\", "/"))
	if name == "/" {
		return nil
	}
	return strings.Split(name[1:], "/")
}

// lookup returns the node at name; f.mu is held.
func (f *FS) lookup(name string) (*node, error) {
	n := f.root
	for _, seg := range split(name) {
		if !n.dir {
			return nil, &fs.PathError{Op: "lookup", Path: name, Err: errors.New("not a directory")}
		}
		c, ok := n.children[seg]
		if !ok {
			return nil, &fs.PathError{Op: "lookup", Path: name, Err: fs.ErrNotExist}
		}
		n = c
	}
	return n, nil
}

// parent returns the directory holding name and name's base; f.mu is held.
func (f *FS) parent(name string) (*node, string, error) {
	segs := split(name)
	if len(segs) == 0 {
		return nil, "", &fs.PathError{Op: "parent", Path: name, Err: fs.ErrInvalid}
	}
	d, err := f.lookup("/" + strings.Join(segs[:len(segs)-1], "/"))
	if err != nil {
		return nil, "", err
	}
	if !d.dir {
		return nil, "", &fs.PathError{Op: "parent", Path: name, Err: errors.New("not a directory")}
	}
	return d, segs[len(segs)-1], nil
}

// MkdirAll implements checkpoint.FS.
func (f *FS) MkdirAll(dir string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.root
	for _, seg := range split(dir) {
		c, ok := n.children[seg]
		if !ok {
			if err := f.mutate(); err != nil {
				return err
			}
			c = newDir()
			n.children[seg] = c
		}
		if !c.dir {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: fs.ErrExist}
		}
		n = c
	}
	return nil
}

// CreateTemp implements checkpoint.FS.
func (f *FS) CreateTemp(dir, pattern string) (checkpoint.File, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.mutate(); err != nil {
		return nil, err
	}
	d, err := f.lookup(dir)
	if err != nil {
		return nil, err
	}
	f.seq++
	base := strings.Replace(pattern, "*", fmt.Sprint(f.seq), 1)
	if !strings.Contains(pattern, "*") {
		base += fmt.Sprint(f.seq)
	}
	n := &node{}
	d.children[base] = n
	return &file{fs: f, n: n, name: path.Join(dir, base)}, nil
}

// ReadFile implements checkpoint.FS.
func (f *FS) ReadFile(name string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := f.lookup(name)
	if err != nil {
		return nil, err
	}
	if n.dir {
		return nil, &fs.PathError{Op: "read", Path: name, Err: errors.New("is a directory")}
	}
	return append([]byte(nil), n.data...), nil
}

// Stat implements checkpoint.FS.
func (f *FS) Stat(name string) (fs.FileInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := f.lookup(name)
	if err != nil {
		return nil, err
	}
	return info{name: path.Base(name), n: n}, nil
}

// ReadDir implements checkpoint.FS.
func (f *FS) ReadDir(dir string) ([]fs.DirEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := f.lookup(dir)
	if err != nil {
		return nil, err
	}
	if !n.dir {
		return nil, &fs.PathError{Op: "readdir", Path: dir, Err: errors.New("not a directory")}
	}
	entries := make([]fs.DirEntry, 0, len(n.children))
	for name, c := range n.children {
		entries = append(entries, fs.FileInfoToDirEntry(info{name: name, n: c}))
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	return entries, nil
}

// Rename implements checkpoint.FS.
func (f *FS) Rename(oldpath, newpath string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.mutate(); err != nil {
		return err
	}
	od, ob, err := f.parent(oldpath)
	if err != nil {
		return err
	}
	nd, nb, err := f.parent(newpath)
	if err != nil {
		return err
	}
	n, ok := od.children[ob]
	if !ok {
		return &fs.PathError{Op: "rename", Path: oldpath, Err: fs.ErrNotExist}
	}
	if t, ok := nd.children[nb]; ok && t.dir {
		return &fs.PathError{Op: "rename", Path: newpath, Err: errors.New("is a directory")}
	}
	delete(od.children, ob)
	nd.children[nb] = n
	return nil
}

// Link implements checkpoint.FS.
func (f *FS) Link(oldname, newname string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.mutate(); err != nil {
		return err
	}
	n, err := f.lookup(oldname)
	if err != nil {
		return err
	}
	nd, nb, err := f.parent(newname)
	if err != nil {
		return err
	}
	if _, ok := nd.children[nb]; ok {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: fs.ErrExist}
	}
	nd.children[nb] = n
	return nil
}

// Remove implements checkpoint.FS.
func (f *FS) Remove(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.mutate(); err != nil {
		return err
	}
	d, b, err := f.parent(name)
	if err != nil {
		return err
	}
	n, ok := d.children[b]
	if !ok {
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	if n.dir && len(n.children) > 0 {
		return &fs.PathError{Op: "remove", Path: name, Err: errors.New("directory not empty")}
	}
	delete(d.children, b)
	return nil
}

// SyncDir implements checkpoint.FS.
func (f *FS) SyncDir(dir string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.mutate(); err != nil {
		return err
	}
	n, err := f.lookup(dir)
	if err != nil {
		return err
	}
	n.syncedChildren = clone(n.children)
	return nil
}

// LockTemp implements checkpoint.TempLocker. The lock never waits (the
// filesystem is one process's); Crash releases every lock, as the death of
// the process holding it would.
func (f *FS) LockTemp(name string) (func(), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.crashed {
		return nil, ErrCrashed
	}
	n, err := f.lookup(name)
	if err != nil {
		return nil, err
	}
	if n.locked != nil {
		return nil, fmt.Errorf("crashfs: %s is locked already", name)
	}
	token := new(int)
	n.locked = token
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if n.locked == token {
			n.locked = nil
		}
	}, nil
}

// RemoveUnlocked implements checkpoint.TempLocker.
func (f *FS) RemoveUnlocked(name string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.mutate(); err != nil {
		return false, err
	}
	d, b, err := f.parent(name)
	if err != nil {
		return false, err
	}
	n, ok := d.children[b]
	if !ok || n.dir || n.locked != nil {
		return false, nil
	}
	delete(d.children, b)
	return true, nil
}

// Lock implements checkpoint.FS: a mutex per directory, within this process.
func (f *FS) Lock(dir string) (func(), error) {
	f.lockWait.Lock()
	m, ok := f.locks[path.Clean(dir)]
	if !ok {
		m = &sync.Mutex{}
		f.locks[path.Clean(dir)] = m
	}
	f.lockWait.Unlock()
	m.Lock()
	return m.Unlock, nil
}
