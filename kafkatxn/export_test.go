package kafkatxn

// Sending reports whether a Produce of the partition holds its turn (is
// sending or retrying a batch), for tests that queue a second one behind it.
func Sending(p *Producer, topic string, partition int) bool {
	p.mu.Lock()
	ps := p.parts[topicPartition{topic, partition}]
	p.mu.Unlock()
	return ps != nil && len(ps.turn) == 1
}
