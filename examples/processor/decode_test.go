package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
)

// recordFrom builds a record from fuzz input: the key, then headers as
// "name=value" lines; a name may be any of kafkapub's or something else.
func recordFrom(key, headers []byte, ms int64) kafka.Message {
	m := kafka.Message{Key: key, Time: time.UnixMilli(ms), Offset: 42, Partition: 3}
	for line := range bytes.SplitSeq(headers, []byte("\n")) {
		k, v, _ := bytes.Cut(line, []byte("="))
		m.Headers = append(m.Headers, kafka.Header{Key: string(k), Value: v})
	}
	return m
}

// oracle decodes as the chain did before eventDecoder: kafkapub's own
// ReadMetadata and a string of the key.
func oracle(m kafka.Message) (event, error) {
	md, err := kafkapub.ReadMetadata(m)
	if err != nil {
		return event{}, err
	}
	return event{Tenant: string(m.Key), Source: md.Source, ID: md.EventID, Type: md.EventType, At: m.Time.UTC()}, nil
}

// FuzzDecodeEvent: eventDecoder gives ReadMetadata's answer for any
// headers, the same event or an error wrapping kafkapub.ErrNoMetadata
// whenever ReadMetadata fails, and never panics. One decoder decodes every
// input, so its interned strings are checked across inputs too.
func FuzzDecodeEvent(f *testing.F) {
	f.Add([]byte("org-1"), []byte("event-id=abc\nsource=github\nevent-type=push\nhook-id=1"), int64(1764576000000))
	f.Add([]byte(""), []byte("source=jira\nevent-type=jira:issue_updated"), int64(0))
	f.Add([]byte("org-2"), []byte("event-id=\nsource=github"), int64(1))
	f.Add([]byte("org-2"), []byte("event-id=a\nevent-id=b\nretry=2"), int64(-5))
	f.Add([]byte("org-3"), []byte("event-id=a\nretry=x"), int64(7))
	f.Add([]byte("org-3"), []byte("event-id=a\nretry=-1"), int64(7))
	f.Add([]byte("org-3"), []byte("event-id=a\nretry=+3\nretry="), int64(7))
	f.Add([]byte("org-3"), []byte("event-id=a\nretry=99999999999999999999"), int64(7))
	var d eventDecoder
	f.Fuzz(func(t *testing.T, key, headers []byte, ms int64) {
		m := recordFrom(key, headers, ms)
		want, werr := oracle(m)
		var got event
		err := d.decode(&m, &got)
		if werr != nil {
			require.Error(t, err, "ReadMetadata: %v", werr)
			assert.ErrorIs(t, err, kafkapub.ErrNoMetadata)
			assert.Equal(t, werr.Error(), err.Error())
			return
		}
		require.NoError(t, err)
		assert.Equal(t, want, got)
	})
}

// TestDecodeEventAllocations: a record with a tenant, source and type seen
// before costs one allocation, the event id's string.
func TestDecodeEventAllocations(t *testing.T) {
	m := recordFrom([]byte("org-0042"), []byte("event-id=9f1c2d3e-aaaa-4bbb-accc-123456789abc\nsource=github\nevent-type=pull_request\nhook-id=30991"), 1764576000000)
	var d eventDecoder
	var ev event
	require.NoError(t, d.decode(&m, &ev))
	allocs := testing.AllocsPerRun(1000, func() {
		if err := d.decode(&m, &ev); err != nil {
			t.Fatal(err)
		}
	})
	assert.Equal(t, 1.0, allocs)
}

// BenchmarkDecodeEvent compares eventDecoder with the decoding it replaced
// (ReadMetadata and a string of the key).
func BenchmarkDecodeEvent(b *testing.B) {
	m := recordFrom([]byte("org-0042"), []byte("event-id=9f1c2d3e-aaaa-4bbb-accc-123456789abc\nsource=github\nevent-type=pull_request\nhook-id=30991"), 1764576000000)
	b.Run("ReadMetadata", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := oracle(m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("eventDecoder", func(b *testing.B) {
		b.ReportAllocs()
		var d eventDecoder
		var ev event
		for b.Loop() {
			if err := d.decode(&m, &ev); err != nil {
				b.Fatal(err)
			}
		}
	})
}
