package demo

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/embedded/kafkafault"
)

// Schedule is what a FaultPlan strikes during Events deliveries: Kills
// processor kills spread over them, and ClickHouse and the Kafka broker
// killed and restarted once each (if embedded).
type Schedule struct {
	Events, Kills             int
	KillClickHouse, KillKafka bool
	// LostAckEvery arms a lost acknowledgement at the wire (a produce the
	// broker writes and never answers, kafkafault.ProduceLostAck) before
	// every LostAckEvery-th delivery, on an embedded broker. 0: none.
	LostAckEvery int
}

// FaultPlan kills processors, ClickHouse and the Kafka broker at fixed
// fractions of the deliveries: call At before each delivery.
// A server it kills is restarted by a goroutine the plan owns: stop cancels
// a restart still waiting and waits for one under way, so no server is
// started again after the demo stopped it.
type FaultPlan struct {
	rng            *rand.Rand
	processorKills map[int]bool
	clickhouseKill int
	kafkaKill      int
	lostAckEvery   int

	// Lost acks armed, and hit before the broker restarted (its faults and
	// their counts die with it).
	lostAcksArmed, lostAcksHitBefore int

	restarts sync.WaitGroup
	stopped  chan struct{}
	stopOnce sync.Once
}

// NewFaultPlan draws the kills of s from rng, which only the caller's
// goroutine may use.
func NewFaultPlan(s Schedule, rng *rand.Rand) *FaultPlan {
	cfg := s
	f := &FaultPlan{rng: rng, processorKills: map[int]bool{}, clickhouseKill: -1, kafkaKill: -1,
		lostAckEvery: s.LostAckEvery, stopped: make(chan struct{})}
	for k := range cfg.Kills {
		// Spread the kills over the deliveries, each at a random point of its slice.
		slice := cfg.Events / (cfg.Kills + 1)
		f.processorKills[(k+1)*slice-slice/2+rng.IntN(max(slice, 1))] = true
	}
	if cfg.KillClickHouse {
		f.clickhouseKill = cfg.Events * 3 / 5
	}
	if cfg.KillKafka {
		f.kafkaKill = cfg.Events * 2 / 5
	}
	return f
}

// At strikes what the plan holds for delivery i: a server killed now is
// restarted by a goroutine the plan owns.
func (f *FaultPlan) At(ctx context.Context, i int, sup *Supervisor, srv *Servers, say func(string, ...any)) {
	chServer, kafkaServer := srv.ClickHouse, srv.Kafka
	if f.lostAckEvery > 0 && srv.Kfake != nil && i%f.lostAckEvery == f.lostAckEvery/2 {
		// Refused while the broker is down (ErrStopped): then none is armed.
		if err := srv.Kfake.InjectFault(ctx, kafkafault.Fault{Kind: kafkafault.ProduceLostAck}); err == nil {
			f.lostAcksArmed++
		}
	}
	if i == f.kafkaKill && kafkaServer != nil {
		if srv.Kfake != nil {
			if stats, err := srv.Kfake.FaultStats(ctx); err == nil {
				f.lostAcksHitBefore += stats[kafkafault.ProduceLostAck].Hits
			}
		}
		say("fault: Kafka broker killed with SIGKILL; restarting it in 1s on the same log directory")
		if err := kafkaServer.Kill(); err != nil {
			say("kill Kafka: %v", err)
		}
		f.restarts.Go(func() {
			if !f.sleep(ctx, time.Second) {
				return
			}
			if err := kafkaServer.Start(ctx); err != nil {
				say("restart Kafka: %v", err)
				return
			}
			say("Kafka is back")
		})
	}
	if f.processorKills[i] {
		sup.Kill(ctx, f.rng, say)
	}
	if i == f.clickhouseKill && chServer != nil {
		say("fault: ClickHouse killed with SIGKILL; restarting it in 2s on the same data directory")
		if err := chServer.Kill(); err != nil {
			say("kill ClickHouse: %v", err)
		}
		f.restarts.Go(func() {
			if !f.sleep(ctx, 2*time.Second) {
				return
			}
			if BringUp(ctx, chServer, func(d time.Duration) bool { return f.sleep(ctx, d) }, say) {
				say("ClickHouse is back")
			}
		})
	}
}

// sleep waits for d and reports whether the plan is still running then.
func (f *FaultPlan) sleep(ctx context.Context, d time.Duration) bool {
	return Sleep(ctx, f.stopped, d)
}

// Sleep waits for d and reports whether neither ctx ended nor stop closed
// meanwhile (a nil stop never closes).
func Sleep(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-stop:
	}
	return false
}

// Stop cancels the restarts still waiting and waits for those under way. It
// is safe to call more than once.
func (f *FaultPlan) Stop() {
	f.stopOnce.Do(func() { close(f.stopped) })
	f.restarts.Wait()
}

// Finish kills a processor once more while it catches up, after the last
// delivery.
func (f *FaultPlan) Finish(ctx context.Context, sup *Supervisor, say func(string, ...any)) {
	if len(f.processorKills) > 0 {
		time.Sleep(300 * time.Millisecond)
		sup.Kill(ctx, f.rng, say)
	}
}

// LostAcks returns how many lost acknowledgements the plan armed at the
// wire and how many hit a produce (a fault armed shortly before the broker
// was killed may have hit nothing).
func (f *FaultPlan) LostAcks(ctx context.Context, srv *Servers) (armed, hit int) {
	hit = f.lostAcksHitBefore
	if srv.Kfake != nil {
		if stats, err := srv.Kfake.FaultStats(ctx); err == nil {
			hit += stats[kafkafault.ProduceLostAck].Hits
		}
	}
	return f.lostAcksArmed, hit
}
