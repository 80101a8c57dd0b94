package kafkasource

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/internal/kafkawire"
)

// runClassic is Run under ProtocolClassic: kafka-go's ConsumerGroup, a
// chain per assigned partition for the length of a generation.
func (s *Source) runClassic(ctx context.Context) error {
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	cfg := kafka.ConsumerGroupConfig{
		ID: s.group.ID, Brokers: s.group.Brokers, Topics: s.group.Topics,
		// kafka-go's subscriptions, made parseable: the group can move
		// to and from the consumer protocol online.
		Dialer:         kafkawire.ClassicGroupDialer(s.opts.Dialer),
		SessionTimeout: s.opts.SessionTimeout, RebalanceTimeout: s.opts.RebalanceTimeout,
		HeartbeatInterval: s.opts.HeartbeatInterval,
		JoinGroupBackoff:  s.opts.HeartbeatInterval,
		// A topic that gains partitions ends the generation, and the next
		// one assigns the new partitions.
		WatchPartitionChanges:  true,
		PartitionWatchInterval: s.opts.TopicPollInterval,
		ErrorLogger: kafka.LoggerFunc(func(f string, a ...any) {
			s.log.Warn("kafkasource: kafka-go: " + fmt.Sprintf(f, a...))
		}),
	}
	cg, err := kafka.NewConsumerGroup(cfg)
	if err != nil {
		return fmt.Errorf("kafkasource: %w", err)
	}

	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		chainErr error
	)
	wg.Go(func() { _ = s.coord.Run(runCtx) })
	var nextErr error
	var failures groupFailures
	for {
		gen, err := cg.Next(runCtx)
		if err != nil {
			if runCtx.Err() != nil {
				break
			}
			// kafka-go reports every failed join or sync through Next and
			// then tries again itself, after a backoff. A rebalance that
			// another member started, or a coordinator that moved, is routine.
			if failures.retry(err) {
				s.log.Warn("kafkasource: consumer group: retrying", "err", err, "failures", failures.n)
				continue
			}
			nextErr = fmt.Errorf("kafkasource: consumer group: %w", err)
			if errors.Is(err, kafka.InvalidSessionTimeout) {
				nextErr = s.sessionTimeoutError(ctx, err)
			}
			break
		}
		failures = groupFailures{}
		s.generationStarted(gen, &wg)
		for topic, as := range gen.Assignments {
			for _, a := range as {
				p := checkpoint.TopicPartition{Topic: topic, Partition: a.ID}
				wg.Add(1)
				gen.Start(func(gctx context.Context) {
					defer wg.Done()
					if err := s.superviseChain(runCtx, gctx, s.classicOwnership(gen), p); err != nil {
						errOnce.Do(func() { chainErr = err })
						cancel(err)
					}
				})
			}
		}
	}
	// Leaving the group is best effort: the session timeout covers it.
	_ = cg.Close()
	cancel(nil)
	wg.Wait()
	if chainErr != nil {
		return chainErr
	}
	return nextErr
}
