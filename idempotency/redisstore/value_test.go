package redisstore

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
)

// encodeDone is the value completeScript writes, in Go.
func encodeDone(d done) string {
	return "d" + strconv.Itoa(d.status) + "\x00" + strconv.Itoa(len(d.fingerprint)) + "\x00" +
		strconv.Itoa(len(d.contentType)) + "\x00" + d.fingerprint + d.contentType + d.body
}

func FuzzParseDone(f *testing.F) {
	f.Add("d202\x002\x0016\x00fpapplication/json{}")
	f.Add("d0\x000\x000\x00")
	f.Add("d202\x009\x000\x00fp")
	f.Add("pabc\x00fp")
	f.Add("d0\x000\x0000\x00")
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := parseDone(v)
		if !ok {
			return
		}
		// Within bounds (no panic above), and what completeScript would
		// write of it reads back the same.
		back, ok := parseDone(encodeDone(d))
		assert.True(t, ok)
		assert.Equal(t, d, back)
	})
}
