package embedded

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactlyonce/exactlyonce/internal/embedded/kafkafault"
)

// kfakeServerSource is the source kfakeserver is built from: its own and the
// fault injector's, so a change to either rebuilds it.
//
//go:embed kfakeserver/main.go kafkafault/*.go
var kfakeServerSource embed.FS

// modulePath is this module's path; StartKafkaProcess builds kfakeserver
// from it.
const modulePath = "github.com/exactlyonce/exactlyonce"

// DefaultKafkaStartTimeout bounds how long a Kafka process start waits for
// the broker to answer.
const DefaultKafkaStartTimeout = 30 * time.Second

// KafkaProcessOptions configures StartKafkaProcess. The zero value is valid.
type KafkaProcessOptions struct {
	// DataDir makes the broker persist logs, offsets and groups there, so
	// Restart brings them back. Default: memory only; Restart then starts
	// an empty broker.
	DataDir string
	// SyncWrites fsyncs every produced batch. Without it a kill -9 keeps
	// what the kernel already has (everything written), but a machine crash
	// may lose the latest batches. Default: false.
	SyncWrites bool
	// MinSessionTimeout is the smallest consumer-group session timeout the
	// broker accepts, so a test can expire a frozen member quickly.
	// Default: kfake's, 6s.
	MinSessionTimeout time.Duration
	// ExpireMembers makes the broker expire consumer-group members that
	// sent nothing for their session timeout, as Kafka does. kfake alone
	// keeps a member that died while its JoinGroup waited for the
	// rebalance, with its partitions, for good (kafkafault.ExpireMembers
	// says why). Default: false, kfake as it is.
	ExpireMembers bool
	// Port on 127.0.0.1. Default: a free port. Restart reuses it.
	Port int
	// CacheDir holds the built kfakeserver. Default: CacheDir().
	CacheDir string
	// StartTimeout bounds each wait for readiness.
	// Default: DefaultKafkaStartTimeout.
	StartTimeout time.Duration
	// Logger receives start, kill and restart events. Default: discards.
	Logger *slog.Logger
}

// KafkaProcess is a one-broker kfake cluster in a child process, for tests
// that kill the broker or that must keep it running while they kill its
// clients. Its methods are safe for concurrent use.
type KafkaProcess struct {
	child // PID, Kill, Stop
	opts  KafkaProcessOptions
	bin   string
	addr  string

	control kafkafault.Client // the running broker's fault endpoint; guarded by mu
}

// StartKafkaProcess builds kfakeserver (the first time, with the go tool,
// from this module's source: the current directory must be inside the
// module) and starts it.
func StartKafkaProcess(ctx context.Context, opts KafkaProcessOptions) (*KafkaProcess, error) {
	if Short() {
		return nil, ErrShort
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultKafkaStartTimeout
	}
	if opts.Logger == nil {
		opts.Logger = discardLogger()
	}
	bin, err := ensureKfakeServer(ctx, opts.CacheDir)
	if err != nil {
		return nil, err
	}
	k := &KafkaProcess{child: child{name: "kafka process", stopGrace: 10 * time.Second, log: opts.Logger}, opts: opts, bin: bin}
	fixedPort := opts.Port != 0
	for attempt := 0; ; attempt++ {
		port := opts.Port
		if !fixedPort {
			if port, err = FreePort(); err != nil {
				return nil, fmt.Errorf("embedded: kafka process: %w", err)
			}
		}
		k.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		err = k.Start(ctx)
		if err == nil || fixedPort || attempt == 2 || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	return k, nil
}

// Brokers returns the bootstrap address; it stays the same across Kill and
// Start.
func (k *KafkaProcess) Brokers() []string { return []string{k.addr} }

// Start starts a stopped or killed broker on the same port and data
// directory and waits until it answers. Starting a running broker is a
// no-op.
func (k *KafkaProcess) Start(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.running() {
		return nil
	}
	_, port, _ := net.SplitHostPort(k.addr)
	args := []string{"-port", port}
	if k.opts.DataDir != "" {
		args = append(args, "-data-dir", k.opts.DataDir)
	}
	if k.opts.SyncWrites {
		args = append(args, "-sync")
	}
	if k.opts.MinSessionTimeout > 0 {
		args = append(args, "-min-session-timeout", k.opts.MinSessionTimeout.String())
	}
	if k.opts.ExpireMembers {
		args = append(args, "-expire-members")
	}
	p, err := startProcess(k.bin, args, os.Environ(), "")
	if err != nil {
		return fmt.Errorf("embedded: start kfakeserver: %w", err)
	}
	err = p.waitReady(ctx, k.opts.StartTimeout, func(ctx context.Context) error {
		if !strings.Contains(p.out.String(), "ready") {
			return errors.New("not listening yet")
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(k.addr))
		if err != nil {
			return err
		}
		defer cl.Close()
		return cl.Ping(ctx)
	})
	if err != nil {
		_ = p.kill()
		return fmt.Errorf("embedded: kfakeserver on %s: %w", k.addr, err)
	}
	k.proc = p
	k.control = kafkafault.Client{URL: controlURL(p.out.String())}
	k.opts.Logger.Info("kafka process started", "addr", k.addr, "pid", p.pid(), "control", k.control.URL)
	return nil
}

// controlURL finds the fault endpoint kfakeserver printed.
func controlURL(out string) string {
	for line := range strings.Lines(out) {
		if u, ok := strings.CutPrefix(strings.TrimSpace(line), "control "); ok {
			return u
		}
	}
	return ""
}

// faults returns the running broker's fault endpoint.
func (k *KafkaProcess) faults() (kafkafault.Client, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.running() {
		return kafkafault.Client{}, ErrStopped
	}
	return k.control, nil
}

// InjectFault arms a wire-level fault in the running broker (see package
// kafkafault). Faults do not survive Kill or Stop. It returns ErrStopped
// while the broker is down, and an error wrapping kafkafault.ErrRejected for
// an invalid fault.
func (k *KafkaProcess) InjectFault(ctx context.Context, f kafkafault.Fault) error {
	c, err := k.faults()
	if err != nil {
		return fmt.Errorf("embedded: inject kafka fault: %w", err)
	}
	return c.Inject(ctx, f)
}

// ClearFaults disarms every fault of the running broker.
func (k *KafkaProcess) ClearFaults(ctx context.Context) error {
	c, err := k.faults()
	if err != nil {
		return fmt.Errorf("embedded: clear kafka faults: %w", err)
	}
	return c.Clear(ctx)
}

// FaultStats returns what the running broker's faults have hit since it
// started.
func (k *KafkaProcess) FaultStats(ctx context.Context) (kafkafault.Stats, error) {
	c, err := k.faults()
	if err != nil {
		return nil, fmt.Errorf("embedded: kafka fault stats: %w", err)
	}
	return c.Stats(ctx)
}

// ensureKfakeServer builds kfakeserver into the cache, keyed by its source,
// the module's go.sum and the Go version.
func ensureKfakeServer(ctx context.Context, cacheDir string) (string, error) {
	if cacheDir == "" {
		var err error
		if cacheDir, err = CacheDir(); err != nil {
			return "", err
		}
	}
	goTool, err := goToolPath()
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, goTool, "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("embedded: building kfakeserver needs the working directory inside module %s (go env GOMOD: %q, %v)", modulePath, gomod, err)
	}
	root := filepath.Dir(gomod)
	gosum, _ := os.ReadFile(filepath.Join(root, "go.sum"))

	h := sha256.New()
	h.Write([]byte(runtime.Version() + "\n"))
	err = fs.WalkDir(kfakeServerSource, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := kfakeServerSource.ReadFile(path)
		h.Write([]byte(path + "\n"))
		h.Write(b)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("embedded: kfakeserver source: %w", err)
	}
	h.Write(gosum)
	dir := filepath.Join(cacheDir, "kfakeserver", hex.EncodeToString(h.Sum(nil)[:8]))
	return buildOnce(ctx, dir, "kfakeserver", func(goTool, out string) error {
		cmd := exec.CommandContext(ctx, goTool, "build", "-o", out, modulePath+"/internal/embedded/kfakeserver")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false")
		if msg, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build kfakeserver: %w\n%s", err, msg)
		}
		return nil
	})
}

// goToolPath finds the go command: on PATH (go test puts its own GOROOT/bin
// first there), else in $GOROOT/bin. Not runtime.GOROOT: the root this
// binary was built with means nothing once it runs on another machine.
func goToolPath() (string, error) {
	p, err := exec.LookPath("go")
	if err == nil {
		return p, nil
	}
	if root := os.Getenv("GOROOT"); root != "" {
		p = filepath.Join(root, "bin", "go")
		if _, err = os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("embedded: the go tool is needed: %w (%w)", ErrNotInstalled, err)
}
