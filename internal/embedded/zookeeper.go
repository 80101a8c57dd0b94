package embedded

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ZooKeeperVersion is the Apache ZooKeeper release the tests run: the
// coordination service of replicated ClickHouse tables (ClickHouse Keeper
// speaks its protocol). 3.9.6 is skipped: a file it needs is not served.
const ZooKeeperVersion = "3.9.3"

// zooKeeperJars are the coordinates fetched for ZooKeeperVersion. The
// server's pom marks metrics-core and snappy-java "provided" although
// ZooKeeperServerMain loads both (its metrics at start, snappy with the
// first snapshot), and brings slf4j's API without a backend.
var zooKeeperJars = []string{
	"org.apache.zookeeper:zookeeper:" + ZooKeeperVersion,
	"io.dropwizard.metrics:metrics-core:4.1.12.1",
	"org.xerial.snappy:snappy-java:1.1.10.5",
	slf4jSimple,
}

// Defaults for ZooKeeperOptions.
const (
	// DefaultZooKeeperStartTimeout bounds how long a start waits until the
	// server serves clients. A JVM starts it in a second or two on an idle
	// machine, in half a minute on a loaded one.
	DefaultZooKeeperStartTimeout = 2 * time.Minute
	// DefaultZooKeeperTick is tickTime: sessions may time out between 2
	// and 20 ticks, so a test's ClickHouse notices a dead server in
	// seconds, not the 40 s of ZooKeeper's default 2 s tick.
	DefaultZooKeeperTick = 500 * time.Millisecond
)

// DefaultZooKeeperJVMOptions start the server small and quickly, as
// DefaultApacheKafkaJVMOptions do for Kafka.
var DefaultZooKeeperJVMOptions = []string{
	"-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
	"-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
	"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
	"-Dzookeeper.admin.enableServer=false",
}

// EnsureZooKeeper returns the directory holding the jars of
// ZooKeeperVersion with its dependencies (about 13 MB), fetching them with
// Maven into $cacheDir/maven/zookeeper-version the first time (see
// EnsureMaven).
func EnsureZooKeeper(ctx context.Context, cacheDir string, progress io.Writer) (string, error) {
	if Short() {
		return "", ErrShort
	}
	return ensureMaven(ctx, cacheDir, "zookeeper-"+ZooKeeperVersion, progress, zooKeeperJars...)
}

// ZooKeeperOptions configures StartZooKeeper. The zero value is valid.
type ZooKeeperOptions struct {
	// Dir holds zoo.cfg and the data (snapshots and transaction log), and
	// survives Kill and Start. Default: a new temporary directory, removed
	// by Stop.
	Dir string
	// Port is the client port on 127.0.0.1. Default: a free port. It stays
	// the same across Kill and Start either way.
	Port int
	// Tick is tickTime. Default: DefaultZooKeeperTick.
	Tick time.Duration
	// JVMOptions replace DefaultZooKeeperJVMOptions.
	JVMOptions []string
	// CacheDir holds the fetched jars. Default: CacheDir().
	CacheDir string
	// StartTimeout bounds each wait until the server answers.
	// Default: DefaultZooKeeperStartTimeout.
	StartTimeout time.Duration
	// Progress receives progress lines while the jars are fetched the
	// first time. Default: none.
	Progress io.Writer
	// Logger receives start, kill and stop events. Default: discards.
	Logger *slog.Logger
}

// ZooKeeper is one standalone Apache ZooKeeper server on a loopback port.
// Kill stops it as a crash would (kill -9); Start brings it back on the
// same directory and port, with the znodes it had written (ZooKeeper syncs
// its transaction log before it answers a write). Its methods are safe for
// concurrent use.
type ZooKeeper struct {
	child     // PID, Kill
	opts      ZooKeeperOptions
	java      string
	classpath string
	owned     bool // Dir was made by StartZooKeeper: Stop removes it
}

// StartZooKeeper fetches the jars (the first time), writes zoo.cfg and
// starts the server, returning once it serves clients. With a
// port of its choosing it retries on a fresh one when the port was taken
// meanwhile. Errors for a missing java or mvn wrap ErrNotInstalled.
func StartZooKeeper(ctx context.Context, opts ZooKeeperOptions) (*ZooKeeper, error) {
	if Short() {
		return nil, ErrShort
	}
	if opts.Tick <= 0 {
		opts.Tick = DefaultZooKeeperTick
	}
	if opts.JVMOptions == nil {
		opts.JVMOptions = DefaultZooKeeperJVMOptions
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultZooKeeperStartTimeout
	}
	if opts.Logger == nil {
		opts.Logger = discardLogger()
	}
	java, err := JavaPath()
	if err != nil {
		return nil, fmt.Errorf("embedded: zookeeper: %w", err)
	}
	jars, err := EnsureZooKeeper(ctx, opts.CacheDir, opts.Progress)
	if err != nil {
		return nil, err
	}
	cp, err := MavenClasspath(jars)
	if err != nil {
		return nil, err
	}
	z := &ZooKeeper{
		child: child{name: "zookeeper", stopGrace: 10 * time.Second, log: opts.Logger},
		opts:  opts, java: java, classpath: cp,
	}
	if z.opts.Dir == "" {
		d, err := os.MkdirTemp("", "exactlyonce-zookeeper-")
		if err != nil {
			return nil, fmt.Errorf("embedded: zookeeper: %w", err)
		}
		z.opts.Dir, z.owned = d, true
	}
	fixedPort := opts.Port != 0
	for attempt := 0; ; attempt++ {
		if !fixedPort {
			if z.opts.Port, err = FreePort(); err != nil {
				break
			}
		}
		if err = z.writeConfig(); err != nil {
			break
		}
		if err = z.Start(ctx); err == nil {
			return z, nil
		}
		if fixedPort || attempt == 2 || ctx.Err() != nil || !strings.Contains(err.Error(), "Address already in use") {
			break
		}
	}
	z.removeDir()
	return nil, err
}

// Addr returns host:port of the client port; it stays the same across Kill
// and Start.
func (z *ZooKeeper) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(z.opts.Port)) }

// Dir returns the server's directory.
func (z *ZooKeeper) Dir() string { return z.opts.Dir }

// Start starts the server if it is not running, on the same directory and
// port, and waits until it answers. Starting a running server is a no-op.
func (z *ZooKeeper) Start(ctx context.Context) error {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.running() {
		return nil
	}
	t0 := time.Now()
	p, err := startJVM(z.java, z.opts.JVMOptions, z.classpath, "org.apache.zookeeper.server.ZooKeeperServerMain",
		[]string{filepath.Join(z.opts.Dir, "zoo.cfg")}, z.opts.Dir)
	if err != nil {
		return fmt.Errorf("embedded: start zookeeper: %w", err)
	}
	if err := p.waitReady(ctx, z.opts.StartTimeout, z.probe); err != nil {
		_ = p.kill()
		return fmt.Errorf("embedded: zookeeper %s on %s: %w", ZooKeeperVersion, z.Addr(), err)
	}
	z.proc = p
	z.log.Info("zookeeper started", "addr", z.Addr(), "pid", p.pid(), "took", time.Since(t0))
	return nil
}

// Stop shuts the server down (SIGTERM, SIGKILL after 10 s) and removes the
// directory if StartZooKeeper made it. Stop twice is a no-op.
func (z *ZooKeeper) Stop() error {
	err := z.child.Stop()
	z.removeDir()
	return err
}

func (z *ZooKeeper) removeDir() {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.owned {
		_ = os.RemoveAll(z.opts.Dir)
		z.owned = false
	}
}

// writeConfig writes zoo.cfg: a standalone server on 127.0.0.1 with the
// four-letter words ruok and srvr (the readiness probe) allowed, and no
// admin HTTP server.
func (z *ZooKeeper) writeConfig() error {
	data := filepath.Join(z.opts.Dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return fmt.Errorf("embedded: zookeeper: %w", err)
	}
	cfg := strings.Join([]string{
		"tickTime=" + strconv.FormatInt(z.opts.Tick.Milliseconds(), 10),
		"dataDir=" + data,
		"clientPort=" + strconv.Itoa(z.opts.Port),
		"clientPortAddress=127.0.0.1",
		"maxClientCnxns=0",
		"admin.enableServer=false",
		"4lw.commands.whitelist=ruok,srvr",
		"",
	}, "\n")
	return os.WriteFile(filepath.Join(z.opts.Dir, "zoo.cfg"), []byte(cfg), 0o644)
}

// probe sends the four-letter word "srvr" and wants "Mode: standalone" in
// the answer: "ruok" is answered "imok" even by a server whose start failed
// (a missing jar stops its request processor, not its socket).
func (z *ZooKeeper) probe(ctx context.Context) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", z.Addr())
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte("srvr")); err != nil {
		return err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return err
	}
	if !strings.Contains(string(b), "Mode: standalone") {
		return errors.New("zookeeper answered srvr with " + strconv.Quote(string(b)))
	}
	return nil
}
