package kafkapub

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/segmentio/kafka-go"
)

// warnDurability logs, through opts.Logger, a topic whose settings make
// acks=all weaker than it sounds, or a check that could not be made. It is
// bounded by opts.WriteTimeout even when ctx is not: a broker that accepts
// connections but never answers must not hang start-up.
func warnDurability(ctx context.Context, brokers []string, transport *kafka.Transport, topic string, opts Options) {
	cctx, cancel := context.WithTimeout(ctx, opts.WriteTimeout)
	d, err := checkDurability(cctx, brokers, transport, topic)
	cancel()
	switch {
	case err != nil:
		opts.Logger.LogAttrs(ctx, slog.LevelWarn, "kafkapub: could not check the topic's durability settings",
			slog.String("topic", topic), slog.Any("error", err))
	case d.Weak():
		opts.Logger.LogAttrs(ctx, slog.LevelWarn, "kafkapub: acks=all is weaker than it sounds: "+d.Reason(),
			slog.String("topic", topic),
			slog.Int("min_insync_replicas", d.MinInSyncReplicas),
			slog.Int("replication_factor", d.ReplicationFactor))
	}
}

// Durability is what a topic's configuration makes of acks=all.
type Durability struct {
	Topic string
	// MinInSyncReplicas is the topic's min.insync.replicas: how many
	// replicas must hold a write before acks=all acknowledges it.
	MinInSyncReplicas int
	// ReplicationFactor is the number of replicas of the topic's
	// partitions (the smallest, if they differ).
	ReplicationFactor int
}

// Weak reports whether an acknowledged write can be lost with a single
// broker: with min.insync.replicas 1, acks=all is acks=1 in disguise, since
// the leader alone may acknowledge when its followers fall behind.
func (d Durability) Weak() bool {
	return d.MinInSyncReplicas <= 1 || d.ReplicationFactor <= 1
}

// Reason explains Weak in one sentence, or returns "" when it is false.
func (d Durability) Reason() string {
	switch {
	case d.ReplicationFactor <= 1:
		return "the topic has a single replica, so one broker's disk holds every acknowledged event"
	case d.MinInSyncReplicas <= 1:
		return "min.insync.replicas is " + strconv.Itoa(d.MinInSyncReplicas) +
			", so the leader alone may acknowledge a write (acks=1 in disguise); set it to " +
			strconv.Itoa(min(2, d.ReplicationFactor)) + " or more"
	default:
		return ""
	}
}

// CheckDurability reads the topic's min.insync.replicas (DescribeConfigs)
// and replication factor (Metadata).
func (p *Publisher) CheckDurability(ctx context.Context) (Durability, error) {
	return checkDurability(ctx, p.brokers, p.transport, p.topic)
}

func checkDurability(ctx context.Context, brokers []string, transport *kafka.Transport, topic string) (Durability, error) {
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: transport}
	d := Durability{Topic: topic}

	md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return d, fmt.Errorf("kafkapub: metadata of %s: %w", topic, err)
	}
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			return d, fmt.Errorf("kafkapub: metadata of %s: %w", topic, t.Error)
		}
		for _, part := range t.Partitions {
			if n := len(part.Replicas); d.ReplicationFactor == 0 || n < d.ReplicationFactor {
				d.ReplicationFactor = n
			}
		}
	}
	if d.ReplicationFactor == 0 {
		return d, fmt.Errorf("kafkapub: topic %s has no partitions", topic)
	}

	dc, err := c.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{
		Resources: []kafka.DescribeConfigRequestResource{{
			ResourceType: kafka.ResourceTypeTopic,
			ResourceName: topic,
			ConfigNames:  []string{"min.insync.replicas"},
		}},
	})
	if err != nil {
		return d, fmt.Errorf("kafkapub: describe configs of %s: %w", topic, err)
	}
	for _, r := range dc.Resources {
		if r.Error != nil {
			return d, fmt.Errorf("kafkapub: describe configs of %s: %w", topic, r.Error)
		}
		for _, e := range r.ConfigEntries {
			if e.ConfigName != "min.insync.replicas" {
				continue
			}
			n, err := strconv.Atoi(e.ConfigValue)
			if err != nil {
				return d, fmt.Errorf("kafkapub: min.insync.replicas of %s is %q", topic, e.ConfigValue)
			}
			d.MinInSyncReplicas = n
		}
	}
	if d.MinInSyncReplicas == 0 {
		return d, fmt.Errorf("kafkapub: topic %s reports no min.insync.replicas", topic)
	}
	return d, nil
}
