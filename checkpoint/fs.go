package checkpoint

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// FS is the filesystem under an FSStorage: the few calls it makes, so that
// tests can run it on a filesystem that loses what was not synced when it
// "crashes", or that fails on demand. Paths are absolute, in the host's
// form. OSFS is the real one.
//
// The durability contract FSStorage relies on is POSIX's: data written to a
// File survives a crash only after File.Sync; a directory entry created,
// renamed or removed survives only after SyncDir of its directory.
type FS interface {
	// MkdirAll creates dir and every missing parent.
	MkdirAll(dir string) error
	// CreateTemp creates a new file in dir whose name is pattern with its
	// "*" replaced by a random string, open for writing.
	CreateTemp(dir, pattern string) (File, error)
	// ReadFile returns a file's content; fs.ErrNotExist if it is absent.
	ReadFile(name string) ([]byte, error)
	// Stat describes name; fs.ErrNotExist if it is absent.
	Stat(name string) (fs.FileInfo, error)
	// ReadDir lists a directory, sorted by name.
	ReadDir(dir string) ([]fs.DirEntry, error)
	// Rename replaces newpath by oldpath atomically.
	Rename(oldpath, newpath string) error
	// Link creates newname as a hard link of oldname, failing with
	// fs.ErrExist, atomically, if newname exists.
	Link(oldname, newname string) error
	// Remove removes a file.
	Remove(name string) error
	// SyncDir makes dir's entries durable (fsync of the directory).
	SyncDir(dir string) error
	// Lock takes an exclusive lock on dir, held until unlock is called,
	// that excludes every other holder of a lock on dir: on OSFS, other
	// processes too (flock(2) of a lock file in dir).
	Lock(dir string) (unlock func(), err error)
}

// TempLocker is an optional capability of an FS, which OSFS has: a lock on
// each temporary file that its writer holds until the file is renamed or
// linked into place, so that FSStorage can remove the temporary files of
// writers that died (kill -9, a power loss) without ever touching a live
// writer's, also when several processes share the directory. On an FS
// without it FSStorage leaves temporary files alone.
type TempLocker interface {
	// LockTemp takes an exclusive lock on the file name, waiting for it,
	// held until unlock is called or the process dies. It fails with
	// fs.ErrNotExist if name is gone when the lock is taken (a
	// RemoveUnlocked came first).
	LockTemp(name string) (unlock func(), err error)
	// RemoveUnlocked removes name unless a LockTemp lock of any process
	// holds it, and reports whether it removed it.
	RemoveUnlocked(name string) (removed bool, err error)
}

// File is a file open for writing.
type File interface {
	io.Writer
	// Sync makes the content written so far durable (fsync).
	Sync() error
	Close() error
	// Name returns the path the file was created at.
	Name() string
}

// OSFS is the operating system's filesystem.
type OSFS struct{}

var (
	_ FS         = OSFS{}
	_ TempLocker = OSFS{}
)

// MkdirAll implements FS.
func (OSFS) MkdirAll(dir string) error { return os.MkdirAll(dir, 0o755) }

// CreateTemp implements FS.
func (OSFS) CreateTemp(dir, pattern string) (File, error) { return os.CreateTemp(dir, pattern) }

// ReadFile implements FS.
func (OSFS) ReadFile(name string) ([]byte, error) { return os.ReadFile(name) }

// Stat implements FS.
func (OSFS) Stat(name string) (fs.FileInfo, error) { return os.Stat(name) }

// ReadDir implements FS.
func (OSFS) ReadDir(dir string) ([]fs.DirEntry, error) { return os.ReadDir(dir) }

// Rename implements FS.
func (OSFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

// Link implements FS.
func (OSFS) Link(oldname, newname string) error { return os.Link(oldname, newname) }

// Remove implements FS.
func (OSFS) Remove(name string) error { return os.Remove(name) }

// SyncDir implements FS.
func (OSFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Lock implements FS with an exclusive flock(2) of the file lockFile in dir.
// The lock file is never removed: removing it would race with a process
// about to lock it.
func (OSFS) Lock(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := flock(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() { _ = f.Close() }, nil // closing the file releases the lock
}

// LockTemp implements TempLocker with an exclusive flock(2) of name, which
// the kernel releases when the process dies.
func (OSFS) LockTemp(name string) (func(), error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	if err := flock(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	// RemoveUnlocked may have removed name between its creation and our
	// open, or while it held the lock we waited for.
	if !sameFile(f, name) {
		_ = f.Close()
		return nil, &fs.PathError{Op: "lock", Path: name, Err: fs.ErrNotExist}
	}
	return func() { _ = f.Close() }, nil
}

// RemoveUnlocked implements TempLocker: it removes name only while holding
// its flock(2) without waiting, so no live LockTemp holder loses its file.
func (OSFS) RemoveUnlocked(name string) (bool, error) {
	f, err := os.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	if ok, err := tryFlock(f); !ok || err != nil {
		return false, err
	}
	// The name may now be another file than the one locked (renamed into
	// place meanwhile, and the name reused): remove only the locked one.
	if !sameFile(f, name) {
		return false, nil
	}
	if err := os.Remove(name); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// sameFile reports whether name still names the open file f.
func sameFile(f *os.File, name string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(name)
	return err == nil && os.SameFile(a, b)
}

// lockFile is the name of the lock file in every directory holding names.
// It holds tempMarker, so List never reports it.
const lockFile = tempMarker + "lock"
