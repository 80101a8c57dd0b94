package embedded

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// KafkaNode is one process of an ApacheKafka cluster.
type KafkaNode struct {
	child // PID, Kill, Stop
	k     *ApacheKafka
	id    int
	port  int // broker listener
	cport int // controller listener
	// secure are the ports of KafkaSecurity's listeners, by protocol
	secure map[string]int
	// controllerOnly: a dedicated controller (ApacheKafkaOptions.Controllers)
	controllerOnly bool
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

// ListenerAddr returns the node's listener of a security protocol
// (KafkaPlaintext: Addr; the others as ApacheKafkaOptions.Security adds
// them), or "" if the node has none.
func (n *KafkaNode) ListenerAddr(protocol string) string {
	if protocol == KafkaPlaintext && !n.controllerOnly {
		return n.Addr()
	}
	if p, ok := n.secure[protocol]; ok {
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	return ""
}

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
	p, err := startJVM(n.k.java, n.k.opts.JVMOptions, n.k.classpath, "kafka.Kafka", []string{filepath.Join(n.dir(), "server.properties")}, n.dir())
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
	args := []string{"format", "-t", n.k.clusterID, "-c", filepath.Join(n.dir(), "server.properties"), "--ignore-formatted"}
	if n.controllerOnly || n.k.opts.Controllers <= 0 {
		// The controllers write the bootstrap records, SCRAM's and the
		// features' among them.
		args = append(args, n.k.opts.Security.scramArgs()...)
		if v := n.k.opts.TransactionVersion; v > 0 {
			args = append(args, "--feature", "transaction.version="+strconv.Itoa(v))
		}
	}
	p, err := startJVM(n.k.java, n.k.opts.JVMOptions, n.k.classpath, "kafka.tools.StorageTool", args, n.dir())
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
		fmt.Fprintf(&b, "%s=%s\n", key, propertiesValue(cfg[key]))
	}
	return os.WriteFile(filepath.Join(n.dir(), "server.properties"), []byte(b.String()), 0o644)
}

// brokerConfig returns node n's broker configs: the KRaft wiring, the
// listeners of opts.Security, the replication the node count allows, the
// test timing unless KafkaDefaults, and opts.Configs last. The values are
// as Kafka reads them: writeConfig escapes them.
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
	if !n.controllerOnly {
		for _, l := range k.opts.Security.protocols() {
			addr := n.ListenerAddr(l)
			cfg["listeners"] += "," + l + "://" + addr
			cfg["advertised.listeners"] += "," + l + "://" + addr
			cfg["listener.security.protocol.map"] += "," + l + ":" + l
		}
		maps.Copy(cfg, k.opts.Security.brokerConfigs())
	}
	if !k.opts.KafkaDefaults {
		maps.Copy(cfg, map[string]string{
			"group.initial.rebalance.delay.ms": "0",
			"group.min.session.timeout.ms":     "100",
			// The consumer group protocol's session timeout and
			// heartbeat interval are the broker's (45 s and 5 s by
			// default): the classic groups' test timing (6 s sessions)
			// instead, so that a member killed under either protocol
			// is noticed as quickly. 3.9 ignores them.
			"group.consumer.min.session.timeout.ms":    "1000",
			"group.consumer.session.timeout.ms":        "6000",
			"group.consumer.min.heartbeat.interval.ms": "100",
			"group.consumer.heartbeat.interval.ms":     "500",
			"offsets.topic.num.partitions":             "4",
			"transaction.state.log.num.partitions":     "4",
			"broker.heartbeat.interval.ms":             "500",
			"broker.session.timeout.ms":                "3000",
			"num.network.threads":                      "2",
			"num.io.threads":                           "2",
			"log.cleaner.dedupe.buffer.size":           strconv.Itoa(8 << 20),
		})
	}
	maps.Copy(cfg, k.opts.Configs)
	return cfg
}
