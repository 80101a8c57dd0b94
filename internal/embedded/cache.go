package embedded

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"
)

// The chdb build that provides ClickHouse.
const (
	// ChDBPackage is the npm package that carries libchdb.so.
	ChDBPackage = "@chdb/lib-linux-x64-gnu"
	// ChDBVersion is the package version: ClickHouse 26.7.
	ChDBVersion = "26.7.3-stable.1"
	// EnvCacheDir overrides the cache directory.
	EnvCacheDir = "EXACTLYONCE_CACHE"
	// EnvClickHouse names another version of ChDBPackage to start, fetched
	// into the cache like the default one (ClickHouseOptions.ChDBVersion
	// overrides it). Only builds whose clickhouse-local serves TCP work:
	// docs/clickhouse-versions.md lists those tried (26.5.x does not).
	EnvClickHouse = "EXACTLYONCE_CLICKHOUSE"
)

// chdbVersion returns the package version to use: v, else
// $EXACTLYONCE_CLICKHOUSE, else ChDBVersion.
func chdbVersion(v string) string {
	if v != "" {
		return v
	}
	if e := os.Getenv(EnvClickHouse); e != "" {
		return e
	}
	return ChDBVersion
}

// chdbTarball is the file name `npm pack` gives the package's version.
func chdbTarball(version string) string { return "chdb-lib-linux-x64-gnu-" + version + ".tgz" }

//go:embed chdblauncher/main.go
var launcherSource []byte

// CacheDir returns the directory for downloads and built helpers:
// $EXACTLYONCE_CACHE if set, else $HOME/.cache/exactlyonce. It lives outside
// the repository and survives between runs.
func CacheDir() (string, error) {
	if d := os.Getenv(EnvCacheDir); d != "" {
		return d, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("embedded: cache dir: set %s or HOME: %w", EnvCacheDir, err)
	}
	return filepath.Join(home, ".cache", "exactlyonce"), nil
}

// EnsureChDB returns the path of libchdb.so in cacheDir ("" means
// CacheDir()), fetching the npm tarball with `npm pack` if it is absent and
// extracting the library beside it once. Concurrent callers, in this process
// or others, serialise on a file lock, so the tarball is downloaded once.
func EnsureChDB(ctx context.Context, cacheDir string) (string, error) {
	if Short() {
		return "", ErrShort
	}
	return ensureChDB(ctx, cacheDir, "", nil)
}

// ensureChDB is EnsureChDB that writes progress lines to progress (nil:
// none) while it downloads and extracts.
func ensureChDB(ctx context.Context, cacheDir, version string, progress io.Writer) (string, error) {
	version = chdbVersion(version)
	if cacheDir == "" {
		var err error
		if cacheDir, err = CacheDir(); err != nil {
			return "", err
		}
	}
	dir := filepath.Join(cacheDir, "chdb")
	lib := filepath.Join(dir, "libchdb-"+version+".so")
	if _, err := os.Stat(lib); err == nil {
		return lib, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("embedded: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(dir, ".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(lib); err == nil {
		return lib, nil // another process finished while we waited
	}

	tgz := filepath.Join(dir, chdbTarball(version))
	if _, err := os.Stat(tgz); err != nil {
		done := reportProgress(progress, fmt.Sprintf("downloading ClickHouse (%s@%s, 178 MB) with npm pack into %s, once", ChDBPackage, version, dir))
		err := npmPack(ctx, dir, version)
		done(err)
		if err != nil {
			return "", err
		}
	}
	done := reportProgress(progress, "extracting libchdb.so (566 MB), once")
	err = extractLib(tgz, lib)
	done(err)
	if err != nil {
		return "", err
	}
	return lib, nil
}

// npmPack downloads the chdb tarball into dir, through a temporary
// directory and a rename, so the tarball in dir is complete or absent.
func npmPack(ctx context.Context, dir, version string) error {
	npm, err := exec.LookPath("npm")
	if err != nil {
		return fmt.Errorf("embedded: npm is needed to fetch %s@%s: %w (%w)", ChDBPackage, version, ErrNotInstalled, err)
	}
	tmp, err := os.MkdirTemp(dir, "npm-pack-")
	if err != nil {
		return fmt.Errorf("embedded: %w", err)
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, npm, "pack", ChDBPackage+"@"+version, "--pack-destination", tmp)
	cmd.Dir = tmp
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("embedded: npm pack %s@%s: %w\n%s", ChDBPackage, version, err, out)
	}
	if err := os.Rename(filepath.Join(tmp, chdbTarball(version)), filepath.Join(dir, chdbTarball(version))); err != nil {
		return fmt.Errorf("embedded: npm pack did not produce %s: %w\n%s", chdbTarball(version), err, out)
	}
	return nil
}

// extractLib copies package/libchdb.so out of the tarball to dst, through a
// temporary file and a rename, so dst is either complete or absent. It uses
// the system tar when present: Go's gzip in a race-instrumented test binary
// takes minutes for the 566 MB library, tar a few seconds.
func extractLib(tgz, dst string) error {
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".libchdb-*.tmp")
	if err != nil {
		return fmt.Errorf("embedded: %w", err)
	}
	err = extractWithTar(tgz, tmp)
	if err != nil {
		if _, serr := tmp.Seek(0, io.SeekStart); serr == nil {
			if terr := tmp.Truncate(0); terr == nil {
				err = extractWithGo(tgz, tmp)
			}
		}
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o755)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("embedded: extract libchdb.so from %s: %w", tgz, err)
	}
	return nil
}

func extractWithTar(tgz string, w io.Writer) error {
	tarTool, err := exec.LookPath("tar")
	if err != nil {
		return err
	}
	cmd := exec.Command(tarTool, "-xzOf", tgz, "package/libchdb.so")
	cmd.Stdout = w
	var stderr tailBuffer
	stderr.limit = 4 << 10
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("tar: %w: %s", err, stderr.String())
	}
	return nil
}

func extractWithGo(tgz string, w io.Writer) error {
	f, err := os.Open(tgz)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("no libchdb.so in the tarball: %w", ErrNotInstalled)
		}
		if err != nil {
			return err
		}
		if h.Name == "package/libchdb.so" {
			_, err = io.Copy(w, tr)
			return err
		}
	}
}

// EnsureLauncher returns the path of the chdblauncher binary in cacheDir (""
// means CacheDir()), building it with the go tool the first time. Builds are
// keyed by a hash of the launcher's source and the Go version.
func EnsureLauncher(ctx context.Context, cacheDir string) (string, error) {
	if Short() {
		return "", ErrShort
	}
	if cacheDir == "" {
		var err error
		if cacheDir, err = CacheDir(); err != nil {
			return "", err
		}
	}
	sum := sha256.Sum256(append([]byte(runtime.Version()+"\n"), launcherSource...))
	dir := filepath.Join(cacheDir, "chdblauncher", hex.EncodeToString(sum[:8]))
	return buildOnce(ctx, dir, "chdblauncher", func(goTool, out string) error {
		src, err := os.MkdirTemp(dir, "src-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(src)
		if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module chdblauncher\n\ngo 1.24\n"), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(src, "main.go"), launcherSource, 0o644); err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, goTool, "build", "-o", out, ".")
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "GOWORK=off", "GOFLAGS=-buildvcs=false", "GO111MODULE=on")
		if msg, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build ClickHouse launcher (needs a C compiler for cgo): %w\n%s", err, msg)
		}
		return nil
	})
}

// buildOnce returns dir/name, running build the first time to produce it.
// Builds are serialised across processes by a lock file in dir, and the
// binary appears under its name only once complete (build writes a temporary
// path that is then renamed), so a concurrent or interrupted build never
// leaves a half-written binary behind.
func buildOnce(ctx context.Context, dir, name string, build func(goTool, out string) error) (string, error) {
	bin := filepath.Join(dir, name)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("embedded: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(dir, ".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	goTool, err := goToolPath()
	if err != nil {
		return "", err
	}
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := build(goTool, tmp); err != nil {
		return "", fmt.Errorf("embedded: %w", err)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", fmt.Errorf("embedded: %w", err)
	}
	return bin, nil
}

// lockFile takes an exclusive flock on path, polling until ctx ends. The
// returned function releases it.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("embedded: lock: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("embedded: lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("embedded: wait for lock %s: %w", path, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// progressEvery is how often a long cache step reports that it is still
// running.
const progressEvery = 5 * time.Second

// reportProgress writes what to w, then a line every progressEvery while
// the step runs; the returned function ends the step with its outcome. A
// nil w reports nothing.
func reportProgress(w io.Writer, what string) func(error) {
	if w == nil {
		return func(error) {}
	}
	t0 := time.Now()
	fmt.Fprintf(w, "exactlyonce: %s...\n", what)
	stop := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				fmt.Fprintf(w, "exactlyonce: %s: %s so far\n", what, time.Since(t0).Round(time.Second))
			}
		}
	}()
	return func(err error) {
		close(stop)
		<-finished
		if err != nil {
			fmt.Fprintf(w, "exactlyonce: %s: failed after %s: %v\n", what, time.Since(t0).Round(time.Second), err)
			return
		}
		fmt.Fprintf(w, "exactlyonce: %s: done in %s\n", what, time.Since(t0).Round(100*time.Millisecond))
	}
}
