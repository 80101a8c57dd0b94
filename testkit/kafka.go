package testkit

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

// sharedKafka is the one Apache Kafka broker per test binary behind Kafka.
// It is never stopped explicitly: the kernel kills it when the test binary
// exits (Pdeathsig), and a later start removes its directory.
var sharedKafka struct {
	mu  sync.Mutex
	k   *embedded.ApacheKafka
	err error
}

// Kafka returns the bootstrap brokers of a Kafka cluster for this test: the
// ones in $KAFKA_BROKERS if set; otherwise, by $EXACTLYONCE_KAFKA, one
// Apache Kafka broker per test binary, started on first use (the first use
// on a machine fetches its jars with Maven, printing progress to standard
// error), or with KafkaFake a fresh in-process kfake cluster closed at
// cleanup. Every broker but kfake's is shared by the tests: name topics and
// groups with Name, and do not kill it (StartApacheKafka gives a test its
// own).
func Kafka(t testing.TB) []string {
	t.Helper()
	refuseInFuncChild(t, "testkit.Kafka")
	if v := os.Getenv(EnvKafkaBrokers); v != "" {
		return strings.Split(v, ",")
	}
	impl := KafkaImplementation(t)
	if impl == KafkaFake {
		k, err := embedded.StartKafka(embedded.KafkaOptions{})
		if err != nil {
			Unavailable(t, "kafka (kfake)", err)
			return nil
		}
		t.Cleanup(k.Close)
		return k.Brokers()
	}
	brokers, err := sharedApacheKafka(t, impl)
	if err != nil {
		Unavailable(t, "kafka ("+impl+")", err)
		return nil
	}
	return brokers
}

func sharedApacheKafka(t testing.TB, impl string) ([]string, error) {
	sharedKafka.mu.Lock()
	defer sharedKafka.mu.Unlock()
	if sharedKafka.k == nil && sharedKafka.err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), firstStartTimeout)
		defer cancel()
		sharedKafka.k, sharedKafka.err = embedded.StartApacheKafka(ctx, embedded.ApacheKafkaOptions{
			Version: apacheVersion(impl), TransactionVersion: KafkaTransactionVersion(t), Progress: os.Stderr,
		})
	}
	if sharedKafka.err != nil {
		return nil, sharedKafka.err
	}
	if sharedKafka.k.Node(1).PID() == 0 {
		t.Logf("testkit: the shared kafka broker exited, starting it again")
		ctx, cancel := setupContext(t)
		defer cancel()
		if err := sharedKafka.k.Start(ctx); err != nil {
			return nil, err
		}
	}
	return sharedKafka.k.Brokers(), nil
}

// ApacheKafkaOptions configures StartApacheKafka. The zero value is valid.
type ApacheKafkaOptions struct {
	// Nodes is the number of brokers (each also a KRaft controller unless
	// Controllers is set). With 3, topics get 3 replicas and
	// min.insync.replicas 2. Default: 1.
	Nodes int
	// Controllers is a number of dedicated KRaft controllers beside the
	// brokers, so that brokers killed never take the controller quorum
	// with them (two of three brokers down: the ISR below
	// min.insync.replicas, the cluster still answering). Their ids follow
	// the brokers'. Default: 0, every broker is also a controller.
	Controllers int
	// KafkaDefaults keeps Kafka's own group and transaction timing
	// (group.initial.rebalance.delay.ms 3 s, group.min.session.timeout.ms
	// 6 s) instead of the kit's test timing (0 and 100 ms). Default: false.
	KafkaDefaults bool
	// Configs are further broker configs.
	Configs map[string]string
	// SASLUsers are SASL users and their passwords, accepted with PLAIN,
	// SCRAM-SHA-256 and SCRAM-SHA-512 on a SASL_PLAINTEXT listener of
	// every broker, and on a SASL_SSL one with TLS (see
	// ApacheKafka.Listener). The brokers authorize every user for
	// everything; the PLAINTEXT listener (Brokers) stays open, for the
	// test's own setup. Such a cluster is formatted with the SCRAM
	// credentials, a few seconds more to start. Default: none.
	SASLUsers map[string]string
	// TLS is the server side of an SSL listener of every broker, and of a
	// SASL_SSL one with SASLUsers: its first certificate, the chain and
	// its private key (as TLS makes them), is handed to the brokers as
	// PEM. Clients are not asked for a certificate. Default: none.
	TLS *tls.Config
}

// ApacheKafka is an Apache Kafka cluster of this test's own, which the test
// may kill and restart. Its methods fail the test on error, so call them
// from the test's goroutine.
type ApacheKafka struct {
	t testing.TB
	k *embedded.ApacheKafka
}

// StartApacheKafka starts an Apache Kafka cluster for this test alone (the
// release $EXACTLYONCE_KAFKA names; Apache Kafka 4 under KafkaFake too),
// with its logs in the test's temporary directory, killed at cleanup. It
// ignores $KAFKA_BROKERS: a test that kills brokers needs its own.
func StartApacheKafka(t testing.TB, opts ...ApacheKafkaOptions) *ApacheKafka {
	t.Helper()
	refuseInFuncChild(t, "testkit.StartApacheKafka")
	var o ApacheKafkaOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	ctx, cancel := context.WithTimeout(context.Background(), firstStartTimeout)
	defer cancel()
	dir := t.TempDir()
	if strings.Contains(dir, ",") {
		// A subtest's name with a comma: Kafka's log.dirs cannot hold it.
		var err error
		if dir, err = os.MkdirTemp("", "exactlyonce-kafkabroker-"); err != nil {
			t.Fatalf("testkit: %v", err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
	}
	sec := embedded.KafkaSecurity{Users: o.SASLUsers}
	if o.TLS != nil {
		var err error
		if sec.CertPEM, sec.KeyPEM, err = certificatePEM(o.TLS); err != nil {
			t.Fatalf("testkit: kafka broker TLS: %v", err)
		}
	}
	k, err := embedded.StartApacheKafka(ctx, embedded.ApacheKafkaOptions{
		Version: apacheVersion(KafkaImplementation(t)), TransactionVersion: KafkaTransactionVersion(t),
		Nodes: o.Nodes, Controllers: o.Controllers, Dir: dir,
		KafkaDefaults: o.KafkaDefaults, Configs: o.Configs, Security: sec, Progress: os.Stderr,
	})
	if err != nil {
		Unavailable(t, "kafka (apache)", err)
		return nil
	}
	t.Cleanup(func() { _ = k.Close() })
	return &ApacheKafka{t: t, k: k}
}

// Brokers returns the bootstrap addresses; they stay the same across Kill
// and Start.
func (b *ApacheKafka) Brokers() []string { return b.k.Brokers() }

// Listener returns the bootstrap addresses of the brokers' listener of a
// security protocol, by Kafka's name: "PLAINTEXT" (as Brokers), and
// "SASL_PLAINTEXT", "SSL" or "SASL_SSL" as ApacheKafkaOptions.SASLUsers
// and TLS add them. It fails the test when the brokers have no such
// listener.
func (b *ApacheKafka) Listener(protocol string) []string {
	b.t.Helper()
	addrs := b.k.BrokersOn(protocol)
	if len(addrs) == 0 {
		b.t.Fatalf("testkit: the kafka brokers have no %s listener (see ApacheKafkaOptions.SASLUsers and TLS)", protocol)
	}
	return addrs
}

// Version returns the Apache Kafka release running.
func (b *ApacheKafka) Version() string { return b.k.Version() }

// Kill kills every broker with SIGKILL and waits until they are gone.
// KillNode kills one.
func (b *ApacheKafka) Kill() {
	b.t.Helper()
	if err := b.k.Kill(); err != nil {
		b.t.Fatalf("testkit: %v", err)
	}
}

// Start starts every killed or stopped broker again on the same ports and
// logs, and waits until each answers.
func (b *ApacheKafka) Start() {
	b.t.Helper()
	ctx, cancel := setupContext(b.t)
	defer cancel()
	if err := b.k.Start(ctx); err != nil {
		b.t.Fatalf("testkit: %v", err)
	}
}

// Stop shuts every broker down cleanly and waits until they are gone.
func (b *ApacheKafka) Stop() {
	b.t.Helper()
	for _, n := range b.k.Nodes() {
		if err := n.Stop(); err != nil {
			b.t.Fatalf("testkit: %v", err)
		}
	}
}

// KillNode kills broker id (1 to Nodes) with SIGKILL.
func (b *ApacheKafka) KillNode(id int) {
	b.t.Helper()
	if err := b.node(id).Kill(); err != nil {
		b.t.Fatalf("testkit: %v", err)
	}
}

// StopNode shuts broker id down cleanly (SIGTERM, as a rolling restart
// does; SIGKILL after 30 s) and waits until it is gone.
func (b *ApacheKafka) StopNode(id int) {
	b.t.Helper()
	if err := b.node(id).Stop(); err != nil {
		b.t.Fatalf("testkit: %v", err)
	}
}

// StartNode starts broker id again and waits until it answers.
func (b *ApacheKafka) StartNode(id int) {
	b.t.Helper()
	ctx, cancel := setupContext(b.t)
	defer cancel()
	if err := b.node(id).Start(ctx); err != nil {
		b.t.Fatalf("testkit: %v", err)
	}
}

// NodePID returns broker id's process id, 0 while it is down.
func (b *ApacheKafka) NodePID(id int) int { return b.node(id).PID() }

func (b *ApacheKafka) node(id int) *embedded.KafkaNode {
	b.t.Helper()
	n := b.k.Node(id)
	if n == nil {
		b.t.Fatalf("testkit: no kafka node %d (%d nodes)", id, len(b.k.Nodes()))
	}
	return n
}

// CreateTopic creates topic with the given number of partitions and waits
// until every partition has a leader. Creating a topic that exists with the
// same partition count is a no-op; another count fails the test, as does
// any other error.
func CreateTopic(t testing.TB, brokers []string, topic string, partitions int) {
	t.Helper()
	ctx, cancel := setupContext(t)
	defer cancel()
	if err := embedded.CreateTopic(ctx, brokers, topic, partitions); err != nil {
		t.Fatalf("testkit: %v", err)
	}
}

// SetGroupConfigs sets dynamic configs of one consumer group on Apache
// Kafka 4 or kfake, such as consumer.session.timeout.ms: the consumer
// group protocol's session timeout for that group, in place of the kit's
// broker-wide 6 s. It fails the test on an error (Kafka 3.9 has no group
// configs).
func SetGroupConfigs(t testing.TB, brokers []string, group string, configs map[string]string) {
	t.Helper()
	ctx, cancel := setupContext(t)
	defer cancel()
	if err := embedded.SetGroupConfigs(ctx, brokers, group, configs); err != nil {
		t.Fatalf("testkit: %v", err)
	}
}

// String names the cluster in test logs.
func (b *ApacheKafka) String() string {
	return fmt.Sprintf("apache kafka %s, %d node(s), %v", b.k.Version(), len(b.k.Nodes()), b.k.Brokers())
}

// Kfake is a dedicated in-process Kafka cluster (franz-go's kfake)
// for one test, for tests that inject faults into the broker: kfake runs
// whatever $EXACTLYONCE_KAFKA says, since only it has request hooks.
type Kfake struct {
	k *embedded.Kafka
}

// StartKfake starts a dedicated one-broker kfake cluster for this test,
// closed at cleanup. extra are further kfake options (more brokers, broker
// configs, TLS, kfake's own Control hooks). It ignores $KAFKA_BROKERS: a
// test that injects faults needs its own broker.
func StartKfake(t testing.TB, extra ...kfake.Opt) *Kfake {
	t.Helper()
	refuseInFuncChild(t, "testkit.StartKfake")
	k, err := embedded.StartKafka(embedded.KafkaOptions{Extra: extra})
	if err != nil {
		Unavailable(t, "kafka (kfake)", err)
		return nil
	}
	t.Cleanup(k.Close)
	return &Kfake{k: k}
}

// Brokers returns the bootstrap addresses.
func (c *Kfake) Brokers() []string { return c.k.Brokers() }

// Cluster returns the kfake cluster, for fault injection with Control and
// ControlKey.
func (c *Kfake) Cluster() *kfake.Cluster { return c.k.Cluster() }

// Close shuts the cluster down before the test's cleanup does. It is safe
// to call more than once.
func (c *Kfake) Close() { c.k.Close() }

// KfakeProcessOptions configures StartKfakeProcess. The zero value is
// valid.
type KfakeProcessOptions struct {
	// MinSessionTimeout is the smallest consumer-group session timeout the
	// broker accepts, so a test can expire a frozen member quickly.
	// Default: kfake's, 6s.
	MinSessionTimeout time.Duration
	// ExpireMembers makes the broker expire consumer-group members that
	// sent nothing for their session timeout, as Kafka does (kfake alone
	// keeps a member that died while joining). Default: false.
	ExpireMembers bool
}

// KfakeProcess is a one-broker kfake cluster in its own process (whatever
// $EXACTLYONCE_KAFKA says; StartApacheKafka gives Apache Kafka), persisting
// to a per-test directory, for tests that kill Kafka or keep it alive while
// they kill its clients. Its methods fail the test on error, so call them
// from the test's goroutine.
type KfakeProcess struct {
	t testing.TB
	k *embedded.KafkaProcess
}

// StartKfakeProcess starts a dedicated broker process for this test,
// stopped at cleanup. Records and committed offsets survive Kill and Start.
// It ignores $KAFKA_BROKERS: a test that kills a broker needs its own. The
// first use on a machine builds the broker program into the cache.
func StartKfakeProcess(t testing.TB, opts ...KafkaProcessOptions) *KfakeProcess {
	t.Helper()
	refuseInFuncChild(t, "testkit.StartKfakeProcess")
	ctx, cancel := setupContext(t)
	defer cancel()
	var o KfakeProcessOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	k, err := embedded.StartKafkaProcess(ctx, embedded.KafkaProcessOptions{
		DataDir:           t.TempDir(),
		MinSessionTimeout: o.MinSessionTimeout,
		ExpireMembers:     o.ExpireMembers,
	})
	if err != nil {
		Unavailable(t, "kafka (kfakeserver process)", err)
		return nil
	}
	t.Cleanup(func() { _ = k.Stop() })
	return &KfakeProcess{t: t, k: k}
}

// Brokers returns the bootstrap address; it stays the same across Kill and
// Start.
func (s *KfakeProcess) Brokers() []string { return s.k.Brokers() }

// PID returns the broker's process id, 0 while it is down.
func (s *KfakeProcess) PID() int { return s.k.PID() }

// Kill kills the broker with SIGKILL and waits until it is gone.
func (s *KfakeProcess) Kill() {
	s.t.Helper()
	if err := s.k.Kill(); err != nil {
		s.t.Fatalf("testkit: %v", err)
	}
}

// Start starts the broker again on the same port and data directory.
func (s *KfakeProcess) Start() {
	s.t.Helper()
	ctx, cancel := setupContext(s.t)
	defer cancel()
	if err := s.k.Start(ctx); err != nil {
		s.t.Fatalf("testkit: %v", err)
	}
}

// Stop closes the broker cleanly and waits until it is gone.
func (s *KfakeProcess) Stop() {
	s.t.Helper()
	if err := s.k.Stop(); err != nil {
		s.t.Fatalf("testkit: %v", err)
	}
}
