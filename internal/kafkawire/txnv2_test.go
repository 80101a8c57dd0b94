package kafkawire

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	require.NoError(t, err)
	return b
}

// TestTxnV2RequestBytes pins the bodies of EndTxn v5 and Produce v12, field
// by field as Kafka's EndTxnRequest.json and ProduceRequest.json lay them
// out in flexible versions.
func TestTxnV2RequestBytes(t *testing.T) {
	e := EndTxnRequest("c", "tx", 7, 3, true).(*txnCoordinator)
	assert.Equal(t, "tx", e.Transaction())
	assert.Equal(t, int16(5), e.version)
	assert.Equal(t, "c", e.clientID)
	assert.Equal(t, "03"+"7478"+"0000000000000007"+"0003"+"01"+"00", hex.EncodeToString(e.body))

	p := ProduceRequest("c", "tx", "t", 2, 1000, []byte{0xaa, 0xbb}).(*partitionLeader)
	assert.Equal(t, int16(12), p.version)
	assert.Equal(t, "03"+"7478"+"ffff"+"000003e8"+ // txid, acks -1, timeout
		"02"+"0274"+"02"+"00000002"+"03"+"aabb"+"00"+"00"+"00", // topic t, partition 2, records, tags
		hex.EncodeToString(slices.Concat(append([][]byte{p.body}, p.tail...)...)))

	// On the wire: the size prefix counts the batch, sent after the body
	// from the caller's buffer.
	var sent bytes.Buffer
	corr := corrID.Load() + 1
	answer := binary.BigEndian.AppendUint32(nil, 5)
	answer = append(binary.BigEndian.AppendUint32(answer, uint32(corr)), 0) // no header tags
	_, err := p.RawExchange(struct {
		io.Reader
		io.Writer
	}{bytes.NewReader(answer), &sent})
	require.NoError(t, err)
	frame := sent.Bytes()
	require.Equal(t, len(frame)-4, int(binary.BigEndian.Uint32(frame)), "size prefix")
	want := slices.Concat(append([][]byte{p.body}, p.tail...)...)
	assert.Equal(t, hex.EncodeToString(want), hex.EncodeToString(frame[len(frame)-len(want):]))
}

// TestParseTxnV2Responses reads answers laid out as Kafka writes them, and
// refuses every truncation of them with ErrMalformed, never a panic.
func TestParseTxnV2Responses(t *testing.T) {
	// ApiVersions v3: no error, keys EndTxn 0-5 and Produce 3-12,
	// throttle, tags: 2 (finalized features) = [transaction.version 2..0].
	feat := "02" + "14" + hex.EncodeToString([]byte("transaction.version")) + "0002" + "0000" + "00"
	body := "0000" + "03" + "001a" + "0000" + "0005" + "00" + "0000" + "0003" + "000c" + "00" + "00000000" +
		"01" + "02" + hex.EncodeToString([]byte{byte(len(feat) / 2)}) + feat
	f, err := ParseApiVersions(&rawResponse{body: mustHex(t, body)})
	require.NoError(t, err)
	assert.Equal(t, int16(2), f.TransactionVersion)
	assert.Equal(t, int16(5), f.MaxVersions[keyEndTxn])
	assert.False(t, f.TransactionsV2(), "no TxnOffsetCommit v5")
	f.MaxVersions[keyTxnOffsetCommit] = 5
	assert.True(t, f.TransactionsV2())

	end := "00000000" + "0000" + "0000000000000009" + "0004" + "00"
	pid, epoch, err := ParseEndTxn(&rawResponse{body: mustHex(t, end)})
	require.NoError(t, err)
	assert.Equal(t, int64(9), pid)
	assert.Equal(t, int16(4), epoch)
	_, _, err = ParseEndTxn(&rawResponse{body: mustHex(t, "00000000"+"002f"+"ffffffffffffffff"+"ffff"+"00")})
	assert.True(t, errors.Is(err, kafka.InvalidProducerEpoch), "%v", err)

	// Produce v12: topic t, partition 2, error 0, base offset 41, append
	// time -1, log start 0, no record errors, no message, tags; throttle.
	prod := "02" + "0274" + "02" + "00000002" + "0000" + "0000000000000029" + "ffffffffffffffff" + "0000000000000000" +
		"01" + "00" + "00" + "00" + "00000000" + "00"
	off, err := ParseProduce(&rawResponse{body: mustHex(t, prod)}, "t", 2)
	require.NoError(t, err)
	assert.Equal(t, int64(41), off)
	_, err = ParseProduce(&rawResponse{body: mustHex(t, prod)}, "t", 3)
	assert.ErrorIs(t, err, ErrMalformed, "no answer for the partition")

	for name, full := range map[string]string{"api versions": body, "end txn": end, "produce": prod} {
		b := mustHex(t, full)
		for n := range len(b) {
			var err error
			switch name {
			case "api versions":
				_, err = ParseApiVersions(&rawResponse{body: b[:n]})
			case "end txn":
				_, _, err = ParseEndTxn(&rawResponse{body: b[:n]})
			default:
				_, err = ParseProduce(&rawResponse{body: b[:n]}, "t", 2)
			}
			assert.ErrorIs(t, err, ErrMalformed, "%s cut at %d", name, n)
		}
	}
}
