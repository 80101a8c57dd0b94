package s3storage_test

import (
	"os"

	"github.com/exactlyonce/exactlyonce/testkit/s3kit"
)

func testenvExternal() bool { return os.Getenv(s3kit.EnvEndpoint) != "" }
