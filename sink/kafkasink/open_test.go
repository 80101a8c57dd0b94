package kafkasink_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink/kafkasink"
)

// TestOpenRegistersInTheChain proves Open builds the sink of the chain's
// partition, registers it under the name given, and refuses, leaving the
// chain as it was, a nil chain, an empty or taken name, and New's invalid
// arguments. The sink does not connect before its chain is attached, so
// no broker is needed.
func TestOpenRegistersInTheChain(t *testing.T) {
	store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	require.NoError(t, err)
	p := checkpoint.TopicPartition{Topic: "events", Partition: 3}
	brokers := []string{"127.0.0.1:1"}
	c, err := checkpoint.NewChain(store, p)
	require.NoError(t, err)

	s, err := kafkasink.Open(c, "zz-output", brokers, "enricher", kafkasink.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	assert.Equal(t, "enricher-events-3", s.TransactionalID(), "the chain's partition")
	assert.Equal(t, map[string]checkpoint.Participant{"zz-output": s}, c.Participants())

	tests := []struct {
		name    string
		chain   *checkpoint.Chain
		give    string
		brokers []string
		wantErr error
	}{
		{name: "nil chain", give: "out", brokers: brokers, wantErr: kafkasink.ErrInvalidOptions},
		{name: "empty name", chain: c, brokers: brokers, wantErr: checkpoint.ErrInvalidOptions},
		{name: "taken name", chain: c, give: "zz-output", brokers: brokers, wantErr: checkpoint.ErrInvalidOptions},
		{name: "no brokers", chain: c, give: "out", wantErr: kafkasink.ErrInvalidOptions},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := kafkasink.Open(tt.chain, tt.give, tt.brokers, "enricher", kafkasink.Options{})
			require.ErrorIs(t, err, tt.wantErr)
			assert.Nil(t, got)
			assert.Equal(t, map[string]checkpoint.Participant{"zz-output": s}, c.Participants())
		})
	}
}
