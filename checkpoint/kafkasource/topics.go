package kafkasource

import (
	"context"
	"errors"
	"fmt"
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
// partition, or the error that ends Run.
func (s *Source) awaitTopics(ctx context.Context) error {
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
func (s *Source) missingTopic(ctx context.Context) (string, error) {
	var conn *kafka.Conn
	var err error
	for _, b := range s.group.Brokers {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		conn, err = s.opts.Dialer.DialContext(dctx, "tcp", b)
		cancel()
		if err == nil {
			break
		}
	}
	if conn == nil {
		s.log.Debug("kafkasource: no broker answered the topic check", "err", err)
		return "", nil
	}
	defer conn.Close()
	for _, topic := range s.group.Topics {
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		parts, err := conn.ReadPartitions(topic)
		switch {
		case errors.Is(err, kafka.UnknownTopicOrPartition), errors.Is(err, kafka.LeaderNotAvailable):
			return topic, err
		case err != nil:
			s.log.Debug("kafkasource: topic check failed", "topic", topic, "err", err)
			return "", nil
		case len(parts) == 0:
			return topic, kafka.UnknownTopicOrPartition
		}
	}
	return "", nil
}
