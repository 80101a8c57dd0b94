package embedded

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Defaults for RedisOptions.
const (
	// DefaultRedisBinary is the redis-server looked up when
	// RedisOptions.Binary is empty and none is on PATH: Debian's package.
	DefaultRedisBinary = "/usr/bin/redis-server"
	// DefaultRedisStartTimeout bounds how long Start waits for PING.
	DefaultRedisStartTimeout = 15 * time.Second
)

// RedisOptions configures StartRedis. The zero value is valid.
type RedisOptions struct {
	// Binary is the redis-server program. Default: redis-server on PATH,
	// else DefaultRedisBinary.
	Binary string
	// Port to listen on, on 127.0.0.1. Default: a free port. Start after
	// Stop reuses the same port either way.
	Port int
	// StartTimeout bounds how long a start waits until the server answers
	// PING. Default: DefaultRedisStartTimeout.
	StartTimeout time.Duration
	// Logger receives start and stop events. Default: discards.
	Logger *slog.Logger
}

// Redis is a redis-server child process without persistence (`--save ""
// --appendonly no`): a Stop or Kill loses every key, which is what tests of
// an idempotency store that forgets want. Its methods are safe for
// concurrent use.
type Redis struct {
	child // PID, Kill, Stop
	opts  RedisOptions
	addr  string
}

// StartRedis starts redis-server on 127.0.0.1 and waits until it answers
// PING. It returns an error wrapping ErrNotInstalled when no redis-server is
// found.
func StartRedis(ctx context.Context, opts RedisOptions) (*Redis, error) {
	if Short() {
		return nil, ErrShort
	}
	if opts.Binary == "" {
		opts.Binary = DefaultRedisBinary
		if p, err := exec.LookPath("redis-server"); err == nil {
			opts.Binary = p
		}
	}
	if _, err := os.Stat(opts.Binary); err != nil {
		return nil, fmt.Errorf("embedded: redis-server %s: %w (%w)", opts.Binary, ErrNotInstalled, err)
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultRedisStartTimeout
	}
	if opts.Logger == nil {
		opts.Logger = discardLogger()
	}
	r := &Redis{child: child{name: "redis", stopGrace: 5 * time.Second, log: opts.Logger}, opts: opts}
	fixedPort := opts.Port != 0
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port := opts.Port
		if !fixedPort {
			p, err := FreePort()
			if err != nil {
				return nil, fmt.Errorf("embedded: redis: %w", err)
			}
			port = p
		}
		r.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		lastErr = r.Start(ctx)
		if lastErr == nil || fixedPort || ctx.Err() != nil {
			break
		}
	}
	if lastErr != nil {
		return nil, lastErr
	}
	return r, nil
}

// Addr returns host:port of the server. It stays the same across Stop and
// Start.
func (r *Redis) Addr() string { return r.addr }

// Start starts a stopped server again on the same port, empty. Starting a
// running server is a no-op.
func (r *Redis) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running() {
		return nil
	}
	_, port, _ := net.SplitHostPort(r.addr)
	args := []string{
		"--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no",
		"--daemonize", "no", "--protected-mode", "no",
		"--dir", os.TempDir(), "--loglevel", "warning",
	}
	t0 := time.Now()
	p, err := startProcess(r.opts.Binary, args, os.Environ(), "")
	if err != nil {
		return fmt.Errorf("embedded: start redis-server: %w", err)
	}
	if err := p.waitReady(ctx, r.opts.StartTimeout, func(ctx context.Context) error {
		return redisPing(ctx, r.addr)
	}); err != nil {
		_ = p.kill()
		return fmt.Errorf("embedded: redis-server on %s: %w", r.addr, err)
	}
	r.proc = p
	r.opts.Logger.Info("redis started", "addr", r.addr, "pid", p.pid(), "took", time.Since(t0))
	return nil
}

// redisPing sends PING in the inline protocol and expects +PONG.
func redisPing(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return errors.New("unexpected PING reply: " + strings.TrimSpace(line))
	}
	return nil
}
