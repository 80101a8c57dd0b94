package kafkasource_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/checkpoint/s3storage"
	"github.com/exactlyonce/exactlyonce/dedup"
	"github.com/exactlyonce/exactlyonce/testkit"
	"github.com/exactlyonce/exactlyonce/testkit/s3kit"
)

// Environment of BenchmarkRecovery.
const (
	envRecoveryKeys     = "RECOVERY_KEYS"        // dedup keys in the state, comma-separated; default 1000000,10000000
	envRecoveryStorages = "RECOVERY_STORAGES"    // fs, s3 or both (default), comma-separated
	envRecoveryRate     = "RECOVERY_RATE"        // records/s produced to the partition (all new keys); default 10000
	envRecoveryCkpts    = "RECOVERY_CHECKPOINTS" // checkpoints the processor takes before it is killed; default 5
	envRecoveryChild    = "KAFKASOURCE_RECOVERY_CHILD"

	recoveryPrefix = "RECOVERY "
	recoveryTTL    = 24 * time.Hour
)

// recoveryConfig is what a processor child of BenchmarkRecovery gets.
type recoveryConfig struct {
	Brokers     []string
	Topic       string
	Group       string
	Storage     string // "fs" or "s3"
	Dir         string // FSStorage's directory
	S3          s3kit.Config
	Incremental bool
}

func (c recoveryConfig) open() (checkpoint.Storage, error) {
	if c.Storage == "s3" {
		return s3storage.New(c.S3.Client(), c.S3.Bucket, s3storage.Options{Prefix: c.S3.Prefix})
	}
	return checkpoint.NewFSStorage(c.Dir)
}

// recoveryResult is what one kill and restart measured.
type recoveryResult struct {
	recovery   time.Duration // kill -9 to the first record processed by the restarted process
	start      time.Duration // kill to the restarted process's test function (exec, runtime start)
	join       time.Duration // then to the partition's assignment (a fresh consumer group's join)
	restore    time.Duration // then to the restored chain (the checkpoint read, dedup's Restore)
	first      time.Duration // then to the first record processed
	keys       int           // keys in the restored state
	ckptMean   time.Duration // mean duration of the killed process's checkpoints (exactlyonce.checkpoint.duration)
	ckptBytes  float64       // bytes it wrote to storage per checkpoint (checkpoint files, deltas, compactions)
	ckpts      int           // its checkpoints
	requests   [4]float64    // its storage requests per checkpoint: writes, reads, lists, deletes
	newKeys    float64       // keys added to the state per checkpoint (what changed)
	seed       time.Duration // the first checkpoint of the whole state, written before the processor starts
	seedBytes  int64
	replayRecs int64 // records between the restored checkpoint and the kill
}

// BenchmarkRecovery measures how long a processor takes to come back from
// kill -9 with a large dedup state, and what its checkpoints cost at that
// size. For each state size (RECOVERY_KEYS), storage (FSStorage with
// fsync, and s3storage on an embedded versitygw) and snapshot kind (dedup
// full snapshots, and Options.Incremental):
//
//  1. the benchmark writes a first checkpoint holding the given number of
//     keys (the "seed": a full state, or an incremental chain's base), at
//     offset 0 of a fresh one-partition topic;
//  2. a producer writes RECOVERY_RATE records a second, each a new key;
//  3. a processor, a child process (this test binary), runs kafkasource
//     with a dedup participant (ProcessBatch, ObserveBatch), checkpoints
//     every second, restores the seed and takes RECOVERY_CHECKPOINTS
//     checkpoints; it is then killed with SIGKILL at a random moment of
//     a checkpoint interval;
//  4. a new child starts at once, as a supervisor would restart it, joins
//     a fresh consumer group (a SIGKILLed member of the same group would
//     hold the partition until its session times out: not the storage's
//     cost), restores the newest checkpoint from the storage and processes
//     records; its first record processed ends the measurement, and its
//     restored state must hold at least the seed's keys.
//
// Metrics: recovery-ms (kill to first record after restart), its parts
// start-ms, join-ms, restore-ms and first-ms; ckpt-ms and ckpt-B (mean
// duration and bytes written per checkpoint of the killed process, the
// background compactions' bytes included); new-keys/ckpt and B/new-key
// (the keys its state gained per checkpoint, what changed, and the bytes
// written per such key); writes/ckpt, reads/ckpt,
// lists/ckpt and deletes/ckpt (its storage requests per checkpoint, what an
// object store bills); seed-ckpt-ms and seed-B (a checkpoint of the whole
// state). A short run:
//
//	RECOVERY_KEYS=100000 RECOVERY_STORAGES=fs go test -run '^$' -bench Recovery ./checkpoint/kafkasource
func BenchmarkRecovery(b *testing.B) {
	sizes := envList(b, envRecoveryKeys, "1000000,10000000")
	storages := envList(b, envRecoveryStorages, "fs,s3")
	rate := envIntOr(b, envRecoveryRate, 10_000)
	ckpts := envIntOr(b, envRecoveryCkpts, 5)
	brokers := testkit.Kafka(b)
	var s3srv *s3kit.Server
	for _, st := range storages {
		if st == "s3" && os.Getenv(s3kit.EnvEndpoint) == "" && s3srv == nil {
			s3srv = s3kit.Start(b)
		}
	}
	seq := 0
	for _, ks := range sizes {
		keys, err := strconv.Atoi(ks)
		require.NoError(b, err, "%s", envRecoveryKeys)
		for _, st := range storages {
			require.Contains(b, []string{"fs", "s3"}, st, "%s", envRecoveryStorages)
			for _, incremental := range []bool{false, true} {
				mode := "full"
				if incremental {
					mode = "incremental"
				}
				b.Run(fmt.Sprintf("keys=%d/storage=%s/%s", keys, st, mode), func(b *testing.B) {
					var sum recoveryResult
					n := 0
					for b.Loop() {
						seq++
						cfg := recoveryConfig{
							Brokers: brokers, Topic: fmt.Sprintf("recovery-%d-%d", seq, time.Now().UnixNano()),
							Storage: st, Dir: filepath.Join(b.TempDir(), "store"), Incremental: incremental,
						}
						if st == "s3" {
							if s3srv != nil {
								cfg.S3 = s3srv.NewBucket(b)
							} else {
								cfg.S3 = s3kit.Bucket(b)
							}
						}
						r := recoverOnce(b, cfg, keys, rate, ckpts)
						b.Logf("%s: recovery %v (start %v, join %v, restore %v, first record %v) of %d keys, %d records replayed; "+
							"%d checkpoints of %v and %.0f bytes each, %.0f new keys each (storage requests per checkpoint: %.1f writes, %.1f reads, %.1f lists, %.1f deletes); seed checkpoint %v, %d bytes",
							b.Name(), r.recovery, r.start, r.join, r.restore, r.first, r.keys, r.replayRecs,
							r.ckpts, r.ckptMean, r.ckptBytes, r.newKeys, r.requests[0], r.requests[1], r.requests[2], r.requests[3], r.seed, r.seedBytes)
						sum.recovery += r.recovery
						sum.start += r.start
						sum.join += r.join
						sum.restore += r.restore
						sum.first += r.first
						sum.ckptMean += r.ckptMean
						sum.ckptBytes += r.ckptBytes
						sum.seed += r.seed
						sum.seedBytes += r.seedBytes
						sum.newKeys += r.newKeys
						for i := range sum.requests {
							sum.requests[i] += r.requests[i]
						}
						n++
					}
					ms := func(d time.Duration) float64 { return float64(d) / float64(n) / 1e6 }
					b.ReportMetric(ms(sum.recovery), "recovery-ms")
					b.ReportMetric(ms(sum.start), "start-ms")
					b.ReportMetric(ms(sum.join), "join-ms")
					b.ReportMetric(ms(sum.restore), "restore-ms")
					b.ReportMetric(ms(sum.first), "first-ms")
					b.ReportMetric(ms(sum.ckptMean), "ckpt-ms")
					b.ReportMetric(sum.ckptBytes/float64(n), "ckpt-B")
					b.ReportMetric(sum.newKeys/float64(n), "new-keys/ckpt")
					if sum.newKeys > 0 {
						b.ReportMetric(sum.ckptBytes/sum.newKeys, "B/new-key")
					}
					b.ReportMetric(ms(sum.seed), "seed-ckpt-ms")
					b.ReportMetric(float64(sum.seedBytes)/float64(n), "seed-B")
					for i, unit := range []string{"writes/ckpt", "reads/ckpt", "lists/ckpt", "deletes/ckpt"} {
						b.ReportMetric(sum.requests[i]/float64(n), unit)
					}
				})
			}
		}
	}
}

// recoverOnce runs steps 1 to 4 of BenchmarkRecovery once.
func recoverOnce(b *testing.B, cfg recoveryConfig, keys, rate, ckpts int) recoveryResult {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	testkit.CreateTopic(b, cfg.Brokers, cfg.Topic, 1)
	var res recoveryResult
	res.seed, res.seedBytes = seedRecoveryState(b, cfg, keys)

	stopProducer := produceSteadily(b, cfg.Brokers, cfg.Topic, rate)
	defer stopProducer()

	cfg.Group = cfg.Topic + "-killed"
	victim := startRecoveryChild(b, cfg)
	defer victim.kill()
	var first, last ckptLine
	for n := 0; n < ckpts; {
		l := victim.next(b, ctx)
		if l.kind != "ckpt" {
			continue
		}
		if n == 0 {
			first = l.ckpt
		}
		last = l.ckpt
		n++
	}
	// A random moment of the interval after the last measured checkpoint.
	time.Sleep(time.Duration(rand.Int64N(int64(time.Second))))
	killedAt := time.Now()
	victim.kill()

	cfg.Group = cfg.Topic + "-restarted"
	restarted := startRecoveryChild(b, cfg)
	defer restarted.kill()
	var mainAt, assignedAt, restoredAt time.Time
	for {
		l := restarted.next(b, ctx)
		switch l.kind {
		case "main":
			mainAt = l.at
		case "assigned":
			assignedAt = l.at
		case "restored":
			restoredAt = l.at
			res.keys = l.keys
			res.replayRecs = l.offset // the restored NextOffset, for now
		}
		if l.kind == "first" {
			res.replayRecs = victim.lastOffset.Load() + 1 - res.replayRecs
			res.recovery = l.at.Sub(killedAt)
			res.start = mainAt.Sub(killedAt)
			res.join = assignedAt.Sub(mainAt)
			res.restore = restoredAt.Sub(assignedAt)
			res.first = l.at.Sub(restoredAt)
			break
		}
	}
	require.GreaterOrEqual(b, res.keys, keys, "the restarted processor restored fewer keys than the seed held")
	// The measured checkpoints are those after the first one seen: its
	// duration and the bytes before it belong to the restore's first round.
	if n := last.count - first.count; n > 0 {
		res.ckpts = n
		res.ckptMean = time.Duration((last.sum - first.sum) / float64(n) * float64(time.Second))
		res.ckptBytes = float64(last.written-first.written) / float64(n)
		res.newKeys = float64(last.keys-first.keys) / float64(n)
		res.requests = [4]float64{
			float64(last.writes-first.writes) / float64(n), float64(last.gets-first.gets) / float64(n),
			float64(last.lists-first.lists) / float64(n), float64(last.deletes-first.deletes) / float64(n),
		}
	}
	return res
}

// seedRecoveryState writes the first checkpoint: keys live keys at offset 0.
func seedRecoveryState(b *testing.B, cfg recoveryConfig, keys int) (time.Duration, int64) {
	ctx := context.Background()
	inner, err := cfg.open()
	require.NoError(b, err)
	storage := &countStorage{Storage: inner}
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	require.NoError(b, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1})
	require.NoError(b, err)
	d, err := dedup.New(recoveryTTL, dedup.Options{ExpectedKeys: keys, Incremental: cfg.Incremental})
	require.NoError(b, err)
	now := time.Now()
	sightings := make([]dedup.Sighting, 0, 1024)
	var first []bool
	buf := make([]byte, 0, 1024*24)
	for i := 0; i < keys; {
		sightings, buf = sightings[:0], buf[:0]
		for ; i < keys && len(sightings) < cap(sightings); i++ {
			start := len(buf)
			buf = fmt.Appendf(buf, "seed-%d", i)
			sightings = append(sightings, dedup.Sighting{Key: buf[start:len(buf):len(buf)], Time: now})
		}
		first, err = d.ObserveBatch(sightings, first[:0])
		require.NoError(b, err)
	}
	require.Equal(b, keys, d.Len())
	task, err := coord.Attach(ctx, checkpoint.TopicPartition{Topic: cfg.Topic, Partition: 0}, map[string]checkpoint.Participant{"dedup": d})
	require.NoError(b, err)
	start := time.Now()
	require.NoError(b, task.Checkpoint(ctx, nil, 0, checkpoint.Meta{}, nil))
	took := time.Since(start)
	task.Detach()
	require.NoError(b, d.Close())
	require.NoError(b, coord.Close())
	runtime.GC()
	debug.FreeOSMemory() // the children need the memory more than this process
	return took, storage.written.Load()
}

// produceSteadily writes rate records a second, every one a new key, until
// the returned function is called.
func produceSteadily(b *testing.B, brokers []string, topic string, rate int) func() {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0))
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		const tick = 20 * time.Millisecond
		t := time.NewTicker(tick)
		defer t.Stop()
		start, sent := time.Now(), 0
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				// time.Since, not the tick's time: its reading need not
				// be monotonic, and due must never fall below sent.
				due := int(float64(rate) * time.Since(start).Seconds())
				if due <= sent {
					continue
				}
				recs := make([]*kgo.Record, 0, due-sent)
				for ; sent < due; sent++ {
					recs = append(recs, &kgo.Record{Value: fmt.Appendf(nil, "%s-%d", topic, sent)})
				}
				if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil && ctx.Err() == nil {
					b.Errorf("produce: %v", err)
					return
				}
			}
		}
	})
	return func() {
		cancel()
		wg.Wait()
		cl.Close()
	}
}

// countStorage counts the bytes written to a Storage, streamed or not, and
// its requests by kind (an object store bills them).
type countStorage struct {
	checkpoint.Storage
	written                     atomic.Int64
	writes, gets, lists, delets atomic.Int64
}

func (s *countStorage) Put(ctx context.Context, name string, data []byte) error {
	s.written.Add(int64(len(data)))
	s.writes.Add(1)
	return s.Storage.Put(ctx, name, data)
}

func (s *countStorage) Create(ctx context.Context, name string, data []byte) (checkpoint.Version, error) {
	s.written.Add(int64(len(data)))
	s.writes.Add(1)
	return s.Storage.Create(ctx, name, data)
}

func (s *countStorage) Replace(ctx context.Context, name string, data []byte, v checkpoint.Version) (checkpoint.Version, error) {
	s.written.Add(int64(len(data)))
	s.writes.Add(1)
	return s.Storage.Replace(ctx, name, data, v)
}

func (s *countStorage) PutStream(ctx context.Context, name string, write func(io.Writer) error) error {
	s.writes.Add(1)
	return checkpoint.PutStream(ctx, s.Storage, name, func(w io.Writer) error {
		return write(countWriter{w: w, n: &s.written})
	})
}

func (s *countStorage) Get(ctx context.Context, name string) ([]byte, error) {
	s.gets.Add(1)
	return s.Storage.Get(ctx, name)
}

func (s *countStorage) GetVersion(ctx context.Context, name string) ([]byte, checkpoint.Version, error) {
	s.gets.Add(1)
	return s.Storage.GetVersion(ctx, name)
}

func (s *countStorage) List(ctx context.Context, prefix string) ([]string, error) {
	s.lists.Add(1)
	return s.Storage.List(ctx, prefix)
}

func (s *countStorage) Delete(ctx context.Context, name string) error {
	s.delets.Add(1)
	return s.Storage.Delete(ctx, name)
}

type countWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// recoveryChild is a processor child process and the lines it prints.
type recoveryChild struct {
	cmd        *exec.Cmd
	lines      chan recoveryLine
	lastOffset atomic.Int64 // the last offset it processed
	once       sync.Once
}

type ckptLine struct {
	count   int     // checkpoints completed
	sum     float64 // their durations, seconds
	written int64   // bytes written to storage so far
	// requests to the storage so far: writes, reads, lists, deletes
	writes, gets, lists, deletes int64
	keys                         int64 // in the deduplicator
}

type recoveryLine struct {
	kind   string // main, assigned, restored, first, ckpt
	at     time.Time
	keys   int
	offset int64
	ckpt   ckptLine
}

func startRecoveryChild(b *testing.B, cfg recoveryConfig) *recoveryChild {
	js, err := json.Marshal(cfg)
	require.NoError(b, err)
	cmd := exec.Command(os.Args[0], "-test.run=^TestRecoveryChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envRecoveryChild+"="+string(js))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(b, err)
	require.NoError(b, cmd.Start())
	c := &recoveryChild{cmd: cmd, lines: make(chan recoveryLine, 1024)}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			rest, ok := strings.CutPrefix(sc.Text(), recoveryPrefix)
			if !ok {
				continue
			}
			f := strings.Fields(rest)
			if len(f) < 2 {
				continue
			}
			ns, _ := strconv.ParseInt(f[1], 10, 64)
			l := recoveryLine{kind: f[0], at: time.Unix(0, ns)}
			switch {
			case l.kind == "restored" && len(f) == 4:
				l.keys, _ = strconv.Atoi(f[2])
				l.offset, _ = strconv.ParseInt(f[3], 10, 64)
			case l.kind == "first" && len(f) == 3:
				l.offset, _ = strconv.ParseInt(f[2], 10, 64)
			case l.kind == "offset" && len(f) == 3:
				o, _ := strconv.ParseInt(f[2], 10, 64)
				c.lastOffset.Store(o)
				continue
			case l.kind == "ckpt" && len(f) == 10:
				l.ckpt.count, _ = strconv.Atoi(f[2])
				l.ckpt.sum, _ = strconv.ParseFloat(f[3], 64)
				l.ckpt.written, _ = strconv.ParseInt(f[4], 10, 64)
				l.ckpt.writes, _ = strconv.ParseInt(f[5], 10, 64)
				l.ckpt.gets, _ = strconv.ParseInt(f[6], 10, 64)
				l.ckpt.lists, _ = strconv.ParseInt(f[7], 10, 64)
				l.ckpt.deletes, _ = strconv.ParseInt(f[8], 10, 64)
				l.ckpt.keys, _ = strconv.ParseInt(f[9], 10, 64)
			}
			c.lines <- l
		}
	}()
	return c
}

// next returns the child's next line; the child must not end first.
func (c *recoveryChild) next(b *testing.B, ctx context.Context) recoveryLine {
	select {
	case l, ok := <-c.lines:
		if !ok {
			b.Fatalf("processor child ended: %v", c.cmd.Wait())
		}
		return l
	case <-ctx.Done():
		b.Fatalf("processor child: %v", ctx.Err())
	}
	return recoveryLine{}
}

// kill sends SIGKILL and reaps the child, once.
func (c *recoveryChild) kill() {
	c.once.Do(func() {
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
		_ = c.cmd.Wait()
	})
}

// timedDedup is the deduplicator with its Restore reported (the embedded
// pointer keeps it an ObjectParticipant for incremental snapshots).
type timedDedup struct {
	*dedup.Deduplicator
	restored func()
}

func (t timedDedup) Restore(ctx context.Context, state []byte) error {
	err := t.Deduplicator.Restore(ctx, state)
	t.restored()
	return err
}

// ckptProbe prints the coordinator's checkpoint figures when a checkpoint
// completes: their count, the sum of their durations and the bytes written.
type ckptProbe struct {
	reader  *sdkmetric.ManualReader
	storage *countStorage
	keys    func() int // the deduplicator's keys (called on the chain goroutine, as the dedup is)
}

func (ckptProbe) Snapshot(context.Context, checkpoint.ID) ([]byte, error) { return []byte{}, nil }
func (ckptProbe) Restore(context.Context, []byte) error                   { return nil }
func (p ckptProbe) CheckpointCompleted(ctx context.Context, _ checkpoint.ID) error {
	var rm metricdata.ResourceMetrics
	if err := p.reader.Collect(ctx, &rm); err != nil {
		return err
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "exactlyonce.checkpoint.duration" {
				continue
			}
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
				for _, dp := range h.DataPoints {
					s := p.storage
					fmt.Printf("%sckpt %d %d %g %d %d %d %d %d %d\n", recoveryPrefix, time.Now().UnixNano(), dp.Count, dp.Sum,
						s.written.Load(), s.writes.Load(), s.gets.Load(), s.lists.Load(), s.delets.Load(), p.keys())
				}
			}
		}
	}
	return nil
}

// TestRecoveryChild is the processor that BenchmarkRecovery kills and
// restarts; it does nothing without its environment.
func TestRecoveryChild(t *testing.T) {
	js := os.Getenv(envRecoveryChild)
	if js == "" {
		t.Skip("helper process for BenchmarkRecovery")
	}
	fmt.Printf("%smain %d\n", recoveryPrefix, time.Now().UnixNano())
	var cfg recoveryConfig
	require.NoError(t, json.Unmarshal([]byte(js), &cfg))
	inner, err := cfg.open()
	require.NoError(t, err)
	storage := &countStorage{Storage: inner}
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	require.NoError(t, err)
	reader := sdkmetric.NewManualReader()
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{
		Interval: time.Second, MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	})
	require.NoError(t, err)
	newProc := func(_ context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
		fmt.Printf("%sassigned %d\n", recoveryPrefix, time.Now().UnixNano())
		d, err := dedup.New(recoveryTTL, dedup.Options{Incremental: cfg.Incremental})
		if err != nil {
			return nil, err
		}
		restoredAt := time.Time{}
		var (
			sightings []dedup.Sighting
			first     []bool
			started   bool
		)
		return &kafkasource.Processor{
			Participants: map[string]checkpoint.Participant{
				"dedup": timedDedup{Deduplicator: d, restored: func() { restoredAt = time.Now() }},
				"probe": ckptProbe{reader: reader, storage: storage, keys: d.Len},
			},
			ProcessBatch: func(_ context.Context, ms []kafka.Message) (int, error) {
				if len(ms) == 0 {
					return 0, nil
				}
				if !started {
					// The chain was restored before its first record: the
					// restore's end and its key count, then the record.
					if restoredAt.IsZero() {
						restoredAt = time.Now() // nothing to restore
					}
					fmt.Printf("%srestored %d %d %d\n", recoveryPrefix, restoredAt.UnixNano(), d.Len(), ms[0].Offset)
				}
				sightings = sightings[:0]
				for i := range ms {
					sightings = append(sightings, dedup.Sighting{Key: ms[i].Value, Time: ms[i].Time})
				}
				var err error
				if first, err = d.ObserveBatch(sightings, first[:0]); err != nil {
					return len(first), err
				}
				if !started {
					started = true
					fmt.Printf("%sfirst %d %d\n", recoveryPrefix, time.Now().UnixNano(), ms[0].Offset)
				}
				fmt.Printf("%soffset %d %d\n", recoveryPrefix, time.Now().UnixNano(), ms[len(ms)-1].Offset)
				return len(ms), nil
			},
			Close: d.Close,
		}, nil
	}
	src, err := kafkasource.New(testGroup(t, kafkasource.Group{Brokers: cfg.Brokers, ID: cfg.Group, Topics: []string{cfg.Topic}}),
		coord, newProc, fastGroup)
	require.NoError(t, err)
	require.NoError(t, src.Run(context.Background())) // until killed
}

// envList is the comma-separated list in the environment variable name, or
// def.
func envList(b *testing.B, name, def string) []string {
	v := os.Getenv(name)
	if v == "" {
		v = def
	}
	var out []string
	for f := range strings.SplitSeq(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	require.NotEmpty(b, out, "%s", name)
	return out
}

// envIntOr is the positive integer in the environment variable name, or def.
func envIntOr(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(b, err, "%s", name)
	require.Positive(b, n, "%s", name)
	return n
}
