package demo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

// Binaries are the deployable programs the demo runs as child processes,
// exactly as users run them.
type Binaries struct {
	Gateway, Processor string
}

// modulePath is the module the binaries are built from.
const modulePath = "github.com/exactlyonce/exactlyonce"

// BuildBinaries builds examples/gateway and examples/processor into dir
// with the go tool, with the build tag demo: the binaries users deploy
// plus the harness's fault and naive flags (examples/gateway/demo.go,
// examples/processor/demo.go), which a plain build does not have. The
// current directory must be inside the module (go run and go test run
// there); the build cache makes a second build quick.
func BuildBinaries(ctx context.Context, dir string) (Binaries, error) {
	b := Binaries{Gateway: filepath.Join(dir, "gateway"), Processor: filepath.Join(dir, "processor")}
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "demo", "-o", dir+string(filepath.Separator),
		modulePath+"/examples/gateway", modulePath+"/examples/processor")
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return b, fmt.Errorf("build the gateway and the processor: %w\n%s", err, out)
	}
	return b, nil
}

// FreeAddr returns a loopback address with a port free at the time of the
// call, for a child process's -listen: embedded.FreePort's, the helper
// testkit.FreeAddr and the embedded servers use too.
func FreeAddr() (string, error) {
	port, err := embedded.FreePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

// Gateway is a running examples/gateway process.
type Gateway struct {
	addr string
	cmd  *exec.Cmd
	done chan error

	stopOnce sync.Once
	stopErr  error
}

// StartGateway runs the gateway binary with args (StartGateway adds
// -listen) and env, and waits until /readyz answers 200.
func StartGateway(ctx context.Context, bin string, args, env []string, stderr io.Writer) (*Gateway, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	g := &Gateway{addr: addr, done: make(chan error, 1)}
	started := make(chan error, 1)
	go func() {
		// Linux sends Pdeathsig when the thread that forked the child
		// exits, and the Go runtime retires a thread whose locked
		// goroutine exits (internal/embedded's do, after their child):
		// fork from a thread of our own and keep it for the child's life.
		// Never unlocked: the thread exits with this goroutine, after the
		// child was reaped.
		runtime.LockOSThread()
		cmd := exec.Command(bin, append(slices.Clone(args), "-listen="+addr)...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdout, cmd.Stderr = stderr, stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		g.cmd = cmd
		started <- nil
		g.done <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if status, _, err := g.get(ctx, "/readyz"); err == nil && status == http.StatusOK {
			return g, nil
		}
		select {
		case err := <-g.done:
			g.done <- err
			return nil, fmt.Errorf("gateway exited before it was ready: %v", err)
		case <-ctx.Done():
			_ = g.Stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = g.Stop()
			return nil, errors.New("gateway not ready after 30s")
		}
	}
}

// URL is where providers deliver: URL()+"/webhooks/github".
func (g *Gateway) URL() string { return "http://" + g.addr }

// PID is the gateway's process id.
func (g *Gateway) PID() int { return g.cmd.Process.Pid }

// Kill kills the gateway with SIGKILL and waits for its exit; a later Stop
// returns at once.
func (g *Gateway) Kill() {
	_ = g.cmd.Process.Kill()
	<-g.done
	g.done <- nil // for a later Stop
}

// Exited reports whether the gateway has exited, and how, without waiting.
func (g *Gateway) Exited() (bool, error) {
	select {
	case err := <-g.done:
		g.done <- err // for Stop
		return true, err
	default:
		return false, nil
	}
}

func (g *Gateway) get(ctx context.Context, path string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.URL()+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// Counter sums the samples of the Prometheus counter name (with its _total
// suffix) on /metrics whose labels include every label of match (for
// example `fault="ack_lost"`). A counter never incremented is absent: 0.
func (g *Gateway) Counter(ctx context.Context, name string, match ...string) (float64, error) {
	status, body, err := g.get(ctx, "/metrics")
	if err != nil {
		return 0, err
	}
	if status != http.StatusOK {
		return 0, fmt.Errorf("/metrics answered %d", status)
	}
	return sumCounter(body, name, match...), nil
}

// sumCounter reads the Prometheus text format: lines `name{labels} value`.
func sumCounter(text, name string, match ...string) float64 {
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (len(rest) > 0 && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		labels, value := "", rest
		if strings.HasPrefix(rest, "{") {
			end := strings.LastIndex(rest, "}")
			if end < 0 {
				continue
			}
			labels, value = rest[1:end], rest[end+1:]
		}
		all := true
		for _, m := range match {
			all = all && strings.Contains(","+labels+",", ","+m+",")
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil && all {
			sum += f
		}
	}
	return sum
}

// Stop stops the gateway with SIGTERM (it finishes the deliveries in
// flight) and waits, SIGKILL after 10 s. It is safe to call twice.
func (g *Gateway) Stop() error {
	g.stopOnce.Do(func() {
		_ = g.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case g.stopErr = <-g.done:
		case <-time.After(10 * time.Second):
			_ = g.cmd.Process.Kill()
			g.stopErr = fmt.Errorf("gateway did not stop within 10s of SIGTERM: %v", <-g.done)
		}
	})
	return g.stopErr
}
