package checkpoint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// tempMarker is part of every temporary file name. It is not a character
// allowed in a Storage name, so List can never confuse a temporary file
// left by a crash with a stored blob.
const tempMarker = "#"

// ErrInvalidName is returned for a name that is not a slash-separated path of
// non-empty [A-Za-z0-9._-] segments (the segments "." and ".." are refused).
var ErrInvalidName = errors.New("checkpoint: invalid storage name")

// FSStorage is the local filesystem Storage: each name is a file below a root
// directory.
//
// Put writes a temporary file in the target directory, fsyncs it, renames it
// over the target and fsyncs the directory, so a crash leaves either the old
// content or the new one. Temporary files left by a crash are ignored by List
// and Get; they are never read back.
//
// A writer killed between creating its temporary file and renaming it
// (kill -9, OOM, a power loss) leaves the file behind. NewFSStorage removes
// such files below the root, and List those of the directories it walks,
// but only files named as its own temporary files ("#" + name + "." +
// random) and only those no live writer holds: each writer holds a flock(2)
// of its temporary file from its creation until it is renamed into place,
// the kernel drops it when the process dies, and the cleaner removes a file
// only while holding that lock itself (see TempLocker). So a process never
// removes another live process's file, also when they share the directory,
// and a crash leaves no garbage for longer than until the next open or List.
//
// Create links the synced temporary file to the name, which fails if the name
// exists; Put, Replace and Delete change a name under an exclusive flock(2) of
// a lock file in its directory, so Replace's version check holds against
// every writer. A Version is the SHA-256 of the content.
//
// Every call goes through an FS (OSFS unless NewFSStorageOn is given
// another), which is how the package's tests crash it at every step on a
// filesystem that loses whatever was not synced, and check that every
// acknowledged write survives and no other one half-appears.
//
// FSStorage is safe for concurrent use, also by several processes sharing the
// directory on one machine or on a filesystem whose link(2) is atomic and
// whose flock(2) is shared between clients (local filesystems, NFSv4).
type FSStorage struct {
	fs   FS
	root string

	mu     sync.Mutex
	synced map[string]bool // directories whose entry in their parent is durable
}

var (
	_ Storage      = (*FSStorage)(nil)
	_ StreamPutter = (*FSStorage)(nil)
)

// NewFSStorage returns a Storage keeping its blobs below dir, creating dir if
// needed.
func NewFSStorage(dir string) (*FSStorage, error) {
	return NewFSStorageOn(OSFS{}, dir)
}

// NewFSStorageOn is NewFSStorage on the filesystem fsys.
func NewFSStorageOn(fsys FS, dir string) (*FSStorage, error) {
	if dir == "" {
		return nil, fmt.Errorf("checkpoint: NewFSStorage: empty directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: NewFSStorage: %w", err)
	}
	if err := fsys.MkdirAll(abs); err != nil {
		return nil, fmt.Errorf("checkpoint: NewFSStorage: %w", err)
	}
	if err := fsys.SyncDir(filepath.Dir(abs)); err != nil {
		return nil, fmt.Errorf("checkpoint: NewFSStorage: %w", err)
	}
	s := &FSStorage{fs: fsys, root: abs, synced: map[string]bool{abs: true}}
	if entries, err := fsys.ReadDir(abs); err == nil {
		s.removeStaleTemps(abs, entries, true)
	}
	return s, nil
}

// Dir returns the root directory.
func (s *FSStorage) Dir() string { return s.root }

// ValidName reports whether name is a valid Storage name.
func ValidName(name string) bool {
	if name == "" {
		return false
	}
	for seg := range strings.SplitSeq(name, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			switch {
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
				c == '.', c == '_', c == '-':
			default:
				return false
			}
		}
	}
	return true
}

func (s *FSStorage) file(op, name string) (string, error) {
	if !ValidName(name) {
		return "", fmt.Errorf("checkpoint: %s %q: %w", op, name, ErrInvalidName)
	}
	return filepath.Join(s.root, filepath.FromSlash(name)), nil
}

// locked runs fn holding the lock of dir (see FS.Lock).
func (s *FSStorage) locked(dir string, fn func() error) error {
	unlock, err := s.fs.Lock(dir)
	if err != nil {
		return err
	}
	defer unlock()
	return fn()
}

// contentVersion is the Version of data on the filesystem: its SHA-256. A
// hash rather than a generation counter keeps the files exactly the stored
// bytes (files written by earlier releases need no migration) and gives the
// same Versions as S3's single-part ETags do, with the same caveat: equal
// content has an equal Version.
func contentVersion(data []byte) Version {
	sum := sha256.Sum256(data)
	return Version(hex.EncodeToString(sum[:]))
}

// ensureDir creates dir and makes every directory entry from the root down
// to dir durable.
func (s *FSStorage) ensureDir(dir string) error {
	s.mu.Lock()
	done := s.synced[dir]
	s.mu.Unlock()
	if done {
		return nil
	}
	if err := s.fs.MkdirAll(dir); err != nil {
		return err
	}
	// Sync each parent from dir up to the root, so every new entry survives.
	for d := dir; d != s.root && strings.HasPrefix(d, s.root); d = filepath.Dir(d) {
		if err := s.fs.SyncDir(filepath.Dir(d)); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.synced[dir] = true
	s.mu.Unlock()
	return nil
}

// Get implements Storage.
func (s *FSStorage) Get(ctx context.Context, name string) ([]byte, error) {
	return s.read(ctx, "get", name)
}

// GetVersion implements Storage. The Version is the SHA-256 of the content.
func (s *FSStorage) GetVersion(ctx context.Context, name string) ([]byte, Version, error) {
	data, err := s.read(ctx, "get", name)
	if err != nil {
		return nil, "", err
	}
	return data, contentVersion(data), nil
}

func (s *FSStorage) read(ctx context.Context, op, name string) ([]byte, error) {
	file, err := s.file(op, name)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("checkpoint: %s %q: %w", op, name, err)
	}
	data, err := s.fs.ReadFile(file)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || s.isDir(file) {
			return nil, fmt.Errorf("checkpoint: %s %q: %w", op, name, ErrNotFound)
		}
		return nil, fmt.Errorf("checkpoint: %s %q: %w", op, name, err)
	}
	return data, nil
}

func (s *FSStorage) isDir(file string) bool {
	fi, err := s.fs.Stat(file)
	return err == nil && fi.IsDir()
}

// List implements Storage.
func (s *FSStorage) List(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("checkpoint: list %q: %w", prefix, err)
	}
	// Walk only the deepest directory that can hold matching names.
	base := ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		base = prefix[:i]
		if !ValidName(base) {
			return nil, nil // no stored name can have this prefix
		}
	}
	start := filepath.Join(s.root, filepath.FromSlash(base))
	var names []string
	var walk func(dir string) error
	walk = func(dir string) error {
		entries, err := s.fs.ReadDir(dir)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		s.removeStaleTemps(dir, entries, false)
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			if e.IsDir() {
				if err := walk(p); err != nil {
					return err
				}
				continue
			}
			if strings.Contains(e.Name(), tempMarker) {
				continue
			}
			rel, err := filepath.Rel(s.root, p)
			if err != nil {
				return err
			}
			name := filepath.ToSlash(rel)
			if strings.HasPrefix(name, prefix) && ValidName(name) {
				names = append(names, name)
			}
		}
		return nil
	}
	err := walk(start)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list %q: %w", prefix, err)
	}
	sort.Strings(names)
	return names, nil
}

// Delete implements Storage.
func (s *FSStorage) Delete(ctx context.Context, name string) error {
	file, err := s.file("delete", name)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("checkpoint: delete %q: %w", name, err)
	}
	dir := filepath.Dir(file)
	if _, err := s.fs.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil // never create a directory (and its lock file) to delete nothing
	}
	err = s.locked(dir, func() error { return s.fs.Remove(file) })
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("checkpoint: delete %q: %w", name, err)
	}
	if err := s.fs.SyncDir(filepath.Dir(file)); err != nil {
		return fmt.Errorf("checkpoint: delete %q: %w", name, err)
	}
	return nil
}
