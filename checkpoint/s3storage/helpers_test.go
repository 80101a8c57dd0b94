package s3storage_test

import (
	"os"

	"github.com/exactlyonce/exactlyonce/internal/testenv"
)

func testenvExternal() bool { return os.Getenv(testenv.EnvS3Endpoint) != "" }
