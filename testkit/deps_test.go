package testkit_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNoAWSDependency proves a module that imports testkit (and not
// testkit/s3kit) does not compile the AWS SDK: S3 lives in s3kit so that
// Kafka, ClickHouse and Redis tests stay light.
func TestNoAWSDependency(t *testing.T) {
	goTool, err := exec.LookPath("go") // go test puts its own go first on PATH
	require.NoError(t, err)
	out, err := exec.CommandContext(t.Context(), goTool, "list", "-deps", "github.com/exactlyonce/exactlyonce/testkit").CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/exactlyonce/exactlyonce/internal/embedded")
	for _, d := range deps {
		assert.False(t, strings.Contains(d, "aws") || strings.Contains(d, "smithy"), "testkit depends on %s", d)
	}
}
