package kafkasource

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
)

// DefaultTopicPollInterval is how often Run looks for a missing topic and
// for new partitions of its topics.
const DefaultTopicPollInterval = 5 * time.Second

// ErrTopicNotFound is matched by *TopicNotFoundError.
var ErrTopicNotFound = errors.New("kafkasource: topic not found")

// TopicNotFoundError is returned by Run when a subscribed topic does not
// exist and Options.MissingTopic is MissingTopicFail.
type TopicNotFoundError struct {
	Topic string
	Err   error // what the broker answered
}

func (e *TopicNotFoundError) Error() string {
	return fmt.Sprintf("kafkasource: topic %q not found: %v", e.Topic, e.Err)
}

// Is matches ErrTopicNotFound.
func (e *TopicNotFoundError) Is(target error) bool { return target == ErrTopicNotFound }

func (e *TopicNotFoundError) Unwrap() error { return e.Err }

// MissingTopic says what Run does when a subscribed topic does not exist.
type MissingTopic int

const (
	// MissingTopicWait makes Run wait, logging at Warn (again every
	// minute), until every topic exists, checking every
	// Options.TopicPollInterval; then it joins the group. This is the
	// default: a processor deployed before the producer that creates its
	// topic starts on its own once the topic appears.
	MissingTopicWait MissingTopic = iota
	// MissingTopicFail makes Run return a *TopicNotFoundError at once.
	MissingTopicFail
)

// missingLogEvery is how often a wait for a missing topic logs again.
const missingLogEvery = time.Minute

// awaitTopics returns once every subscribed topic exists with at least one
// partition, or the error that ends Run. A TopicRegex names no topic to
// wait for: the coordinator assigns the matching topics as they appear,
// and a member of a regex that matches none yet owns nothing until one
// does.
func (s *Source) awaitTopics(ctx context.Context) error {
	if s.topicRegex != nil {
		return nil
	}
	var since, logged time.Time
	for {
		missing, err := s.missingTopic(ctx)
		if missing == "" {
			if !since.IsZero() {
				s.log.Info("kafkasource: topics exist now; joining the group", "waited", time.Since(since).Round(time.Millisecond))
			}
			return nil
		}
		if s.opts.MissingTopic == MissingTopicFail {
			return &TopicNotFoundError{Topic: missing, Err: err}
		}
		now := time.Now()
		if since.IsZero() {
			since = now
		}
		if now.Sub(logged) >= missingLogEvery {
			logged = now
			s.log.Warn("kafkasource: waiting for a subscribed topic to be created", "topic", missing,
				"waited", now.Sub(since).Round(time.Second), "err", err)
		}
		t := time.NewTimer(s.opts.TopicPollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// missingTopic returns the first subscribed topic that does not exist yet,
// with the broker's answer, or "" when all exist. A broker that cannot be
// reached counts as all topics existing: joining the group then reports and
// rides out the connection problem as before.
//
// It asks with a Metadata request that does not create topics. kafka-go's
// Conn.ReadPartitions sends allow_auto_topic_creation=true, and a broker
// with auto.create.topics.enable (Kafka's default; kfake has it off) then
// creates the topic it was asked about, with num.partitions partitions:
// the check itself made a missing topic exist, with the wrong partition
// count (TestMissingTopicWaitThenNewPartition on Apache Kafka).
func (s *Source) missingTopic(ctx context.Context) (string, error) {
	// A fresh transport each time: kafka-go's Transport answers Metadata
	// from its cached view of the cluster, which would not see a topic
	// created since it was loaded.
	tr := dialerTransport(s.opts.Dialer)
	defer tr.CloseIdleConnections()
	cl := &kafka.Client{Addr: kafka.TCP(s.group.Brokers...), Transport: tr, Timeout: 10 * time.Second}
	meta, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: s.group.Topics})
	if err != nil {
		s.log.Debug("kafkasource: topic check failed", "err", err)
		return "", nil
	}
	// The counts a running Source compares a generation's with (group.go).
	s.notePartitions(ctx, meta)
	for _, topic := range s.group.Topics {
		var found *kafka.Topic
		for i := range meta.Topics {
			if meta.Topics[i].Name == topic {
				found = &meta.Topics[i]
			}
		}
		switch {
		case found == nil:
			return topic, kafka.UnknownTopicOrPartition
		case errors.Is(found.Error, kafka.UnknownTopicOrPartition), errors.Is(found.Error, kafka.LeaderNotAvailable):
			return topic, found.Error
		case found.Error != nil:
			s.log.Debug("kafkasource: topic check failed", "topic", topic, "err", found.Error)
			return "", nil
		case len(found.Partitions) == 0:
			return topic, kafka.UnknownTopicOrPartition
		}
	}
	return "", nil
}

// dialerTransport returns a kafka-go Transport that connects as d does:
// through its DialFunc or a net.Dialer with its timeouts, its Resolver, TLS
// and SASL mechanism, with its client id.
func dialerTransport(d *kafka.Dialer) *kafka.Transport {
	return &kafka.Transport{
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if d.Resolver != nil {
				host, port, err := net.SplitHostPort(addr)
				if err != nil {
					return nil, err
				}
				addrs, err := d.Resolver.LookupHost(ctx, host)
				if err != nil {
					return nil, err
				}
				if len(addrs) > 0 {
					addr = addrs[0]
					if _, _, err := net.SplitHostPort(addr); err != nil {
						addr = net.JoinHostPort(addr, port)
					}
				}
			}
			if d.DialFunc != nil {
				return d.DialFunc(ctx, network, addr)
			}
			nd := net.Dialer{Timeout: d.Timeout, Deadline: d.Deadline, LocalAddr: d.LocalAddr,
				FallbackDelay: d.FallbackDelay, KeepAlive: d.KeepAlive}
			return nd.DialContext(ctx, network, addr)
		},
		DialTimeout: d.Timeout,
		ClientID:    d.ClientID,
		TLS:         d.TLS,
		SASL:        d.SASLMechanism,
	}
}

// SessionTimeoutError is returned by Run when the broker refuses
// Options.SessionTimeout (INVALID_SESSION_TIMEOUT): it lies outside the
// broker's group.min.session.timeout.ms and group.max.session.timeout.ms.
// It matches kafka.InvalidSessionTimeout.
type SessionTimeoutError struct {
	SessionTimeout time.Duration // Options.SessionTimeout
	// Min and Max are the broker's bounds, as it reported them; zero
	// when it could not be asked (DescribeConfigs refused or failed).
	Min, Max time.Duration
	Err      error // what the broker answered
}

func (e *SessionTimeoutError) Error() string {
	bounds := "group.min.session.timeout.ms and group.max.session.timeout.ms (Kafka's defaults: 6s and 30m0s)"
	if e.Min > 0 && e.Max > 0 {
		bounds = fmt.Sprintf("group.min.session.timeout.ms %v and group.max.session.timeout.ms %v", e.Min, e.Max)
	}
	return fmt.Sprintf("kafkasource: the broker refused Options.SessionTimeout %v: set it within the broker's %s, or change those broker configs: %v",
		e.SessionTimeout, bounds, e.Err)
}

func (e *SessionTimeoutError) Unwrap() error { return e.Err }

// sessionTimeoutError describes err, the broker's INVALID_SESSION_TIMEOUT,
// with the bounds the broker reports (DescribeConfigs of the first broker
// the metadata names), so the error says what to set.
func (s *Source) sessionTimeoutError(ctx context.Context, err error) error {
	e := &SessionTimeoutError{SessionTimeout: s.opts.SessionTimeout, Err: err}
	tr := dialerTransport(s.opts.Dialer)
	defer tr.CloseIdleConnections()
	cl := &kafka.Client{Addr: kafka.TCP(s.group.Brokers...), Transport: tr, Timeout: 10 * time.Second}
	meta, merr := cl.Metadata(ctx, &kafka.MetadataRequest{})
	if merr != nil || len(meta.Brokers) == 0 {
		return e
	}
	const minName, maxName = "group.min.session.timeout.ms", "group.max.session.timeout.ms"
	resp, derr := cl.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{
		ResourceType: kafka.ResourceTypeBroker, ResourceName: strconv.Itoa(meta.Brokers[0].ID),
		ConfigNames: []string{minName, maxName},
	}}})
	if derr != nil || len(resp.Resources) != 1 || resp.Resources[0].Error != nil {
		return e
	}
	for _, c := range resp.Resources[0].ConfigEntries {
		ms, perr := strconv.ParseInt(c.ConfigValue, 10, 64)
		if perr != nil {
			continue
		}
		switch c.ConfigName {
		case minName:
			e.Min = time.Duration(ms) * time.Millisecond
		case maxName:
			e.Max = time.Duration(ms) * time.Millisecond
		}
	}
	return e
}
