package embedded

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The Apache Kafka releases the tests run, one per line users run: the
// newest 4.x (transactions v2, KIP-890; the old protocol versions removed,
// KIP-896) and the newest 3.9.x (the last 3.x line, transactions v1), and
// for make test-compat the newest patch of 4.0 (the first 4.x) and of 4.2.
// docs/kafka-versions.md says what runs on which.
const (
	ApacheKafka4  = "4.4.0"
	ApacheKafka42 = "4.2.2"
	ApacheKafka40 = "4.0.2"
	ApacheKafka39 = "3.9.2"
)

// ApacheKafkaVersions are the releases make deps fetches, newest first.
var ApacheKafkaVersions = []string{ApacheKafka4, ApacheKafka42, ApacheKafka40, ApacheKafka39}

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
	if Short() {
		return "", ErrShort
	}
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
	// Security adds listeners that require SASL, TLS or both to every
	// broker, beside the PLAINTEXT one (see KafkaSecurity and BrokersOn).
	// Default: none.
	Security KafkaSecurity
	// Configs are further broker configs, applied after all others.
	Configs map[string]string
	// TransactionVersion, when positive, is the transaction.version
	// feature level the cluster is formatted with (kafka-storage format
	// --feature transaction.version=N): 1 keeps transactions v1 on a 4.x
	// broker, 2 turns on transactions v2 (KIP-890; a 4.x cluster's
	// default). It applies to a new directory only: an existing cluster
	// keeps the level it was formatted with. Default: 0, the release's
	// own default.
	TransactionVersion int
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

// StartApacheKafka fetches the jars of opts.Version (the first time),
// formats each node's directory (the first time) and starts every node,
// returning once each answers and sees every broker. With a temporary
// directory it retries on fresh ports when a port was taken meanwhile.
func StartApacheKafka(ctx context.Context, opts ApacheKafkaOptions) (*ApacheKafka, error) {
	if Short() {
		return nil, ErrShort
	}
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
	if err := opts.Security.validate(); err != nil {
		return nil, err
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
	if _, err := os.Stat(filepath.Join(k.opts.Dir, "cluster.id")); err != nil && len(opts.Security.Users) == 0 {
		// A new cluster: a copy of one formatted before saves a JVM start
		// (the storage tool's) per node, seconds on a loaded machine. One
		// with SCRAM users is formatted with them, by formatAndStart.
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
	ports, err := FreePorts(k.portsPerNode() * k.size())
	if err != nil {
		return fmt.Errorf("embedded: apache kafka: %w", err)
	}
	k.makeNodes(ports)
	return k.formatAndStart(ctx, true)
}

// size is the number of processes: the brokers and dedicated controllers.
func (k *ApacheKafka) size() int { return k.opts.Nodes + max(k.opts.Controllers, 0) }

// portsPerNode is the number of ports each node is given: its broker and
// controller listeners' and those opts.Security adds.
func (k *ApacheKafka) portsPerNode() int { return 2 + len(k.opts.Security.protocols()) }

// makeNodes makes the node handles, node i listening on ports[s*i]
// (broker), ports[s*i+1] (controller) and the next ones for the listeners
// of opts.Security, s being portsPerNode; the dedicated controllers come
// last (and leave their Security ports unused).
func (k *ApacheKafka) makeNodes(ports []int) {
	stride := k.portsPerNode()
	k.nodes = make([]*KafkaNode, k.size())
	for i := range k.nodes {
		np := ports[stride*i : stride*(i+1)]
		n := &KafkaNode{
			child: child{name: fmt.Sprintf("kafka node %d", i+1), stopGrace: 30 * time.Second, log: k.opts.Logger},
			k:     k, id: i + 1, port: np[0], cport: np[1], controllerOnly: i >= k.opts.Nodes,
		}
		if !n.controllerOnly {
			n.secure = map[string]int{}
			for j, l := range k.opts.Security.protocols() {
				n.secure[l] = np[2+j]
			}
		}
		k.nodes[i] = n
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

// BrokersOn returns the addresses of every broker's listener of a security
// protocol: KafkaPlaintext (as Brokers), or KafkaSASLPlaintext, KafkaSSL or
// KafkaSASLSSL as opts.Security adds them; nil for a listener the brokers
// do not have.
func (k *ApacheKafka) BrokersOn(protocol string) []string {
	var out []string
	for _, n := range k.nodes {
		if a := n.ListenerAddr(protocol); a != "" {
			out = append(out, a)
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
