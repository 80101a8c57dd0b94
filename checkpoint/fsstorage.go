package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
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
// FSStorage is safe for concurrent use, also by several processes sharing the
// directory, provided that no two writers Put the same name concurrently with
// different data (the checkpoint coordinator never does: names carry the
// writer's partition and checkpoint id).
type FSStorage struct {
	root string

	mu     sync.Mutex
	synced map[string]bool // directories whose entry in their parent is durable
}

var _ Storage = (*FSStorage)(nil)

// NewFSStorage returns a Storage keeping its blobs below dir, creating dir if
// needed.
func NewFSStorage(dir string) (*FSStorage, error) {
	if dir == "" {
		return nil, fmt.Errorf("checkpoint: NewFSStorage: empty directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: NewFSStorage: %w", err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint: NewFSStorage: %w", err)
	}
	if err := syncDir(filepath.Dir(abs)); err != nil {
		return nil, fmt.Errorf("checkpoint: NewFSStorage: %w", err)
	}
	return &FSStorage{root: abs, synced: map[string]bool{abs: true}}, nil
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

// Put implements Storage. When Put returns an error the outcome is unknown
// only if the error came from the final directory fsync: the new content may
// or may not survive a machine crash. In every case the name holds either the
// old or the new content, never a mix.
func (s *FSStorage) Put(ctx context.Context, name string, data []byte) error {
	file, err := s.file("put", name)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("checkpoint: put %q: %w", name, err)
	}
	dir := filepath.Dir(file)
	if err := s.ensureDir(dir); err != nil {
		return fmt.Errorf("checkpoint: put %q: %w", name, err)
	}
	tmp, err := os.CreateTemp(dir, tempMarker+filepath.Base(file)+".*")
	if err != nil {
		return fmt.Errorf("checkpoint: put %q: %w", name, err)
	}
	tmpName := tmp.Name()
	fail := func(err error) error {
		_ = tmp.Close()
		_ = os.Remove(tmpName)
		return fmt.Errorf("checkpoint: put %q: %w", name, err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		_ = os.Remove(tmpName)
		return fmt.Errorf("checkpoint: put %q: %w", name, err)
	}
	if err := os.Rename(tmpName, file); err != nil {
		_ = os.Remove(tmpName)
		return fmt.Errorf("checkpoint: put %q: %w", name, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("checkpoint: put %q: %w", name, err)
	}
	return nil
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
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// Sync each parent from dir up to the root, so every new entry survives.
	for d := dir; d != s.root && strings.HasPrefix(d, s.root); d = filepath.Dir(d) {
		if err := syncDir(filepath.Dir(d)); err != nil {
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
	file, err := s.file("get", name)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("checkpoint: get %q: %w", name, err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || isDirErr(file) {
			return nil, fmt.Errorf("checkpoint: get %q: %w", name, ErrNotFound)
		}
		return nil, fmt.Errorf("checkpoint: get %q: %w", name, err)
	}
	return data, nil
}

func isDirErr(file string) bool {
	fi, err := os.Stat(file)
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
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() || strings.Contains(d.Name(), tempMarker) {
			return nil
		}
		rel, err := filepath.Rel(s.root, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if strings.HasPrefix(name, prefix) && ValidName(name) {
			names = append(names, name)
		}
		return nil
	})
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
	if err := os.Remove(file); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("checkpoint: delete %q: %w", name, err)
	}
	if err := syncDir(filepath.Dir(file)); err != nil {
		return fmt.Errorf("checkpoint: delete %q: %w", name, err)
	}
	return nil
}

func syncDir(dir string) error {
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
