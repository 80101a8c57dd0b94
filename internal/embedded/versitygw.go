package embedded

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// The S3 server: versitygw (Apache-2.0, written in Go) with its posix
// backend, which keeps each bucket as a directory and each object as a file,
// and implements conditional writes (If-None-Match, If-Match) on PutObject
// and CompleteMultipartUpload under a per-object lock.
const (
	// VersityGWModule is the Go package built into the versitygw binary.
	VersityGWModule = "github.com/versity/versitygw/cmd/versitygw"
	// VersityGWVersion is the release built.
	VersityGWVersion = "v1.8.0"
	// DefaultS3StartTimeout bounds how long a start waits until the server
	// answers HTTP.
	DefaultS3StartTimeout = 30 * time.Second
	// S3AccessKey, S3SecretKey and S3Region are the root credentials and
	// region the server is started with.
	S3AccessKey = "exactlyonce"
	S3SecretKey = "exactlyonce-secret"
	S3Region    = "us-east-1"
)

// EnsureVersityGW returns the path of the versitygw binary in cacheDir (""
// means CacheDir()), building it with `go install` the first time (about 100
// seconds, an 84 MB binary), under a lock file so concurrent callers build it
// once.
func EnsureVersityGW(ctx context.Context, cacheDir string) (string, error) {
	if Short() {
		return "", ErrShort
	}
	if cacheDir == "" {
		var err error
		if cacheDir, err = CacheDir(); err != nil {
			return "", err
		}
	}
	dir := filepath.Join(cacheDir, "versitygw", VersityGWVersion)
	return buildOnce(ctx, dir, "versitygw", func(goTool, out string) error {
		gobin, err := os.MkdirTemp(dir, "gobin-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(gobin)
		cmd := exec.CommandContext(ctx, goTool, "install", VersityGWModule+"@"+VersityGWVersion)
		cmd.Dir = dir // outside any module: @version builds ignore the caller's go.mod
		cmd.Env = append(os.Environ(), "GOBIN="+gobin, "GOWORK=off", "GOFLAGS=-buildvcs=false", "CGO_ENABLED=0")
		if msg, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go install %s@%s (needs the Go module proxy): %w\n%s", VersityGWModule, VersityGWVersion, err, msg)
		}
		return os.Rename(filepath.Join(gobin, "versitygw"), out)
	})
}

// S3Options configures StartS3. The zero value is valid.
type S3Options struct {
	// Binary is the versitygw program. Default: EnsureVersityGW's.
	Binary string
	// Dir is the posix backend's root: each bucket is a directory in it.
	// Default: a new temporary directory, removed by Stop.
	Dir string
	// StartTimeout bounds how long a start waits until the server answers.
	// Default: DefaultS3StartTimeout.
	StartTimeout time.Duration
	// Logger receives start and stop events. Default: discards.
	Logger *slog.Logger
}

// S3 is a versitygw child process serving the S3 API on a loopback port,
// with the root credentials S3AccessKey and S3SecretKey, over a posix
// directory that survives Kill and Start. Its methods are safe for
// concurrent use.
type S3 struct {
	child // PID, Kill
	opts  S3Options
	addr  string
	owned bool // Dir was made by StartS3: Stop removes it
}

// StartS3 starts versitygw on 127.0.0.1 and waits until it answers HTTP.
func StartS3(ctx context.Context, opts S3Options) (*S3, error) {
	if Short() {
		return nil, ErrShort
	}
	if opts.Binary == "" {
		bin, err := EnsureVersityGW(ctx, "")
		if err != nil {
			return nil, err
		}
		opts.Binary = bin
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultS3StartTimeout
	}
	if opts.Logger == nil {
		opts.Logger = discardLogger()
	}
	s := &S3{child: child{name: "versitygw", stopGrace: 5 * time.Second, log: opts.Logger}, opts: opts}
	if s.opts.Dir == "" {
		d, err := os.MkdirTemp("", "exactlyonce-s3-")
		if err != nil {
			return nil, fmt.Errorf("embedded: s3: %w", err)
		}
		s.opts.Dir, s.owned = d, true
	}
	var lastErr error
	for range 3 {
		p, err := FreePort()
		if err != nil {
			return nil, fmt.Errorf("embedded: s3: %w", err)
		}
		s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		if lastErr = s.Start(ctx); lastErr == nil || ctx.Err() != nil {
			break
		}
	}
	if lastErr != nil {
		if s.owned {
			_ = os.RemoveAll(s.opts.Dir)
		}
		return nil, lastErr
	}
	return s, nil
}

// Endpoint returns the server's URL, http://127.0.0.1:port. It stays the
// same across Kill and Start.
func (s *S3) Endpoint() string { return "http://" + s.addr }

// Dir returns the posix backend's root directory.
func (s *S3) Dir() string { return s.opts.Dir }

// Start starts a stopped or killed server again on the same port and
// directory: every object written before is there. Starting a running
// server is a no-op.
func (s *S3) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running() {
		return nil
	}
	args := []string{
		"--port", s.addr, "--access", S3AccessKey, "--secret", S3SecretKey,
		"--region", S3Region, "--quiet",
		"posix", s.opts.Dir,
	}
	t0 := time.Now()
	p, err := startProcess(s.opts.Binary, args, os.Environ(), "")
	if err != nil {
		return fmt.Errorf("embedded: start versitygw: %w", err)
	}
	if err := p.waitReady(ctx, s.opts.StartTimeout, s.probe); err != nil {
		_ = p.kill()
		return fmt.Errorf("embedded: versitygw on %s: %w", s.addr, err)
	}
	s.proc = p
	s.opts.Logger.Info("versitygw started", "addr", s.addr, "dir", s.opts.Dir, "pid", p.pid(), "took", time.Since(t0))
	return nil
}

// probe succeeds once the server answers an HTTP request (an unsigned
// request gets 403, which is an answer).
func (s *S3) probe(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Endpoint()+"/", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// Stop shuts the server down (SIGTERM, then SIGKILL after a grace period)
// and removes the directory if StartS3 made it. Stop twice is a no-op.
func (s *S3) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if s.proc != nil {
		err = s.proc.terminate(s.stopGrace)
		s.proc = nil
	}
	if s.owned {
		if rerr := os.RemoveAll(s.opts.Dir); err == nil {
			err = rerr
		}
		s.owned = false
	}
	if err != nil {
		return fmt.Errorf("embedded: stop versitygw: %w", err)
	}
	return nil
}
