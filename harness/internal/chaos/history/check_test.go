package history

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Shorthands for hand-made histories.
func send(key string, t Type) Op {
	return Op{Process: "client", Type: t, F: Send, Value: Value{Table: "webhooks", Key: key}}
}

func txn(t Type, keys ...string) Op {
	return Op{Process: "writer", Type: t, F: Txn, Value: Value{Table: "txn", Keys: keys}}
}

func read(table, of string, keys ...string) Op {
	return Op{Process: "verifier", Type: OK, F: Read, Value: Value{Table: table, Of: of, Keys: keys}}
}

// topicRead is a final read of partition p of a topic: keys at offsets.
func topicRead(table, of string, p int, offsets []int64, keys ...string) Op {
	return Op{Process: "verifier", Type: OK, F: Read, Value: Value{Table: table, Of: of, Partition: p, Offsets: offsets, Keys: keys}}
}

func poll(process, table string, p int, offsets []int64, keys ...string) Op {
	return Op{Process: process, Type: OK, F: Poll, Value: Value{Table: table, Partition: p, Offsets: offsets, Keys: keys}}
}

func commit(table string, p int, offset int64) Op {
	return Op{Process: "group", Type: OK, F: Commit, Value: Value{Table: table, Partition: p, Offset: offset}}
}

func checkers(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Checker+" "+f.Key)
	}
	return out
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name string
		give []Op
		opts Options
		want []string // checker and key of each finding
	}{
		{
			name: "exact",
			give: []Op{send("a", Invoke), send("a", OK), send("b", Invoke), send("b", Info), send("c", Invoke), send("c", Fail),
				read("ch", "webhooks", "a")},
		},
		{
			name: "unknown outcome read",
			give: []Op{send("b", Invoke), send("b", Info), read("ch", "webhooks", "b")},
		},
		{
			name: "acknowledged write lost",
			give: []Op{send("a", Invoke), send("a", OK), send("b", Invoke), send("b", OK), read("ch", "webhooks", "b")},
			want: []string{"lost a"},
		},
		{
			name: "lost in one store of two",
			give: []Op{send("a", Invoke), send("a", OK), read("kafka", "webhooks", "a"), read("ch", "webhooks")},
			want: []string{"lost a"},
		},
		{
			name: "duplicate",
			give: []Op{send("a", Invoke), send("a", OK), read("ch", "webhooks", "a"), read("ch", "webhooks", "a")},
			want: []string{"duplicate a"},
		},
		{
			name: "duplicate where allowed",
			give: []Op{send("a", Invoke), send("a", OK), read("kafka", "webhooks", "a", "a")},
			opts: Options{MayDuplicate: []string{"kafka"}},
		},
		{
			name: "read never written",
			give: []Op{send("a", Invoke), send("a", OK), read("ch", "webhooks", "a", "z")},
			want: []string{"unexpected-read z"},
		},
		{
			name: "another writer's rows",
			give: []Op{send("a", Invoke), send("a", OK), read("ch", "webhooks", "a", "other-1")},
			opts: Options{Foreign: func(k string) bool { return k == "other-1" }},
		},
		{
			name: "aborted read",
			give: []Op{txn(Invoke, "x", "y"), txn(Fail, "x", "y"), txn(Invoke, "z"), txn(OK, "z"),
				topicRead("t", "txn", 0, []int64{2}, "z"), poll("consumer", "t", 0, []int64{0}, "x")},
			want: []string{"aborted-read x", "inconsistent-poll x"},
		},
		{
			name: "aborted transaction's key read while another write of it is unanswered",
			give: []Op{txn(Invoke, "x"), txn(Fail, "x"), txn(Invoke, "x"), read("t", "txn", "x")},
		},
		{
			name: "aborted then committed again",
			give: []Op{txn(Invoke, "x"), txn(Fail, "x"), txn(Invoke, "x"), txn(OK, "x"), read("t", "txn", "x")},
		},
		{
			name: "committed transaction lost",
			give: []Op{txn(Invoke, "x", "y"), txn(OK, "x", "y"), read("t", "txn", "x")},
			want: []string{"lost y"},
		},
		{
			name: "polls in order",
			give: []Op{send("a", Invoke), send("a", OK), send("b", Invoke), send("b", OK), send("c", Invoke), send("c", OK),
				poll("c1", "t", 0, []int64{0, 1}, "a", "b"), poll("c1", "t", 0, []int64{3}, "c"),
				topicRead("t", "webhooks", 0, []int64{0, 1, 3}, "a", "b", "c")},
		},
		{
			name: "poll went backwards",
			give: []Op{send("a", Invoke), send("a", OK), send("b", Invoke), send("b", OK),
				poll("c1", "t", 0, []int64{0, 1}, "a", "b"), poll("c1", "t", 0, []int64{1}, "b"),
				topicRead("t", "webhooks", 0, []int64{0, 1}, "a", "b")},
			want: []string{"non-monotonic-poll "},
		},
		{
			name: "another consumer may poll again",
			give: []Op{send("a", Invoke), send("a", OK),
				poll("c1", "t", 0, []int64{0}, "a"), poll("c2", "t", 0, []int64{0}, "a"),
				topicRead("t", "webhooks", 0, []int64{0}, "a")},
		},
		{
			name: "poll skipped a record",
			give: []Op{send("a", Invoke), send("a", OK), send("b", Invoke), send("b", OK), send("c", Invoke), send("c", OK),
				poll("c1", "t", 1, []int64{0}, "a"), poll("c1", "t", 1, []int64{2}, "c"),
				topicRead("t", "webhooks", 1, []int64{0, 1, 2}, "a", "b", "c")},
			want: []string{"skipped-poll "},
		},
		{
			name: "poll saw what the log no longer holds",
			give: []Op{send("a", Invoke), send("a", OK), send("b", Invoke), send("b", Info),
				poll("c1", "t", 0, []int64{0, 1}, "a", "b"),
				topicRead("t", "webhooks", 0, []int64{0, 1}, "a", "a")},
			opts: Options{MayDuplicate: []string{"t"}},
			want: []string{"inconsistent-poll b"},
		},
		{
			name: "commit went backwards",
			give: []Op{commit("t", 0, 5), commit("t", 1, 2), commit("t", 0, 7), commit("t", 0, 6), commit("t", 0, 7)},
			want: []string{"non-monotonic-commit "},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, checkers(Check(tt.give, tt.opts)))
		})
	}
}

func TestFindingString(t *testing.T) {
	f := Finding{Checker: Lost, Table: "ch", Key: "a", Detail: "acknowledged write to webhooks not in the final read"}
	assert.Equal(t, "lost: ch a: acknowledged write to webhooks not in the final read", f.String())
	f = Finding{Checker: UnexpectedRead, Table: "t", Key: "\x00\x01", Detail: "poll by c of a key never written to txn"}
	assert.Equal(t, `unexpected-read: t "\x00\x01": poll by c of a key never written to txn`, f.String())
}

func TestRecorderRoundTrip(t *testing.T) {
	var b bytes.Buffer
	r := NewRecorder(&b)
	r.Add(send("a", Invoke))
	r.Add(send("a", OK))
	r.Add(topicRead("t", "webhooks", 2, []int64{7}, "a"))
	require.NoError(t, r.Flush())
	got, err := Decode(&b)
	require.NoError(t, err)
	want := r.Ops()
	require.Len(t, got, 3)
	assert.Equal(t, want, got)
	assert.LessOrEqual(t, got[0].Time, got[1].Time)
	assert.Empty(t, Check(got, Options{}))

	_, err = Decode(bytes.NewBufferString("{\"process\":\"a\"}\n{not json\n"))
	assert.ErrorContains(t, err, "entry 2")
}
