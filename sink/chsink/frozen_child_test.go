package chsink_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/checkpoint/s3storage"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
)

// TestFrozenOwnerChild is the processor process of TestFrozenOwnerIsFenced
// (the test binary started again); without its environment it does nothing.
// It consumes the topic in the shared group, checkpoints on the shared S3
// bucket and sinks every record as one row. It prints "chain <partition>"
// when it builds a partition's chain and "exit <error>" when it stops.
func TestFrozenOwnerChild(t *testing.T) {
	raw := os.Getenv(envFrozenChild)
	if raw == "" {
		t.Skip("processor process of TestFrozenOwnerIsFenced")
	}
	var cfg frozenConfig
	require.NoError(t, json.Unmarshal([]byte(raw), &cfg))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	err := runFrozenProcessor(ctx, cfg)
	fmt.Printf("exit %v\n", err)
	if err != nil && ctx.Err() == nil {
		os.Exit(3)
	}
}

func runFrozenProcessor(ctx context.Context, cfg frozenConfig) error {
	storage, err := s3storage.New(s3storage.NewClient(s3storage.ClientConfig{
		Endpoint: cfg.S3.Endpoint, Region: cfg.S3.Region,
		AccessKeyID: cfg.S3.AccessKeyID, SecretAccessKey: cfg.S3.SecretAccessKey,
	}), cfg.S3.Bucket, s3storage.Options{Prefix: cfg.S3.Prefix})
	if err != nil {
		return err
	}
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelDebug}))
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: cfg.CheckpointInterval, Logger: log})
	if err != nil {
		return err
	}
	defer coord.Close()
	newChain := func(ctx context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
		fmt.Printf("chain %d\n", p.Partition)
		s, err := chsink.New(ctx, chsink.Table{Addr: cfg.CHAddr, Name: "events"},
			p, storage, frozenSchema,
			chsink.Options{Database: cfg.Database, MaxRows: 1000, MaxDelay: 50 * time.Millisecond, Logger: log,
				DistinctViewRows: true}) // per_partition's rows carry the partition
		if err != nil {
			return nil, err
		}
		// Armed by the test (a file in this process's own directory), the
		// process stops itself with SIGSTOP at the next batch about to be
		// journaled ("record": rows buffered, no intent yet, the moment
		// where only fencing or the end of its generation keeps a resumed
		// owner from inserting them) or inserted ("insert": the intent is
		// journaled and passed its ownership check, so the new owner
		// replays it with the same token and the late insert is dropped by
		// ClickHouse).
		freeze := func(at string) func() {
			return func() {
				// "record" freezes only a flush of the timer (Run), whose
				// context the generation's end does not cancel.
				if at == "record" && !inSinkRun() {
					return
				}
				if b, err := os.ReadFile(cfg.FreezeFile); err == nil && string(b) == at && os.Remove(cfg.FreezeFile) == nil {
					fmt.Printf("freezing before the %s of a batch of partition %d\n", at, p.Partition)
					_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
					fmt.Printf("resumed\n")
				}
			}
		}
		s.SetHooks(freeze("record"), freeze("insert"))
		return &kafkasource.Processor{
			Participants: map[string]checkpoint.Participant{"events": newDetachedSink(s)},
			Process: func(ctx context.Context, m kafka.Message) error {
				id, err := strconv.ParseUint(string(m.Value), 10, 64)
				if err != nil {
					return err
				}
				err = s.Add(ctx, sink.Position{Offset: m.Offset}, frozenRow{ID: id, Partition: int32(m.Partition), Offset: m.Offset})
				if err != nil {
					fmt.Printf("add: %v\n", err)
				}
				return err
			},
		}, nil
	}
	src, err := kafkasource.New(kafkasource.Group{Brokers: cfg.Brokers, ID: cfg.Group, Topics: []string{cfg.Topic}},
		coord, newChain, kafkasource.Options{
			SessionTimeout: frozenSession, RebalanceTimeout: frozenSession,
			HeartbeatInterval: 100 * time.Millisecond, MaxWait: 50 * time.Millisecond, Logger: log,
		})
	if err != nil {
		return err
	}
	return src.Run(ctx)
}

// inSinkRun reports whether the calling goroutine runs chsink's Sink.Run.
func inSinkRun() bool {
	for l := range strings.SplitSeq(string(debug.Stack()), "\n") {
		if strings.Contains(l, "chsink.(*Sink[") && strings.Contains(l, "]).Run(") {
			return true
		}
	}
	return false
}

// detachedSink is the participant the child hands its chain: it prints the
// errors of Snapshot (the chain does not report them once its generation
// ended), and it runs the sink's flush timer (Run) on a context of its own
// that outlives the consumer-group generation, until Close. kafkasource
// would cancel Run with the generation; a processor that does not, or whose
// cancellation comes late, relies on the journal's fence alone, and that is
// what the frozen owner meets when it resumes.
type detachedSink struct {
	s    *chsink.Sink[frozenRow]
	done chan struct{}
}

func newDetachedSink(s *chsink.Sink[frozenRow]) *detachedSink {
	d := &detachedSink{s: s, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		if err := s.Run(context.Background()); err != nil {
			fmt.Printf("run: %v\n", err)
		}
	}()
	return d
}

func (d *detachedSink) Snapshot(ctx context.Context, id checkpoint.ID) ([]byte, error) {
	b, err := d.s.Snapshot(ctx, id)
	if err != nil {
		fmt.Printf("snapshot: %v\n", err)
	}
	return b, err
}

func (d *detachedSink) Restore(ctx context.Context, state []byte) error {
	return d.s.Restore(ctx, state)
}

func (d *detachedSink) CheckpointCompleted(ctx context.Context, id checkpoint.ID) error {
	return d.s.CheckpointCompleted(ctx, id)
}

func (d *detachedSink) Close() error {
	err := d.s.Close()
	<-d.done
	return err
}

// frozenProc is a processor process and what it printed.
type frozenProc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  []string
	done chan struct{}
	err  error

	freezeFile string
}

func startFrozenProc(t *testing.T, name string, cfg frozenConfig) *frozenProc {
	home := t.TempDir() // a machine of its own: nothing local is shared
	cfg.FreezeFile = filepath.Join(home, "freeze")
	raw, err := json.Marshal(cfg)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^TestFrozenOwnerChild$", "-test.v")
	cmd.Env = append(os.Environ(), envFrozenChild+"="+string(raw), "TMPDIR="+home, "HOME="+home)
	cmd.Dir = home
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	p := &frozenProc{name: name, cmd: cmd, done: make(chan struct{}), freezeFile: cfg.FreezeFile}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.mu.Lock()
			p.out = append(p.out, sc.Text())
			p.mu.Unlock()
		}
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// lines returns what the process printed that starts with prefix.
func (p *frozenProc) lines(prefix string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, l := range p.out {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}
