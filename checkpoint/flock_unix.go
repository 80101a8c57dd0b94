//go:build unix

package checkpoint

import (
	"os"
	"syscall"
)

// flock takes an exclusive lock of f, waiting for it; closing f releases it.
func flock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			return err
		}
	}
}
