package embedded

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Defaults for ClickHouseOptions.
const (
	// DefaultClickHouseStartTimeout bounds how long a start waits for the
	// server to answer, after the library and launcher are in the cache.
	DefaultClickHouseStartTimeout = 2 * time.Minute
)

// serveQuery makes clickhouse-local listen and then never return, without
// using CPU: one row per second, each sleeping one second, discarded.
const serveQuery = "SYSTEM START LISTEN TCP; " +
	"SELECT sleepEachRow(1) FROM system.numbers " +
	"SETTINGS max_block_size = 1, max_execution_time = 0 FORMAT Null"

// tempDirPrefix names data directories that StartClickHouse creates itself.
const tempDirPrefix = "exactlyonce-clickhouse-"

// ownerFile, in a directory StartClickHouse created, holds the pid of the
// program that owns it, so a later run can remove it once that pid is gone.
const ownerFile = ".exactlyonce-owner"

// ClickHouseOptions configures StartClickHouse. The zero value is valid.
type ClickHouseOptions struct {
	// Dir is the data directory (clickhouse-local --path). Default: a new
	// temporary directory, removed by Stop.
	Dir string
	// Port is the native TCP port on 127.0.0.1. Default: a free port.
	// Restart reuses the same port either way.
	Port int
	// CacheDir holds libchdb.so and the launcher. Default: CacheDir().
	CacheDir string
	// ChDBVersion is the version of ChDBPackage to start. Default:
	// $EXACTLYONCE_CLICKHOUSE, else ChDBVersion (see EnvClickHouse).
	ChDBVersion string
	// StartTimeout bounds each wait for readiness.
	// Default: DefaultClickHouseStartTimeout.
	StartTimeout time.Duration
	// Logger receives start, kill and restart events. Default: discards.
	Logger *slog.Logger
	// Progress, if set, receives a line when the library is downloaded or
	// extracted on first use, and one every few seconds while that runs.
	Progress io.Writer
	// ZooKeeper, host:port, puts a <zookeeper> section naming it into the
	// server's configuration, so ReplicatedMergeTree tables can be
	// created. Such a table stays read-only in clickhouse-local (see
	// docs/replicated.md: it never activates as a replica, having no
	// interserver port); it still shows its engine and settings as a
	// server's does. Default: none.
	ZooKeeper string
	// Macros are the configuration's <macros> ({shard}, {replica}, ...),
	// written with ZooKeeper. Default: none.
	Macros map[string]string
	// Users, if set, is the users configuration (a <clickhouse> document
	// with <profiles>, <users> and <quotas>, as a server's users.xml),
	// written into Dir and named by users_config: tests give the default
	// user a profile, or add users with settings and constraints of their
	// own. Default: clickhouse-local's one user "default", no settings.
	Users string
	// QueryLog turns on system.query_log (flushed every second, and by
	// SYSTEM FLUSH LOGS), which clickhouse-local keeps only when its
	// configuration names it. Default: off.
	QueryLog bool
}

// ClickHouse is a clickhouse-local process serving the native protocol on
// 127.0.0.1. Its methods are safe for concurrent use.
//
// clickhouse-local has no user management: connect as user "default" with
// no password. Its default database engine is Atomic, and MergeTree tables
// in databases created over TCP behave as on a server, including
// insert_deduplication_token with non_replicated_deduplication_window.
type ClickHouse struct {
	opts     ClickHouseOptions
	lib      string
	launcher string
	addr     string
	ownDir   bool

	// life serialises Kill, Restart and EnsureRunning, so that at most one
	// server runs on the directory even while a start waits for readiness
	// (a second clickhouse-local on the same directory and port aborts).
	// Stop takes only mu: it must not wait for a start, which notices it.
	life sync.Mutex

	mu      sync.Mutex
	proc    *process // nil while stopped
	version string
	stopped bool
}

// StartClickHouse fetches libchdb.so and builds the launcher if the cache
// lacks them, starts clickhouse-local and waits until ch-go can Ping it and
// read version(). Errors for a missing npm, go tool or C compiler wrap
// ErrNotInstalled.
func StartClickHouse(ctx context.Context, opts ClickHouseOptions) (*ClickHouse, error) {
	if Short() {
		return nil, ErrShort
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultClickHouseStartTimeout
	}
	if opts.Logger == nil {
		opts.Logger = discardLogger()
	}
	t0 := time.Now()
	lib, err := ensureChDB(ctx, opts.CacheDir, opts.ChDBVersion, opts.Progress)
	if err != nil {
		return nil, err
	}
	launcher, err := EnsureLauncher(ctx, opts.CacheDir)
	if err != nil {
		return nil, err
	}
	tCache := time.Since(t0)

	c := &ClickHouse{opts: opts, lib: lib, launcher: launcher}
	if c.opts.Dir == "" {
		sweepStaleDirs(tempDirPrefix)
		dir, err := os.MkdirTemp("", tempDirPrefix+"*")
		if err != nil {
			return nil, fmt.Errorf("embedded: clickhouse: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return nil, fmt.Errorf("embedded: clickhouse: %w", err)
		}
		c.opts.Dir, c.ownDir = dir, true
	} else if err := os.MkdirAll(c.opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("embedded: clickhouse: %w", err)
	}

	fixedPort := opts.Port != 0
	for attempt := 0; ; attempt++ {
		port := opts.Port
		if !fixedPort {
			if port, err = FreePort(); err != nil {
				c.removeDir()
				return nil, fmt.Errorf("embedded: clickhouse: %w", err)
			}
		}
		c.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		err = c.start(ctx)
		if err == nil {
			break
		}
		// A port taken between FreePort and bind is the only failure worth
		// another try.
		if fixedPort || attempt == 2 || ctx.Err() != nil || !strings.Contains(err.Error(), "Address already in use") {
			c.removeDir()
			return nil, err
		}
	}
	opts.Logger.Info("clickhouse started", "addr", c.addr, "dir", c.opts.Dir,
		"version", c.version, "cache", tCache, "took", time.Since(t0))
	return c, nil
}

// Addr returns host:port of the native protocol endpoint. It stays the same
// across Kill and Restart.
func (c *ClickHouse) Addr() string { return c.addr }

// Dir returns the data directory.
func (c *ClickHouse) Dir() string { return c.opts.Dir }

// Version returns the server's version() as read at the last start.
func (c *ClickHouse) Version() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.version
}

// PID returns the server's process id, or 0 while it is not running.
func (c *ClickHouse) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil || c.proc.exited() {
		return 0
	}
	return c.proc.pid()
}

// RSS returns the server's resident memory in bytes.
func (c *ClickHouse) RSS() (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return 0, errors.New("embedded: clickhouse is not running")
	}
	return c.proc.rssBytes()
}

// Kill kills the server with SIGKILL, as a crash would, and returns once the
// process is gone. Data written before stays in Dir. Killing a stopped
// server is a no-op. A Kill during a Restart or EnsureRunning waits for it
// and kills the server it started.
func (c *ClickHouse) Kill() error {
	c.life.Lock()
	defer c.life.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.killLocked()
}

func (c *ClickHouse) killLocked() error {
	if c.proc == nil {
		return nil
	}
	err := c.proc.kill()
	c.proc = nil
	if err != nil {
		return fmt.Errorf("embedded: kill clickhouse: %w", err)
	}
	c.opts.Logger.Info("clickhouse killed", "addr", c.addr)
	return nil
}

// Crashed returns an error describing how the server process ended, with
// the tail of its output, if it exited on its own (not through Kill or Stop);
// nil while it runs. A supervisor calls Restart after it.
func (c *ClickHouse) Crashed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil || !c.proc.exited() {
		return nil
	}
	return fmt.Errorf("embedded: clickhouse %w", c.proc.exitError())
}

// Restart starts the server again on the same directory and port, killing
// it first if it is running, and waits until it is ready. It fails after
// Stop.
func (c *ClickHouse) Restart(ctx context.Context) error {
	c.life.Lock()
	defer c.life.Unlock()
	c.mu.Lock()
	stopped := c.stopped
	if err := c.killLocked(); err != nil {
		c.mu.Unlock()
		return err
	}
	c.mu.Unlock()
	if stopped {
		return errors.New("embedded: restart of a stopped clickhouse")
	}
	return c.start(ctx)
}

// EnsureRunning starts the server on the same directory and port unless it
// is running, and waits until it is ready. It reports whether it started
// one. A supervisor calls it until it succeeds, after a crash or a failed
// Restart; when several do at once, one starts the server and the others
// find it running. It fails after Stop.
func (c *ClickHouse) EnsureRunning(ctx context.Context) (bool, error) {
	c.life.Lock()
	defer c.life.Unlock()
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return false, errors.New("embedded: start of a stopped clickhouse")
	}
	if c.proc != nil && !c.proc.exited() {
		c.mu.Unlock()
		return false, nil
	}
	c.proc = nil // exited on its own: nothing to kill
	c.mu.Unlock()
	return true, c.start(ctx)
}

// Stop kills the server and, if StartClickHouse created the data directory,
// removes it. clickhouse-local has no graceful shutdown while serving (a
// SIGTERM aborts it), so Stop is a kill. It is safe to call more than once.
func (c *ClickHouse) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.killLocked()
	if !c.stopped {
		c.stopped = true
		c.removeDir()
	}
	return err
}

func (c *ClickHouse) removeDir() {
	if c.ownDir {
		_ = os.RemoveAll(c.opts.Dir)
	}
}

// start launches the process and waits for readiness.
func (c *ClickHouse) start(ctx context.Context) error {
	_, port, _ := net.SplitHostPort(c.addr)
	args := []string{
		c.lib,
		"--path=" + c.opts.Dir,
		"--tcp_port=" + port,
		"--listen_host=127.0.0.1",
		"--multiquery",
		"--query=" + serveQuery,
		// clickhouse-local logs nothing unless asked: its aborts (see the
		// package doc) would leave no trace. Errors and worse go to
		// stderr, whose tail Crashed returns: the fault report of a
		// signal, and the error that led to it. (Warnings would push them
		// out: the background pool logs one every few milliseconds.)
		"--logger.console=1",
		"--log-level=error",
	}
	if c.opts.ZooKeeper != "" || c.opts.Users != "" || c.opts.QueryLog {
		cfg, err := c.writeConfig()
		if err != nil {
			return err
		}
		args = append(args, "--config-file="+cfg)
	}
	p, err := startProcess(c.launcher, args, os.Environ(), c.opts.Dir)
	if err != nil {
		return fmt.Errorf("embedded: start clickhouse launcher: %w", err)
	}
	var version string
	err = p.waitReady(ctx, c.opts.StartTimeout, func(ctx context.Context) error {
		v, err := chVersion(ctx, c.addr)
		version = v
		return err
	})
	if err != nil {
		_ = p.kill()
		return fmt.Errorf("embedded: clickhouse on %s (dir %s): %w", c.addr, c.opts.Dir, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		// Stop ran while this start waited for readiness: the server it
		// stopped must not come back behind its back.
		_ = p.kill()
		return errors.New("embedded: clickhouse stopped during restart")
	}
	if c.proc != nil {
		// A concurrent Restart won; one server per directory.
		_ = p.kill()
		return errors.New("embedded: clickhouse restarted concurrently")
	}
	c.proc, c.version = p, version
	return nil
}

// configFile is the name of the configuration StartClickHouse writes into
// Dir when ClickHouseOptions.ZooKeeper, Users or QueryLog is set; usersFile
// that of ClickHouseOptions.Users.
const (
	configFile = ".exactlyonce-config.xml"
	usersFile  = ".exactlyonce-users.xml"
)

// writeConfig writes the configuration that ClickHouseOptions asks for
// (<zookeeper> and <macros>, users_config, query_log) into Dir and returns
// its path.
func (c *ClickHouse) writeConfig() (string, error) {
	var b strings.Builder
	b.WriteString("<clickhouse>\n")
	if c.opts.Users != "" {
		users := filepath.Join(c.opts.Dir, usersFile)
		if err := os.WriteFile(users, []byte(c.opts.Users), 0o644); err != nil {
			return "", fmt.Errorf("embedded: clickhouse: %w", err)
		}
		fmt.Fprintf(&b, "  <users_config>%s</users_config>\n", xmlText(users))
	}
	if c.opts.QueryLog {
		b.WriteString("  <query_log><database>system</database><table>query_log</table>" +
			"<flush_interval_milliseconds>1000</flush_interval_milliseconds></query_log>\n")
	}
	if c.opts.ZooKeeper != "" {
		if err := c.writeZooKeeper(&b); err != nil {
			return "", err
		}
	}
	b.WriteString("</clickhouse>\n")
	path := filepath.Join(c.opts.Dir, configFile)
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return "", fmt.Errorf("embedded: clickhouse: %w", err)
	}
	return path, nil
}

// writeZooKeeper writes the <zookeeper> and <macros> sections into b.
func (c *ClickHouse) writeZooKeeper(b *strings.Builder) error {
	host, port, err := net.SplitHostPort(c.opts.ZooKeeper)
	if err != nil {
		return fmt.Errorf("embedded: clickhouse: zookeeper address %q: %w", c.opts.ZooKeeper, err)
	}
	b.WriteString("  <zookeeper>\n")
	fmt.Fprintf(b, "    <node><host>%s</host><port>%s</port></node>\n", xmlText(host), xmlText(port))
	b.WriteString("    <session_timeout_ms>10000</session_timeout_ms>\n  </zookeeper>\n")
	if len(c.opts.Macros) > 0 {
		b.WriteString("  <macros>\n")
		for _, k := range slices.Sorted(maps.Keys(c.opts.Macros)) {
			if !macroName.MatchString(k) {
				return fmt.Errorf("embedded: clickhouse: macro name %q: want letters, digits and _", k)
			}
			fmt.Fprintf(b, "    <%s>%s</%s>\n", k, xmlText(c.opts.Macros[k]), k)
		}
		b.WriteString("  </macros>\n")
	}
	return nil
}

// macroName is what a macro's name may be: it becomes an XML element.
var macroName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// xmlText escapes s for an XML text node.
func xmlText(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
