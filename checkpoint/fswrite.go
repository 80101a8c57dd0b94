package checkpoint

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
)

// Put implements Storage. When Put returns an error the outcome is unknown
// only if the error came from the final directory fsync: the new content may
// or may not survive a machine crash. In every case the name holds either the
// old or the new content, never a mix.
func (s *FSStorage) Put(ctx context.Context, name string, data []byte) error {
	_, err := s.write(ctx, "put", name, data, func(file string) error {
		return nil
	})
	return err
}

// fsStreamBuffer is the buffer between PutStream's writer and the file, so
// that a writer of many small pieces makes few system calls.
const fsStreamBuffer = 256 << 10

// PutStream implements StreamPutter as Put does, writing the temporary file
// through a buffer as write produces the bytes. An error from write removes
// the temporary file and leaves the name as it was.
func (s *FSStorage) PutStream(ctx context.Context, name string, write func(w io.Writer) error) error {
	file, err := s.file("put", name)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("checkpoint: put %q: %w", name, err)
	}
	dir := filepath.Dir(file)
	tmp, unlock, err := s.writeTempFunc(dir, file, func(f io.Writer) error {
		bw := bufio.NewWriterSize(f, fsStreamBuffer)
		if err := write(bw); err != nil {
			return err
		}
		return bw.Flush()
	})
	if err != nil {
		return fmt.Errorf("checkpoint: put %q: %w", name, err)
	}
	defer unlock()
	if err := s.locked(dir, func() error { return s.fs.Rename(tmp, file) }); err != nil {
		_ = s.fs.Remove(tmp)
		return fmt.Errorf("checkpoint: put %q: %w", name, err)
	}
	if err := s.fs.SyncDir(dir); err != nil {
		return fmt.Errorf("checkpoint: put %q: %w", name, err)
	}
	return nil
}

// Create implements Storage. It links a complete, synced temporary file to
// the name: link(2) fails when the name exists, atomically, also between
// processes and over NFS, so no lock is needed and a crash leaves nothing or
// the whole content. An error that does not wrap ErrConflict is a definite
// failure unless it came from the final directory fsync (the name is then
// created, but may not survive a machine crash).
func (s *FSStorage) Create(ctx context.Context, name string, data []byte) (Version, error) {
	file, err := s.file("create", name)
	if err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("checkpoint: create %q: %w", name, err)
	}
	dir := filepath.Dir(file)
	tmp, unlock, err := s.writeTemp(dir, file, data)
	if err != nil {
		return "", fmt.Errorf("checkpoint: create %q: %w", name, err)
	}
	err = s.fs.Link(tmp, file)
	_ = s.fs.Remove(tmp)
	unlock()
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("checkpoint: create %q: %w", name, ErrConflict)
		}
		return "", fmt.Errorf("checkpoint: create %q: %w", name, err)
	}
	if err := s.fs.SyncDir(dir); err != nil {
		return "", fmt.Errorf("checkpoint: create %q: %w", name, err)
	}
	return contentVersion(data), nil
}

// Replace implements Storage. The check of the current content and the
// rename over it happen under an exclusive flock(2) of the directory's lock
// file, which Put and Delete take too, so the version check holds against
// every writer on this machine and on filesystems whose flock is shared
// between clients. An error that does not wrap ErrConflict is a definite
// failure unless it came from the final directory fsync (the name then holds
// the new content, which may not survive a machine crash).
func (s *FSStorage) Replace(ctx context.Context, name string, data []byte, v Version) (Version, error) {
	return s.write(ctx, "replace", name, data, func(file string) error {
		cur, err := s.fs.ReadFile(file)
		if errors.Is(err, fs.ErrNotExist) {
			return ErrConflict
		}
		if err != nil {
			return err
		}
		if v == "" || contentVersion(cur) != v {
			return ErrConflict
		}
		return nil
	})
}

// write stores data under name through a synced temporary file renamed over
// the name while the directory lock is held and check, called under the
// lock, returns nil.
func (s *FSStorage) write(ctx context.Context, op, name string, data []byte, check func(file string) error) (Version, error) {
	file, err := s.file(op, name)
	if err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("checkpoint: %s %q: %w", op, name, err)
	}
	dir := filepath.Dir(file)
	tmp, unlock, err := s.writeTemp(dir, file, data)
	if err != nil {
		return "", fmt.Errorf("checkpoint: %s %q: %w", op, name, err)
	}
	defer unlock()
	err = s.locked(dir, func() error {
		if err := check(file); err != nil {
			return err
		}
		return s.fs.Rename(tmp, file)
	})
	if err != nil {
		_ = s.fs.Remove(tmp)
		return "", fmt.Errorf("checkpoint: %s %q: %w", op, name, err)
	}
	if err := s.fs.SyncDir(dir); err != nil {
		return "", fmt.Errorf("checkpoint: %s %q: %w", op, name, err)
	}
	return contentVersion(data), nil
}

// writeTemp writes data to a new temporary file beside file and syncs it.
func (s *FSStorage) writeTemp(dir, file string, data []byte) (string, func(), error) {
	return s.writeTempFunc(dir, file, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// writeTempFunc writes what fill writes to a new temporary file beside file
// and syncs it. On an FS with TempLocker the file is locked from its
// creation until unlock, which the caller calls once the file is renamed or
// linked into place (or removed), so that removeStaleTemps of any process
// leaves it alone.
func (s *FSStorage) writeTempFunc(dir, file string, fill func(w io.Writer) error) (name string, unlock func(), err error) {
	if err := s.ensureDir(dir); err != nil {
		return "", nil, err
	}
	tmp, unlock, err := s.createTemp(dir, tempMarker+filepath.Base(file)+".*")
	if err != nil {
		return "", nil, err
	}
	tmpName := tmp.Name()
	err = fill(tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = s.fs.Remove(tmpName)
		unlock()
		return "", nil, err
	}
	return tmpName, unlock, nil
}

// createTemp creates a temporary file and, on an FS with TempLocker, locks
// it. Between the creation and the lock another process's removeStaleTemps
// can take the file for a dead writer's and remove it; then LockTemp says
// so and createTemp makes another (a few times at most: it takes a cleaner
// running in that very instant each time).
func (s *FSStorage) createTemp(dir, pattern string) (File, func(), error) {
	tl, ok := s.fs.(TempLocker)
	if !ok {
		f, err := s.fs.CreateTemp(dir, pattern)
		return f, func() {}, err
	}
	for attempt := 0; ; attempt++ {
		f, err := s.fs.CreateTemp(dir, pattern)
		if err != nil {
			return nil, nil, err
		}
		unlock, err := tl.LockTemp(f.Name())
		if err == nil {
			return f, unlock, nil
		}
		_ = f.Close()
		if !errors.Is(err, fs.ErrNotExist) || attempt == 3 {
			_ = s.fs.Remove(f.Name())
			return nil, nil, err
		}
	}
}

// isTemp reports whether a directory entry is a temporary file of an
// FSStorage (and not the directory's lock file).
func isTemp(e fs.DirEntry) bool {
	return !e.IsDir() && strings.HasPrefix(e.Name(), tempMarker) && e.Name() != lockFile
}

// removeStaleTemps removes the temporary files of dir (and, if deep, of
// its subdirectories) that no live writer holds: those of writers that
// died between creating and renaming them. It needs the FS's TempLocker
// and is best effort: a file it cannot remove now is tried again at the
// next List or open, and is never read anyway.
func (s *FSStorage) removeStaleTemps(dir string, entries []fs.DirEntry, deep bool) {
	tl, ok := s.fs.(TempLocker)
	if !ok {
		return
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		switch {
		case isTemp(e):
			_, _ = tl.RemoveUnlocked(p)
		case deep && e.IsDir():
			if sub, err := s.fs.ReadDir(p); err == nil {
				s.removeStaleTemps(p, sub, true)
			}
		}
	}
}
