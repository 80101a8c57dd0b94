package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

// GitHub's maintained webhook examples: the payloads the demo's simulated
// GitHub sends are built from them, and the normalizer is tested on every
// one. `make deps` fetches them with npm pack into the cache (the same file
// internal/testenv reads for the library's tests); without it this does so
// once, under the same lock. Never committed.
const (
	octokitPackage = "@octokit/webhooks-examples"
	octokitVersion = "7.6.1"
	octokitTarball = "octokit-webhooks-examples-" + octokitVersion + ".tgz"
)

// githubExample is one example payload of one event type.
type githubExample struct {
	Event  string
	Action string
	Body   json.RawMessage
}

// loadGitHubExamples returns every example payload of api.github.com, by
// event type, fetching the package into the cache first if needed.
func loadGitHubExamples(ctx context.Context) (map[string][]githubExample, error) {
	tgz, err := ensureOctokit(ctx)
	if err != nil {
		return nil, err
	}
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
			return nil, fmt.Errorf("%s: no package/api.github.com/index.json", tgz)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", tgz, err)
		}
		if h.Name != "package/api.github.com/index.json" {
			continue
		}
		var index []struct {
			Name     string            `json:"name"`
			Examples []json.RawMessage `json:"examples"`
		}
		if err := json.NewDecoder(tr).Decode(&index); err != nil {
			return nil, fmt.Errorf("%s: index.json: %w", tgz, err)
		}
		out := map[string][]githubExample{}
		for _, e := range index {
			for _, raw := range e.Examples {
				var a struct {
					Action string `json:"action"`
				}
				_ = json.Unmarshal(raw, &a)
				out[e.Name] = append(out[e.Name], githubExample{Event: e.Name, Action: a.Action, Body: raw})
			}
		}
		return out, nil
	}
}

// ensureOctokit returns the cached tarball, running npm pack once (under a
// file lock, through a temporary directory and a rename) if it is absent.
func ensureOctokit(ctx context.Context) (string, error) {
	cache, err := embedded.CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "octokit")
	tgz := filepath.Join(dir, octokitTarball)
	if _, err := os.Stat(tgz); err == nil {
		return tgz, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	for {
		err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if _, err := os.Stat(tgz); err == nil {
		return tgz, nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", fmt.Errorf("npm is needed to fetch %s@%s (make deps installs it): %w: %w", octokitPackage, octokitVersion, embedded.ErrNotInstalled, err)
	}
	tmp, err := os.MkdirTemp(dir, "npm-pack-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, npm, "pack", octokitPackage+"@"+octokitVersion, "--pack-destination", tmp)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm pack %s@%s: %w\n%s", octokitPackage, octokitVersion, err, out)
	}
	if err := os.Rename(filepath.Join(tmp, octokitTarball), tgz); err != nil {
		return "", err
	}
	return tgz, nil
}
