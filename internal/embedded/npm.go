package embedded

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// OctokitDir is the cache subdirectory of GitHub's npm packages
// (@octokit/webhooks-examples and @octokit/webhooks-methods): the Makefile's
// `make deps` packs them there too.
const OctokitDir = "octokit"

// NpmPack returns the cached tarball of pkg@version in the cache
// subdirectory subdir, running `npm pack` once (under a file lock, through a
// temporary directory and a rename, so a crash never leaves half a tarball)
// if it is absent. The tarball's name is npm's: the package name without
// its "@" and with "/" as "-", then "-version.tgz". Without npm the error
// wraps ErrNotInstalled.
func NpmPack(ctx context.Context, subdir, pkg, version string) (string, error) {
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, subdir)
	tgz := filepath.Join(dir, strings.ReplaceAll(strings.TrimPrefix(pkg, "@"), "/", "-")+"-"+version+".tgz")
	if _, err := os.Stat(tgz); err == nil {
		return tgz, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	unlock, err := lockFile(ctx, filepath.Join(dir, ".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(tgz); err == nil {
		return tgz, nil // packed by another process while we waited
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", fmt.Errorf("embedded: npm is needed to fetch %s@%s (make deps installs it): %w: %w", pkg, version, ErrNotInstalled, err)
	}
	tmp, err := os.MkdirTemp(dir, "npm-pack-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, npm, "pack", "--silent", pkg+"@"+version, "--pack-destination", tmp)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("embedded: npm pack %s@%s: %w\n%s", pkg, version, err, out)
	}
	if err := os.Rename(filepath.Join(tmp, filepath.Base(tgz)), tgz); err != nil {
		return "", err
	}
	return tgz, nil
}

// ReadTarFile returns the content of the file name in the gzipped tarball
// tgz.
func ReadTarFile(tgz, name string) ([]byte, error) {
	f, err := os.Open(tgz)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tgz, err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: no %s", tgz, name)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", tgz, err)
		}
		if h.Name == name {
			return io.ReadAll(tr)
		}
	}
}
