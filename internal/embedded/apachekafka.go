package embedded

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The Apache Kafka releases the tests run, one per line users run: the
// newest 4.x (transactions v2, KIP-890; the old protocol versions removed,
// KIP-896) and the newest 3.9.x (the last 3.x line, transactions v1).
const (
	ApacheKafka4  = "4.4.0"
	ApacheKafka39 = "3.9.2"
)

// Defaults for ApacheKafkaOptions.
const (
	// DefaultApacheKafkaStartTimeout bounds how long a start waits until
	// every node answers. A JVM broker starts in a few seconds on an idle
	// machine and in half a minute on a loaded one.
	DefaultApacheKafkaStartTimeout = 3 * time.Minute
)

// DefaultApacheKafkaJVMOptions start a broker quickly and small: a 512 MB
// heap, the serial collector (fewer threads) and only the client compiler
// (C1), which starts in about half the time of the default tiered
// compilation at some cost in steady throughput. Benchmarks that measure the
// broker should pass their own.
var DefaultApacheKafkaJVMOptions = []string{
	"-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
	"-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
	"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
	"-Dlog4j2.level=warn",
}

// kafkaTempDirPrefix names the directories StartApacheKafka creates itself.
const kafkaTempDirPrefix = "exactlyonce-kafka-"

// slf4jSimple is the logging backend fetched beside the broker: Kafka's jars
// bring slf4j's API only, and without a backend the broker's warnings and
// errors (which a failed start wants to show) go nowhere.
const slf4jSimple = "org.slf4j:slf4j-simple:1.7.36"

// EnsureApacheKafka returns the directory holding the jars of Apache Kafka
// version (the broker, org.apache.kafka:kafka_2.13, with its dependencies,
// about 45 MB), fetching them with Maven into $cacheDir/maven/kafka-version
// the first time (see EnsureMaven).
func EnsureApacheKafka(ctx context.Context, cacheDir, version string, progress io.Writer) (string, error) {
	return ensureMaven(ctx, cacheDir, "kafka-"+version, progress,
		"org.apache.kafka:kafka_2.13:"+version, slf4jSimple)
}

// ApacheKafkaOptions configures StartApacheKafka. The zero value is valid:
// one node of ApacheKafka4 with test timings.
type ApacheKafkaOptions struct {
	// Version is the Apache Kafka release. Default: ApacheKafka4.
	Version string
	// Nodes is the number of brokers, each a combined KRaft broker and
	// controller unless Controllers is set. With 3 or more, topics created with replication factor
	// -1 get 3 replicas and min.insync.replicas is 2, as in a production
	// cluster; with fewer, every replication factor is the node count.
	// Default: 1.
	Nodes int
	// Controllers, when positive, is a number of dedicated KRaft
	// controller processes (process.roles=controller) beside Nodes
	// broker-only processes, as production clusters run them: killing
	// brokers then never takes the controller quorum with them, so a test
	// can take two of three brokers down (the ISR below
	// min.insync.replicas) and the cluster still answers. Controllers get
	// the node ids after the brokers' (Nodes+1, ...) and are not among
	// Brokers. Default: 0, every node is broker and controller.
	Controllers int
	// Dir holds each node's configuration and log directory (node-1, ...)
	// and survives Kill and Start. Default: a new temporary directory,
	// removed by Stop and Close.
	Dir string
	// KafkaDefaults keeps Kafka's own group and transaction timing instead
	// of the lowered test timing: group.initial.rebalance.delay.ms 3 s
	// instead of 0, group.min.session.timeout.ms 6 s instead of 100 ms, 50
	// partitions of __consumer_offsets and __transaction_state instead of
	// 4, the broker session 9 s instead of 3 s. A test of what users meet
	// on a stock broker sets it. Default: false.
	KafkaDefaults bool
	// Configs are further broker configs, applied after all others.
	Configs map[string]string
	// JVMOptions replace DefaultApacheKafkaJVMOptions.
	JVMOptions []string
	// CacheDir holds the fetched jars. Default: CacheDir().
	CacheDir string
	// StartTimeout bounds each wait until the nodes answer.
	// Default: DefaultApacheKafkaStartTimeout.
	StartTimeout time.Duration
	// Progress receives progress lines while the jars are fetched the first
	// time. Default: none.
	Progress io.Writer
	// Logger receives start, kill and restart events. Default: discards.
	Logger *slog.Logger
}

// ApacheKafka is a KRaft cluster of Apache Kafka processes on loopback
// ports, each node a combined broker and controller (one node by default;
// three for the cluster's fault tests). Nodes can be killed (kill -9) and
// started again on the same directory and ports, one at a time or all
// together. Its methods are safe for concurrent use.
type ApacheKafka struct {
	opts      ApacheKafkaOptions
	java      string
	classpath string
	clusterID string
	owned     bool // Dir was made by StartApacheKafka: Stop removes it
	nodes     []*KafkaNode
}

// KafkaNode is one process of an ApacheKafka cluster.
type KafkaNode struct {
	child // PID, Kill, Stop
	k     *ApacheKafka
	id    int
	port  int // broker listener
	cport int // controller listener
	// controllerOnly: a dedicated controller (ApacheKafkaOptions.Controllers)
	controllerOnly bool
}

// StartApacheKafka fetches the jars of opts.Version (the first time),
// formats each node's directory (the first time) and starts every node,
// returning once each answers and sees every broker. With a temporary
// directory it retries on fresh ports when a port was taken meanwhile.
func StartApacheKafka(ctx context.Context, opts ApacheKafkaOptions) (*ApacheKafka, error) {
	if opts.Version == "" {
		opts.Version = ApacheKafka4
	}
	if opts.Nodes <= 0 {
		opts.Nodes = 1
	}
	if opts.JVMOptions == nil {
		opts.JVMOptions = DefaultApacheKafkaJVMOptions
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultApacheKafkaStartTimeout
	}
	if opts.Logger == nil {
		opts.Logger = discardLogger()
	}
	java, err := JavaPath()
	if err != nil {
		return nil, fmt.Errorf("embedded: apache kafka: %w", err)
	}
	jars, err := EnsureApacheKafka(ctx, opts.CacheDir, opts.Version, opts.Progress)
	if err != nil {
		return nil, err
	}
	cp, err := MavenClasspath(jars)
	if err != nil {
		return nil, err
	}
	if strings.Contains(opts.Dir, ",") {
		// log.dirs is a comma-separated list: Kafka would split the path
		// and exit with "No readable meta.properties files found".
		return nil, fmt.Errorf("embedded: apache kafka: directory %q has a comma, which Kafka's log.dirs cannot hold", opts.Dir)
	}
	k := &ApacheKafka{opts: opts, java: java, classpath: cp}
	if k.opts.Dir == "" {
		sweepStaleDirs(kafkaTempDirPrefix)
		d, err := os.MkdirTemp("", kafkaTempDirPrefix+"*")
		if err != nil {
			return nil, fmt.Errorf("embedded: apache kafka: %w", err)
		}
		k.opts.Dir, k.owned = d, true
		// A shared broker is never stopped (it dies with the test binary):
		// the next start's sweep removes its directory.
		if err := os.WriteFile(filepath.Join(d, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			k.removeDir()
			return nil, fmt.Errorf("embedded: apache kafka: %w", err)
		}
	}
	if _, err := os.Stat(filepath.Join(k.opts.Dir, "cluster.id")); err != nil {
		// A new cluster: a copy of one formatted before saves a JVM start
		// (the storage tool's) per node, seconds on a loaded machine.
		tmpl, err := k.ensureTemplate(ctx)
		if err == nil {
			err = copyTree(tmpl, k.opts.Dir)
		}
		if err != nil {
			k.removeDir()
			return nil, err
		}
	}
	if k.clusterID, err = readOrCreateClusterID(k.opts.Dir); err != nil {
		k.removeDir()
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		err = k.startFresh(ctx)
		if err == nil {
			return k, nil
		}
		_ = k.Kill()
		if !k.owned || attempt == 2 || ctx.Err() != nil || !strings.Contains(err.Error(), "Address already in use") {
			break
		}
	}
	k.removeDir()
	return nil, err
}

// startFresh picks ports for every node, writes and formats their
// directories, and starts them all.
func (k *ApacheKafka) startFresh(ctx context.Context) error {
	ports := make([]int, 2*k.size())
	for i := range ports {
		p, err := FreePort()
		if err != nil {
			return fmt.Errorf("embedded: apache kafka: %w", err)
		}
		ports[i] = p
	}
	k.makeNodes(ports)
	return k.formatAndStart(ctx, true)
}

// size is the number of processes: the brokers and dedicated controllers.
func (k *ApacheKafka) size() int { return k.opts.Nodes + max(k.opts.Controllers, 0) }

// makeNodes makes the node handles, node i listening on ports[2i] (broker)
// and ports[2i+1] (controller); the dedicated controllers come last.
func (k *ApacheKafka) makeNodes(ports []int) {
	k.nodes = make([]*KafkaNode, k.size())
	for i := range k.nodes {
		k.nodes[i] = &KafkaNode{
			child: child{name: fmt.Sprintf("kafka node %d", i+1), stopGrace: 30 * time.Second, log: k.opts.Logger},
			k:     k, id: i + 1, port: ports[2*i], cport: ports[2*i+1], controllerOnly: i >= k.opts.Nodes,
		}
	}
}

// formatAndStart writes each node's config, formats its directory if it is
// new, and starts the nodes if start.
func (k *ApacheKafka) formatAndStart(ctx context.Context, start bool) error {
	errs := make([]error, len(k.nodes))
	var wg sync.WaitGroup
	for i, n := range k.nodes {
		wg.Go(func() {
			if errs[i] = n.writeConfig(); errs[i] == nil {
				errs[i] = n.format(ctx)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil || !start {
		return err
	}
	return k.Start(ctx)
}

// ensureTemplate returns a directory of a formatted, never started cluster
// of this version and node count in the cache, formatting it the first
// time under a file lock. Its copies share a cluster id, which is harmless:
// they are separate clusters on separate ports.
func (k *ApacheKafka) ensureTemplate(ctx context.Context) (string, error) {
	cache := k.opts.CacheDir
	if cache == "" {
		var err error
		if cache, err = CacheDir(); err != nil {
			return "", err
		}
	}
	root := filepath.Join(cache, "kafka-format")
	name := fmt.Sprintf("%s-%dnodes", k.opts.Version, k.opts.Nodes)
	if k.opts.Controllers > 0 {
		name += fmt.Sprintf("-%dcontrollers", k.opts.Controllers)
	}
	dir := filepath.Join(root, name)
	if _, err := os.Stat(filepath.Join(dir, "cluster.id")); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("embedded: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(root, "."+name+".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(filepath.Join(dir, "cluster.id")); err == nil {
		return dir, nil
	}
	tmp, err := os.MkdirTemp(root, "."+name+"-")
	if err != nil {
		return "", fmt.Errorf("embedded: %w", err)
	}
	defer os.RemoveAll(tmp)
	t := &ApacheKafka{opts: k.opts, java: k.java, classpath: k.classpath}
	t.opts.Dir = tmp
	if t.clusterID, err = readOrCreateClusterID(tmp); err != nil {
		return "", err
	}
	ports := make([]int, 2*k.size())
	for i := range ports {
		ports[i] = 9092 + i // never listened on: the tool only formats
	}
	t.makeNodes(ports)
	if err := t.formatAndStart(ctx, false); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", fmt.Errorf("embedded: %w", err)
	}
	return dir, nil
}

// copyTree copies the files under src into dst, making directories as
// needed.
func copyTree(src, dst string) error {
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		return fmt.Errorf("embedded: apache kafka: copy %s: %w", src, err)
	}
	return nil
}

// readOrCreateClusterID returns the cluster id kept in dir, making one the
// first time: every node of a cluster is formatted with it.
func readOrCreateClusterID(dir string) (string, error) {
	path := filepath.Join(dir, "cluster.id")
	if b, err := os.ReadFile(path); err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	var s string
	for s == "" || s[0] == '-' { // as Kafka's own ids: a leading '-' reads as a flag
		var id [16]byte
		_, _ = rand.Read(id[:])
		s = base64.RawURLEncoding.EncodeToString(id[:])
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("embedded: apache kafka: %w", err)
	}
	if err := os.WriteFile(path, []byte(s+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("embedded: apache kafka: %w", err)
	}
	return s, nil
}

// Brokers returns the bootstrap addresses of every broker (not of the
// dedicated controllers); they stay the same across Kill and Start.
func (k *ApacheKafka) Brokers() []string {
	var out []string
	for _, n := range k.nodes {
		if !n.controllerOnly {
			out = append(out, n.Addr())
		}
	}
	return out
}

// Version returns the Apache Kafka release running.
func (k *ApacheKafka) Version() string { return k.opts.Version }

// Dir returns the directory of the nodes' configurations and logs.
func (k *ApacheKafka) Dir() string { return k.opts.Dir }

// Nodes returns the cluster's nodes, in node id order (id 1 first), the
// dedicated controllers last.
func (k *ApacheKafka) Nodes() []*KafkaNode { return slices.Clone(k.nodes) }

// Node returns the node with the given id (1 to Nodes+Controllers), or nil.
func (k *ApacheKafka) Node(id int) *KafkaNode {
	if id < 1 || id > len(k.nodes) {
		return nil
	}
	return k.nodes[id-1]
}

// Start starts every stopped or killed node, all at once (a quorum of
// controllers must be up for any of them to be ready), and waits until
// each answers. Running nodes are left alone.
func (k *ApacheKafka) Start(ctx context.Context) error {
	errs := make([]error, len(k.nodes))
	var wg sync.WaitGroup
	for i, n := range k.nodes {
		wg.Go(func() { errs[i] = n.Start(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Kill kills every node with SIGKILL and waits until they are gone.
func (k *ApacheKafka) Kill() error {
	var errs []error
	for _, n := range k.nodes {
		errs = append(errs, n.Kill())
	}
	return errors.Join(errs...)
}

// Stop shuts every node down cleanly (SIGTERM; SIGKILL after 30 s) and
// removes the directory if StartApacheKafka made it. Stop twice is a no-op.
func (k *ApacheKafka) Stop() error {
	errs := make([]error, len(k.nodes))
	var wg sync.WaitGroup
	for i, n := range k.nodes {
		wg.Go(func() { errs[i] = n.Stop() })
	}
	wg.Wait()
	k.removeDir()
	return errors.Join(errs...)
}

// Close kills every node and removes the directory if StartApacheKafka made
// it: the quick end of a test that keeps nothing. Close twice is a no-op.
func (k *ApacheKafka) Close() error {
	err := k.Kill()
	k.removeDir()
	return err
}

func (k *ApacheKafka) removeDir() {
	if k.owned {
		_ = os.RemoveAll(k.opts.Dir)
		k.owned = false
	}
}

// ID returns the node's id, its broker.id/node.id (1 to Nodes, then the
// dedicated controllers').
func (n *KafkaNode) ID() int { return n.id }

// ControllerOnly reports whether the node is a dedicated KRaft controller
// (ApacheKafkaOptions.Controllers), which serves no clients.
func (n *KafkaNode) ControllerOnly() bool { return n.controllerOnly }

// Addr returns the node's broker listener, 127.0.0.1:port (a dedicated
// controller's is never listened on).
func (n *KafkaNode) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)) }

// dir is the node's directory: server.properties and data/.
func (n *KafkaNode) dir() string { return filepath.Join(n.k.opts.Dir, "node-"+strconv.Itoa(n.id)) }

// Start starts the node if it is stopped or killed, on the same directory
// and ports, and waits until it answers and sees every broker of the
// cluster that is running. Starting a running node is a no-op.
func (n *KafkaNode) Start(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.running() {
		return nil
	}
	t0 := time.Now()
	args := append(slices.Clone(n.k.opts.JVMOptions), "-cp", n.k.classpath, "kafka.Kafka", filepath.Join(n.dir(), "server.properties"))
	p, err := startProcess(n.k.java, args, os.Environ(), n.dir())
	if err != nil {
		return fmt.Errorf("embedded: start kafka node %d: %w", n.id, err)
	}
	if err := p.waitReady(ctx, n.k.opts.StartTimeout, n.probe); err != nil {
		_ = p.kill()
		return fmt.Errorf("embedded: apache kafka %s node %d on %s: %w", n.k.opts.Version, n.id, n.Addr(), err)
	}
	n.proc = p
	n.log.Info("kafka node started", "version", n.k.opts.Version, "node", n.id, "addr", n.Addr(), "pid", p.pid(), "took", time.Since(t0))
	return nil
}

// probe succeeds once the node answers Metadata listing itself as a broker:
// it has registered with the controller quorum and been unfenced. A
// dedicated controller is ready once it listens (the brokers' probes
// prove the quorum).
func (n *KafkaNode) probe(ctx context.Context) error {
	if n.controllerOnly {
		return dialOK(ctx, net.JoinHostPort("127.0.0.1", strconv.Itoa(n.cport)))
	}
	if err := dialOK(ctx, n.Addr()); err != nil {
		return err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.Addr()), kgo.DialTimeout(2*time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	for _, b := range resp.Brokers {
		if int(b.NodeID) == n.id {
			return nil
		}
	}
	return fmt.Errorf("node %d not among the brokers yet", n.id)
}

// format runs Kafka's storage tool on a node directory that has no
// meta.properties yet, as `kafka-storage.sh format` does.
func (n *KafkaNode) format(ctx context.Context) error {
	data := filepath.Join(n.dir(), "data")
	if _, err := os.Stat(filepath.Join(data, "meta.properties")); err == nil {
		return nil
	}
	args := append(slices.Clone(n.k.opts.JVMOptions), "-cp", n.k.classpath, "kafka.tools.StorageTool",
		"format", "-t", n.k.clusterID, "-c", filepath.Join(n.dir(), "server.properties"), "--ignore-formatted")
	p, err := startProcess(n.k.java, args, os.Environ(), n.dir())
	if err != nil {
		return fmt.Errorf("embedded: kafka storage format: %w", err)
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		_ = p.kill()
		return fmt.Errorf("embedded: kafka storage format node %d: %w", n.id, ctx.Err())
	}
	if p.err != nil {
		return fmt.Errorf("embedded: kafka storage format node %d: %w\n%s", n.id, p.err, p.out.String())
	}
	return nil
}

// writeConfig writes the node's server.properties.
func (n *KafkaNode) writeConfig() error {
	if err := os.MkdirAll(n.dir(), 0o755); err != nil {
		return fmt.Errorf("embedded: apache kafka: %w", err)
	}
	cfg := n.k.brokerConfig(n)
	var b strings.Builder
	for _, key := range slices.Sorted(maps.Keys(cfg)) {
		fmt.Fprintf(&b, "%s=%s\n", key, cfg[key])
	}
	return os.WriteFile(filepath.Join(n.dir(), "server.properties"), []byte(b.String()), 0o644)
}

// brokerConfig returns node n's broker configs: the KRaft wiring, the
// replication the node count allows, the test timing unless KafkaDefaults,
// and opts.Configs last.
func (k *ApacheKafka) brokerConfig(n *KafkaNode) map[string]string {
	var voters []string
	for _, m := range k.nodes {
		if m.controllerOnly || k.opts.Controllers <= 0 {
			voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", m.id, m.cport))
		}
	}
	rf := strconv.Itoa(min(3, k.opts.Nodes))
	isr := strconv.Itoa(min(2, k.opts.Nodes))
	cfg := map[string]string{
		"process.roles":                            "broker,controller",
		"node.id":                                  strconv.Itoa(n.id),
		"controller.quorum.voters":                 strings.Join(voters, ","),
		"listeners":                                fmt.Sprintf("PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", n.port, n.cport),
		"advertised.listeners":                     "PLAINTEXT://" + n.Addr(),
		"controller.listener.names":                "CONTROLLER",
		"inter.broker.listener.name":               "PLAINTEXT",
		"listener.security.protocol.map":           "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
		"log.dirs":                                 filepath.Join(n.dir(), "data"),
		"default.replication.factor":               rf,
		"min.insync.replicas":                      isr,
		"offsets.topic.replication.factor":         rf,
		"transaction.state.log.replication.factor": rf,
		"transaction.state.log.min.isr":            isr,
		// Kafka 4's share groups; 3.9 ignores the keys (an "unknown
		// config" warning).
		"share.coordinator.state.topic.replication.factor": rf,
		"share.coordinator.state.topic.min.isr":            isr,
	}
	switch {
	case n.controllerOnly:
		cfg["process.roles"] = "controller"
		cfg["listeners"] = fmt.Sprintf("CONTROLLER://127.0.0.1:%d", n.cport)
		delete(cfg, "advertised.listeners")
		delete(cfg, "inter.broker.listener.name")
	case k.opts.Controllers > 0:
		cfg["process.roles"] = "broker"
		cfg["listeners"] = fmt.Sprintf("PLAINTEXT://127.0.0.1:%d", n.port)
	}
	if !k.opts.KafkaDefaults {
		maps.Copy(cfg, map[string]string{
			"group.initial.rebalance.delay.ms":     "0",
			"group.min.session.timeout.ms":         "100",
			"offsets.topic.num.partitions":         "4",
			"transaction.state.log.num.partitions": "4",
			"broker.heartbeat.interval.ms":         "500",
			"broker.session.timeout.ms":            "3000",
			"num.network.threads":                  "2",
			"num.io.threads":                       "2",
			"log.cleaner.dedupe.buffer.size":       strconv.Itoa(8 << 20),
		})
	}
	maps.Copy(cfg, k.opts.Configs)
	return cfg
}
