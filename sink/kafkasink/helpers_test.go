package kafkasink_test

import (
	"testing"

	"github.com/exactlyonce/exactlyonce/testkit"
)

// readCommitted reads topic's partitions to their end, read_committed
// (testkit.ReadTopic), and counts the values.
func readCommitted(t testing.TB, brokers []string, topic string, partitions int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for p := range partitions {
		for _, m := range testkit.ReadTopic(t, brokers, topic, p) {
			got[string(m.Value)]++
		}
	}
	return got
}
