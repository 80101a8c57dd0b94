package embedded

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/exactlyonce/exactlyonce/internal/embedded/kafkafault"
)

// ErrTopicMismatch is returned by CreateTopic when the topic exists with a
// different partition count.
var ErrTopicMismatch = errors.New("embedded: topic exists with another partition count")

// KafkaOptions configures StartKafka. The zero value is valid.
type KafkaOptions struct {
	// DataDir, when set, makes the cluster persist its logs, offsets and
	// groups there and reload them when a cluster starts on the same
	// directory. Default: in memory only.
	DataDir string
	// Port to listen on. Default: a free port.
	Port int
	// ExpireMembers expires consumer-group members that sent nothing for
	// their session timeout, as Kafka does; kfake alone keeps a member that
	// died while joining for good (see kafkafault.ExpireMembers). Default:
	// false.
	ExpireMembers bool
	// Extra are further kfake options (broker configs, kfake's own Fault
	// and Control hooks), applied after the ones derived from the fields
	// above. A kfake.ListenFn among them replaces the fault injector's
	// listener: connection faults (lost acknowledgements, dropped
	// connections, slow answers) then do nothing.
	Extra []kfake.Opt
}

// Kafka is an in-process, single-broker franz-go kfake cluster. It speaks
// the Kafka protocol on 127.0.0.1, including the classic consumer-group
// protocol that segmentio/kafka-go uses, offset commits and acks=all
// produces. It is safe for concurrent use.
type Kafka struct {
	cluster   *kfake.Cluster
	faults    *kafkafault.Injector
	stop      context.CancelFunc // stops the member expiry
	done      chan struct{}      // closed once the expiry returned
	closeOnce sync.Once
}

// StartKafka starts a one-broker kfake cluster.
func StartKafka(opts KafkaOptions) (*Kafka, error) {
	inj := kafkafault.New()
	kopts := []kfake.Opt{kfake.NumBrokers(1), kfake.ListenFn(inj.Listen),
		// Consumer-protocol groups at the classic groups' test timing, as
		// on the Apache brokers (see kafkanode.go): kfake's default
		// session timeout is 45 s.
		kfake.BrokerConfigs(map[string]string{
			"group.consumer.session.timeout.ms":    "6000",
			"group.consumer.heartbeat.interval.ms": "500",
		})}
	if opts.Port != 0 {
		kopts = append(kopts, kfake.Ports(opts.Port))
	}
	if opts.DataDir != "" {
		kopts = append(kopts, kfake.DataDir(opts.DataDir))
	}
	kopts = append(kopts, opts.Extra...)
	c, err := kfake.NewCluster(kopts...)
	if err != nil {
		return nil, fmt.Errorf("embedded: start kfake: %w", err)
	}
	inj.Attach(c)
	k := &Kafka{cluster: c, faults: inj, stop: func() {}, done: make(chan struct{})}
	if !opts.ExpireMembers {
		close(k.done)
		return k, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	k.stop = cancel
	go func() {
		defer close(k.done)
		_ = inj.ExpireMembers(ctx, c.ListenAddrs(), kafkafault.ExpireOptions{})
	}()
	return k, nil
}

// Brokers returns the bootstrap addresses.
func (k *Kafka) Brokers() []string { return k.cluster.ListenAddrs() }

// Cluster returns the kfake cluster, for fault injection with Control and
// ControlKey.
func (k *Kafka) Cluster() *kfake.Cluster { return k.cluster }

// InjectFault arms a wire-level fault (see package kafkafault). The context
// is unused (the injector is in process); it keeps the signature of
// KafkaProcess.InjectFault.
func (k *Kafka) InjectFault(_ context.Context, f kafkafault.Fault) error {
	return k.faults.Inject(f)
}

// ClearFaults disarms every fault.
func (k *Kafka) ClearFaults(context.Context) error {
	k.faults.Clear()
	return nil
}

// FaultStats returns what the faults have hit so far.
func (k *Kafka) FaultStats(context.Context) (kafkafault.Stats, error) {
	return k.faults.Stats(), nil
}

// Close shuts the cluster down. It is safe to call more than once.
func (k *Kafka) Close() {
	k.closeOnce.Do(func() {
		k.stop()
		<-k.done
		k.cluster.Close()
	})
}

// CreateTopic creates topic with the given number of partitions on the
// cluster at brokers (kfake or real Kafka) and waits until every partition
// has a leader. It is idempotent: a topic that already exists with the same
// partition count is success; with another count, the error wraps
// ErrTopicMismatch.
func CreateTopic(ctx context.Context, brokers []string, topic string, partitions int) error {
	if partitions <= 0 {
		return fmt.Errorf("embedded: create topic %q: partitions must be positive, got %d", topic, partitions)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return fmt.Errorf("embedded: create topic %q: %w", topic, err)
	}
	defer cl.Close()

	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic = topic
	rt.NumPartitions = int32(partitions)
	rt.ReplicationFactor = -1
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 30_000
	for {
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return fmt.Errorf("embedded: create topic %q: %w", topic, err)
		}
		if len(resp.Topics) != 1 {
			return fmt.Errorf("embedded: create topic %q: %d topics in response", topic, len(resp.Topics))
		}
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
		// A broker the controller fenced for a late heartbeat (3 s at
		// the test timing, reached on a loaded machine) counts as no
		// broker until its next heartbeat: the controller answers
		// INVALID_REPLICATION_FACTOR meanwhile.
		if errors.Is(err, kerr.InvalidReplicationFactor) && ctx.Err() == nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("embedded: create topic %q: %w", topic, err)
		}
		return waitTopic(ctx, cl, topic, partitions)
	}
}

// SetGroupConfigs sets dynamic configs of one consumer group (Kafka 4.0
// and later, and kfake: IncrementalAlterConfigs on the GROUP resource),
// such as consumer.session.timeout.ms, which under the consumer group
// protocol overrides the broker's group.consumer.session.timeout.ms for
// that group alone.
func SetGroupConfigs(ctx context.Context, brokers []string, group string, configs map[string]string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return fmt.Errorf("embedded: configs of group %q: %w", group, err)
	}
	defer cl.Close()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	for k, v := range configs {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Value, c.Op = k, kmsg.StringPtr(v), kmsg.IncrementalAlterConfigOpSet
		res.Configs = append(res.Configs, c)
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("embedded: configs of group %q: %w", group, err)
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			msg := ""
			if r.ErrorMessage != nil {
				msg = ": " + *r.ErrorMessage
			}
			return fmt.Errorf("embedded: configs of group %q: %w%s", group, err, msg)
		}
	}
	return nil
}

// waitTopic polls metadata until topic has partitions partitions, each with
// a leader.
func waitTopic(ctx context.Context, cl *kgo.Client, topic string, partitions int) error {
	for {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err == nil && len(resp.Topics) == 1 && resp.Topics[0].ErrorCode == 0 {
			t := resp.Topics[0]
			if len(t.Partitions) > 0 && len(t.Partitions) != partitions {
				return fmt.Errorf("embedded: topic %q has %d partitions, want %d: %w",
					topic, len(t.Partitions), partitions, ErrTopicMismatch)
			}
			ready := len(t.Partitions) == partitions
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 || p.Leader < 0 {
					ready = false
				}
			}
			if ready {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("embedded: wait for topic %q: %w (last error: %v)", topic, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
