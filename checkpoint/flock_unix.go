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

// tryFlock takes an exclusive lock of f if no one holds one, without
// waiting, and reports whether it did.
func tryFlock(f *os.File) (bool, error) {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch err {
		case nil:
			return true, nil
		case syscall.EWOULDBLOCK:
			return false, nil
		case syscall.EINTR:
			continue
		default:
			return false, err
		}
	}
}
