package checkpoint_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// Every refused construction wraps ErrInvalidOptions, so a caller matches
// one sentinel whatever the option.
func TestInvalidOptions(t *testing.T) {
	mem := checkpoint.NewMemoryStorage()
	tests := []struct {
		name string
		give func() error
	}{
		{"nil storage", func() error { _, err := checkpoint.NewStore(nil, checkpoint.StoreOptions{}); return err }},
		{"negative Keep", func() error {
			_, err := checkpoint.NewStore(mem, checkpoint.StoreOptions{Keep: -1})
			return err
		}},
		{"bad prefix", func() error {
			_, err := checkpoint.NewStore(mem, checkpoint.StoreOptions{Prefix: "../x"})
			return err
		}},
		{"nil store", func() error { _, err := checkpoint.NewCoordinator(nil, checkpoint.Options{}); return err }},
	}
	for _, tt := range tests {
		assert.ErrorIs(t, tt.give(), checkpoint.ErrInvalidOptions, tt.name)
	}
	store, err := checkpoint.NewStore(mem, checkpoint.StoreOptions{})
	require.NoError(t, err, "the zero StoreOptions are valid")
	_, err = checkpoint.NewCoordinator(store, checkpoint.Options{})
	assert.NoError(t, err, "the zero Options are valid")
}
