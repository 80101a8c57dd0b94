package dedup

import (
	"syscall"
	"unsafe"
)

// hugePageMinBytes is the smallest table worth backing with huge pages.
const hugePageMinBytes = 8 << 20

// adviseHugePages asks the kernel to back a large table with transparent huge
// pages. Lookups touch one random slot each; with 4 KiB pages nearly every
// lookup in a table of hundreds of megabytes also misses the TLB. With
// transparent_hugepage set to "madvise" (a common default) the Go heap gets
// huge pages only when asked. The advice is a hint: errors are ignored, and
// the memory stays an ordinary Go allocation.
func adviseHugePages(slots []slot) {
	n := len(slots) * slotSize
	if n < hugePageMinBytes {
		return
	}
	const page = 4096
	p := unsafe.Pointer(unsafe.SliceData(slots))
	off := (page - uintptr(p)%page) % page
	length := (uintptr(n) - off) &^ (page - 1)
	b := unsafe.Slice((*byte)(unsafe.Add(p, off)), length)
	_ = syscall.Madvise(b, syscall.MADV_HUGEPAGE)
}
