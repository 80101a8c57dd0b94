package kafkasource_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
)

// Every refused construction wraps ErrInvalidOptions; nothing connects.
func TestNewInvalidOptions(t *testing.T) {
	store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = coord.Close() })
	newProc := func(context.Context, checkpoint.TopicPartition) (*kafkasource.Processor, error) { return nil, nil }
	group := kafkasource.Group{Brokers: []string{"127.0.0.1:1"}, ID: "g", Topics: []string{"t"}}
	tests := []struct {
		name  string
		group func(*kafkasource.Group)
		opts  kafkasource.Options
		coord *checkpoint.Coordinator
		proc  kafkasource.ProcessorFunc
	}{
		{name: "no brokers", group: func(g *kafkasource.Group) { g.Brokers = nil }, coord: coord, proc: newProc},
		{name: "no group ID", group: func(g *kafkasource.Group) { g.ID = "" }, coord: coord, proc: newProc},
		{name: "no topics", group: func(g *kafkasource.Group) { g.Topics = nil }, coord: coord, proc: newProc},
		{name: "Topics and TopicRegex", group: func(g *kafkasource.Group) {
			g.TopicRegex, g.Protocol = "t.*", kafkasource.ProtocolConsumer
		}, coord: coord, proc: newProc},
		{name: "TopicRegex under ProtocolClassic", group: func(g *kafkasource.Group) {
			g.Topics, g.TopicRegex, g.Protocol = nil, "t.*", kafkasource.ProtocolClassic
		}, coord: coord, proc: newProc},
		{name: "invalid TopicRegex", group: func(g *kafkasource.Group) {
			g.Topics, g.TopicRegex, g.Protocol = nil, "t[", kafkasource.ProtocolConsumer
		}, coord: coord, proc: newProc},
		{name: "InstanceID under ProtocolClassic", group: func(g *kafkasource.Group) { g.InstanceID, g.Protocol = "a", kafkasource.ProtocolClassic }, coord: coord, proc: newProc},
		{name: "InstanceID with a space", group: func(g *kafkasource.Group) {
			g.InstanceID, g.Protocol = "a b", kafkasource.ProtocolConsumer
		}, coord: coord, proc: newProc},
		{name: "nil coordinator", proc: newProc},
		{name: "nil ProcessorFunc", coord: coord},
		{name: "unknown OutOfRange", opts: kafkasource.Options{OutOfRange: 99}, coord: coord, proc: newProc},
		{name: "unknown StartOffset", opts: kafkasource.Options{StartOffset: 99}, coord: coord, proc: newProc},
		{name: "negative buffer", opts: kafkasource.Options{Buffer: -1}, coord: coord, proc: newProc},
		{name: "negative restart backoff", opts: kafkasource.Options{Restart: kafkasource.Restart{InitialBackoff: -1}}, coord: coord, proc: newProc},
		{name: "restart jitter of 1", opts: kafkasource.Options{Restart: kafkasource.Restart{Jitter: 1}}, coord: coord, proc: newProc},
	}
	for _, tt := range tests {
		g := group
		if tt.group != nil {
			tt.group(&g)
		}
		_, err := kafkasource.New(g, tt.coord, tt.proc, tt.opts)
		assert.ErrorIs(t, err, kafkasource.ErrInvalidOptions, tt.name)
	}
	_, err = kafkasource.New(group, coord, newProc, kafkasource.Options{})
	assert.NoError(t, err, "the zero Options are valid")
	_, err = kafkasource.New(kafkasource.Group{Brokers: group.Brokers, ID: "g", TopicRegex: "t-.*", InstanceID: "pod-0",
		Protocol: kafkasource.ProtocolConsumer}, coord, newProc, kafkasource.Options{})
	assert.NoError(t, err, "a static member of a regex subscription under ProtocolConsumer")
}
