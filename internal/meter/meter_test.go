package meter_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/exactlyonce/exactlyonce/internal/meter"
)

func TestConventionsEnforced(t *testing.T) {
	tests := []struct {
		name, metric, unit, desc string
	}{
		{"no prefix", "dedup.dropped", "{event}", "d"},
		{"no unit", "exactlyonce.x", "", "d"},
		{"no description", "exactlyonce.x", "{event}", ""},
	}
	for _, tt := range tests {
		m := meter.New(nil, "test")
		c := m.Counter(tt.metric, tt.unit, tt.desc)
		require.NotNil(t, c, tt.name)
		c.Add(context.Background(), 1) // a refused instrument is still usable
		assert.Error(t, m.Err(), tt.name)
	}
}

func TestInstrumentsReachTheProvider(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	m := meter.New(mp, "test")
	m.Counter("exactlyonce.test.events", "{event}", "Events.").Add(context.Background(), 2)
	require.NoError(t, m.Err())
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	require.Len(t, rm.ScopeMetrics, 1)
	assert.Equal(t, "github.com/exactlyonce/exactlyonce/test", rm.ScopeMetrics[0].Scope.Name)
	got := rm.ScopeMetrics[0].Metrics[0]
	assert.Equal(t, "exactlyonce.test.events", got.Name)
	assert.Equal(t, "{event}", got.Unit)
	assert.Equal(t, int64(2), got.Data.(metricdata.Sum[int64]).DataPoints[0].Value)
}

func TestPartitionAttributes(t *testing.T) {
	attrs := meter.Partition("events", 7)
	assert.Equal(t, "messaging.destination.name", string(attrs[0].Key))
	assert.Equal(t, "events", attrs[0].Value.AsString())
	assert.Equal(t, "messaging.destination.partition.id", string(attrs[1].Key))
	assert.Equal(t, "7", attrs[1].Value.AsString())
}
