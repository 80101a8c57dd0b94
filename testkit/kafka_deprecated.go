package testkit

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// The names before v0.1.0, which did not say what they start: StartKafka
// started kfake, StartKafkaBroker Apache Kafka and StartKafkaProcess kfake
// in a process of its own.

// KafkaBroker is ApacheKafka.
//
// Deprecated: use ApacheKafka.
type KafkaBroker = ApacheKafka

// KafkaBrokerOptions is ApacheKafkaOptions.
//
// Deprecated: use ApacheKafkaOptions.
type KafkaBrokerOptions = ApacheKafkaOptions

// StartKafkaBroker is StartApacheKafka.
//
// Deprecated: use StartApacheKafka.
func StartKafkaBroker(t testing.TB, opts ...ApacheKafkaOptions) *ApacheKafka {
	t.Helper()
	return StartApacheKafka(t, opts...)
}

// KafkaCluster is Kfake.
//
// Deprecated: use Kfake.
type KafkaCluster = Kfake

// StartKafka is StartKfake.
//
// Deprecated: use StartKfake.
func StartKafka(t testing.TB, extra ...kfake.Opt) *Kfake {
	t.Helper()
	return StartKfake(t, extra...)
}

// KafkaServer is KfakeProcess.
//
// Deprecated: use KfakeProcess.
type KafkaServer = KfakeProcess

// KafkaProcessOptions is KfakeProcessOptions.
//
// Deprecated: use KfakeProcessOptions.
type KafkaProcessOptions = KfakeProcessOptions

// StartKafkaProcess is StartKfakeProcess.
//
// Deprecated: use StartKfakeProcess.
func StartKafkaProcess(t testing.TB, opts ...KfakeProcessOptions) *KfakeProcess {
	t.Helper()
	return StartKfakeProcess(t, opts...)
}
