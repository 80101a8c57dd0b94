//go:build !linux

package dedup

func adviseHugePages([]slot) {}
