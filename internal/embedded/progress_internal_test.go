package embedded

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestReportProgress proves a cache step says what it does, then how it
// ended, and that a nil writer reports nothing.
func TestReportProgress(t *testing.T) {
	var b bytes.Buffer
	reportProgress(&b, "downloading x")(nil)
	assert.Regexp(t, `^exactlyonce: downloading x\.\.\.\nexactlyonce: downloading x: done in \S+\n$`, b.String())

	b.Reset()
	reportProgress(&b, "extracting y")(errors.New("disk full"))
	assert.Contains(t, b.String(), "extracting y: failed after")
	assert.Contains(t, b.String(), "disk full")

	reportProgress(nil, "nothing")(nil)
}
