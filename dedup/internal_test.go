package dedup

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkTable verifies the ordered linear-probing invariants.
func checkTable(t testing.TB, tb *table) {
	t.Helper()
	count := 0
	last := -1
	for i := range tb.slots {
		s := &tb.slots[i]
		if s.exp() == 0 {
			continue
		}
		count++
		h := tb.home(s.hi())
		require.LessOrEqualf(t, h, i, "slot %d before its home %d", i, h)
		for j := h; j < i; j++ {
			require.NotZerof(t, tb.slots[j].exp(), "gap at %d between home %d and entry %d", j, h, i)
		}
		if last >= 0 {
			p := tb.slots[last].hash()
			c := 0
			if p.less(s.hash()) {
				c = -1
			} else if s.hash().less(p) {
				c = 1
			} else if tb.exact {
				c = bytes.Compare(tb.key(last), tb.key(i))
			}
			require.Equalf(t, -1, c, "entries %d and %d out of order", last, i)
		}
		last = i
	}
	require.Equal(t, tb.count, count)
}

func TestHashKeyVectors(t *testing.T) {
	// Published MurmurHash3_x64_128 outputs for seed 0 (h1, h2).
	tests := []struct {
		give string
		want hash128
	}{
		{give: "", want: hash128{}},
		{give: "hello", want: hash128{hi: 0xcbd8a7b341bd9b02, lo: 0x5b1e906a48ae1d19}},
		{give: "hello, world", want: hash128{hi: 0x342fac623a5ebc8e, lo: 0x4cdcbc079642414d}},
		{give: "19 Jan 2038 at 3:14:07 AM", want: hash128{hi: 0xb89e5988b737affc, lo: 0x664fc2950231b2cb}},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			assert.Equal(t, tt.want, hashKey([]byte(tt.give)))
		})
	}
}

// TestTableEqualHashes forces fingerprint collisions, which real keys never
// produce, to check that exact mode keeps colliding keys apart and ordered.
func TestTableEqualHashes(t *testing.T) {
	for _, exact := range []bool{false, true} {
		t.Run(fmt.Sprint("exact=", exact), func(t *testing.T) {
			tb := newTable(minHomes, overflowSlots, exact)
			h := hash128{hi: 1 << 63, lo: 7}
			keys := []string{"m", "z", "a", "q"}
			for _, k := range keys {
				i, found := tb.find(h, []byte(k))
				if found {
					require.False(t, exact, "exact mode found %q", k)
					continue
				}
				require.True(t, tb.insert(i, h, []byte(k), 100))
			}
			checkTable(t, &tb)
			if !exact {
				assert.Equal(t, 1, tb.count)
				return
			}
			assert.Equal(t, len(keys), tb.count)
			for _, k := range keys {
				_, found := tb.find(h, []byte(k))
				assert.True(t, found, k)
			}
			_, found := tb.find(h, []byte("b"))
			assert.False(t, found)

			// Remove "m" and check the rest survive the shift.
			i, found := tb.find(h, []byte("m"))
			require.True(t, found)
			tb.remove(i)
			checkTable(t, &tb)
			for _, k := range []string{"a", "q", "z"} {
				_, found := tb.find(h, []byte(k))
				assert.True(t, found, k)
			}
		})
	}
}

// TestShrink: after a burst of keys expires, the sweep gives the memory
// back, but never below Options.ExpectedKeys.
func TestShrink(t *testing.T) {
	tests := []struct {
		name      string
		expected  int
		wantHomes uint64
	}{
		{name: "default", expected: 0, wantHomes: minHomes},
		{name: "presized", expected: 50_000, wantHomes: homesFor(50_000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := New(time.Hour, Options{ExpectedKeys: tt.expected})
			require.NoError(t, err)
			at := time.Unix(1_700_000_000, 0)
			for i := range 100_000 {
				_, err := d.Observe([]byte(fmt.Sprint(i)), at)
				require.NoError(t, err)
			}
			require.Greater(t, d.t.homes, homesFor(100_000)-1)
			d.Cleanup(len(d.t.slots)) // nothing expired yet: no shrink
			require.Greater(t, d.t.homes, homesFor(100_000)-1)

			_, err = d.Observe([]byte("late"), at.Add(time.Hour))
			require.NoError(t, err)
			for range 3 {
				d.Cleanup(len(d.t.slots) + 1)
			}
			assert.Equal(t, 1, d.t.count)
			assert.Equal(t, tt.wantHomes, d.t.homes)
			checkTable(t, &d.t)
			assert.True(t, d.Contains([]byte("late")))
		})
	}
}

// TestMaxKeysFullScanAfterRestore: at MaxKeys, with the only expired entry
// far from the cursor (a restore resets the cursor to slot 0), a new key
// still frees it instead of failing on every replay; and once nothing is
// expired, a new key is refused without touching state.
func TestMaxKeysFullScanAfterRestore(t *testing.T) {
	const maxKeys = 2000
	ctx := t.Context()
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	opts := Options{MaxKeys: maxKeys, ExpectedKeys: maxKeys}
	d, err := New(time.Hour, opts)
	require.NoError(t, err)

	// An old key whose home slot lies beyond the look-ahead from slot 0.
	var old []byte
	for i := 0; ; i++ {
		k := AppendKey(nil, "old", fmt.Sprint(i))
		if d.t.home(hashKey(k).hi) > 2*fullCleanupBudget {
			old = k
			break
		}
	}
	_, err = d.Observe(old, t0)
	require.NoError(t, err)
	for i := 1; i < maxKeys; i++ {
		first, err := d.Observe(AppendKey(nil, "young", fmt.Sprint(i)), t0.Add(50*time.Minute))
		require.NoError(t, err)
		require.True(t, first)
	}
	require.Equal(t, maxKeys, d.Len())
	state, err := d.Snapshot(ctx, 1)
	require.NoError(t, err)

	restored, err := New(time.Hour, opts)
	require.NoError(t, err)
	require.NoError(t, restored.Restore(ctx, state))
	at := t0.Add(time.Hour + time.Second) // old has expired, the young ones have not
	first, err := restored.Observe([]byte("new"), at)
	require.NoError(t, err, "the expired entry must make room")
	assert.True(t, first)
	assert.Equal(t, maxKeys, restored.Len())

	before, err := restored.Snapshot(ctx, 2)
	require.NoError(t, err)
	_, err = restored.Observe([]byte("newer"), at)
	require.ErrorIs(t, err, ErrFull)
	after, err := restored.Snapshot(ctx, 3)
	require.NoError(t, err)
	assert.Equal(t, before, after, "a refused key changes nothing")
	_, err = restored.Observe([]byte("newest"), at) // answered from the recorded bound
	require.ErrorIs(t, err, ErrFull)
}
