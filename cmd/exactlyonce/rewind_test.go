package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/audit/chaudit"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestRewindFenced runs rewind against a live processor and then a stopped
// one: while the consumer group has a member it refuses (exit 3) and
// changes nothing; once the group is empty a dry run prints the plan and
// changes nothing, -yes deletes the newer checkpoints and raises every
// sink journal's epoch (the fence), and the restarted processor restores
// the older checkpoint, replays the records after it and ClickHouse still
// holds every event once (the journal's intents are replayed with their
// tokens).
func TestRewindFenced(t *testing.T) {
	addr, db := testkit.ClickHouse(t)
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "rewind")
	testkit.CreateTopic(t, brokers, topic, 1)
	ctx := context.Background()
	require.NoError(t, chaudit.CreateTable(ctx, ch.Options{Address: addr}, db, chaudit.DefaultTable))
	require.NoError(t, testkit.Exec(ctx, addr, db, `CREATE TABLE events (tenant String, at DateTime64(3, 'UTC'), id String)
		ENGINE = MergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 1000, enable_block_number_column = 1`))
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), RequiredAcks: kafka.RequireAll, Topic: topic, Transport: &kafka.Transport{}}
	defer w.Close()
	base := time.Now().Add(-time.Hour).Truncate(time.Minute)
	write := func(from, to int) {
		var msgs []kafka.Message
		for i := from; i < to; i++ {
			msgs = append(msgs, kafka.Message{Key: []byte(fmt.Sprint("org", i%4)), Value: []byte(fmt.Sprint("e", i)), Time: base.Add(time.Duration(i) * time.Second)})
		}
		require.NoError(t, w.WriteMessages(ctx, msgs...))
	}
	dir := t.TempDir()
	write(0, 100)
	p := startPipeline(t, brokers, topic, addr, db, dir, false)
	p.await(t, 100) // checkpoints 1 and 2, at offset 100
	write(100, 200)
	p.await(t, 200) // checkpoints 3 and 4, at offset 200

	list := func() []ckptEntry {
		code, out, errOut := exec(t, nil, "checkpoints", "-state-dir", dir, "-topic", topic, "-partition", "0", "-json")
		require.Equal(t, exitOK, code, errOut)
		var got map[string][]ckptEntry
		require.NoError(t, json.Unmarshal([]byte(out), &got))
		return got["0"]
	}
	before := list()
	require.Len(t, before, 3, "the store keeps three")
	require.Equal(t, uint64(4), before[0].ID)
	require.Equal(t, uint64(2), before[2].ID)
	require.Equal(t, int64(100), before[2].NextOffset)
	rewind := []string{"rewind", "-state-dir", dir, "-topic", topic, "-partition", "0", "-to", "2",
		"-brokers", strings.Join(brokers, ","), "-group", "ops"}

	// Live: refused, nothing changed.
	code, out, errOut := exec(t, nil, append(rewind, "-yes")...)
	assert.Equal(t, exitRefused, code, out)
	assert.Contains(t, errOut, "refused: the consumer group has live members")
	assert.Contains(t, errOut, "stop the processors first")
	assert.Equal(t, before, list())

	p.stop(t)
	// The member leaves the group on the way out; the broker may take a
	// moment to say so.
	require.Eventually(t, func() bool {
		code, out, errOut = exec(t, nil, rewind...)
		return code != exitRefused
	}, 30*time.Second, 200*time.Millisecond)
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "would rewind (dry run: -yes rewinds)")
	assert.Contains(t, out, "delete checkpoint 4")
	assert.Contains(t, out, "delete checkpoint 3")
	assert.Equal(t, before, list(), "a dry run writes nothing")

	epochs := func() map[string]uint64 {
		code, out, errOut := exec(t, nil, "show", "-state-dir", dir, "-topic", topic, "-partition", "0", "-json")
		require.Equal(t, exitOK, code, errOut)
		var s shown
		require.NoError(t, json.Unmarshal([]byte(out), &s))
		got := map[string]uint64{}
		for _, j := range s.Journals {
			got[j.Name] = j.Epoch
		}
		return got
	}
	fenced := epochs()
	require.Len(t, fenced, 2, "events and audit_counts")
	code, out, errOut = exec(t, nil, append(rewind, "-yes", "-json")...)
	require.Equal(t, exitOK, code, errOut)
	var did rewound
	require.NoError(t, json.Unmarshal([]byte(out), &did))
	assert.False(t, did.DryRun)
	assert.Equal(t, uint64(2), did.Target.ID)
	assert.Len(t, did.Deleted, 2)
	after := list()
	require.Len(t, after, 1)
	want := before[2]
	assert.False(t, want.Restored, "before the rewind a restart restores a newer one")
	want.Restored = true
	assert.Equal(t, want, after[0], "checkpoint 2 is the newest, the one a restart restores")
	for name, e := range epochs() {
		assert.Equal(t, fenced[name]+1, e, "%s: a processor still writing under the old epoch is fenced", name)
	}

	// Again: nothing newer to delete.
	code, out, _ = exec(t, nil, rewind...)
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "is the newest already")

	// The restarted processor replays offsets 100..199 from checkpoint 2:
	// every event is in ClickHouse once.
	p = startPipeline(t, brokers, topic, addr, db, dir, false)
	p.await(t, 100)
	p.stop(t)
	assert.Equal(t, uint64(200), testkit.Count(t, addr, db, "SELECT count() FROM events"))
	assert.Equal(t, uint64(200), testkit.Count(t, addr, db, "SELECT uniqExact(id) FROM events"))

	// Bad input, each exit 2 with nothing written: a group that never
	// read the partition (a wrong -group would make the fence vacuous),
	// an unreachable Kafka, a damaged target.
	now := list()
	require.Len(t, now, 3, "checkpoint 2 and the restarted processor's 3 and 4")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-group", "nobody"}, "group nobody never committed an offset of " + topic + "/0"},
		{[]string{"-brokers", "127.0.0.1:1", "-timeout", "2s"}, "list offsets of"},
	} {
		code, _, errOut := exec(t, nil, append(append(rewind, "-yes"), tt.args...)...)
		assert.Equal(t, exitError, code, errOut)
		assert.Contains(t, errOut, tt.want)
	}
	f := filepath.Join(dir, now[2].Name)
	b, err := os.ReadFile(f)
	require.NoError(t, err)
	b[len(b)/2] ^= 0x40
	require.NoError(t, os.WriteFile(f, b, 0o644))
	code, _, errOut = exec(t, nil, append(rewind, "-yes")...)
	assert.Equal(t, exitError, code, errOut)
	assert.Contains(t, errOut, "checkpoint 2 of "+topic+"/0 is damaged, rewind to another")
	assert.Len(t, list(), 3, "nothing deleted")
}

// TestRewindBadInput: a missing or damaged target, a group that never
// read the partition and an unreachable Kafka each get a clear error and
// exit 2, with nothing written.
func TestRewindBadInput(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "rewind")
	testkit.CreateTopic(t, brokers, topic, 1)
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no partition", []string{"-to", "1"}, "-partition and -to are required"},
		{"no target", []string{"-partition", "0", "-to", "7"}, "has no checkpoint 7"},
		{"no storage", []string{"-partition", "0", "-to", "7", "-state-dir", ""}, "-state-dir or -s3-bucket is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"rewind", "-state-dir", dir, "-topic", topic, "-brokers", strings.Join(brokers, ","), "-group", "nobody"}, tt.args...)
			code, _, errOut := exec(t, nil, args...)
			assert.Equal(t, exitError, code, errOut)
			assert.Contains(t, errOut, tt.want)
		})
	}
}
