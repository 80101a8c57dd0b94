package kafkatxn

import "time"

// Sending reports whether a Produce of the partition holds its turn (is
// sending or retrying a batch), for tests that queue a second one behind it.
func Sending(p *Producer, topic string, partition int) bool {
	p.mu.Lock()
	ps := p.parts[topicPartition{topic, partition}]
	p.mu.Unlock()
	return ps != nil && len(ps.turn) == 1
}

// SetVersionRecheck sets how often p reads transaction.version again, so
// that a test sees a level change at the next transaction start.
func SetVersionRecheck(p *TxProducer, d time.Duration) {
	p.mu.Lock()
	p.versionEvery = d
	p.mu.Unlock()
}
