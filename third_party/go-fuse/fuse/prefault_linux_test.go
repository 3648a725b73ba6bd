package fuse

import (
	"syscall"
	"testing"
	"unsafe"
)

// TestPrefaultBringsPagesIn: memory the operating system has not handed
// over yet (a fresh anonymous mapping, as the Go runtime's new large
// allocations are) is not in memory; after prefault every page is.
func TestPrefaultBringsPagesIn(t *testing.T) {
	const size = 4 << 20
	buf, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(buf)
	pages := size / syscall.Getpagesize()
	if missing := pagesNotInMemory(t, buf); missing != pages {
		t.Fatalf("a fresh mapping has %d of %d pages missing, want all", missing, pages)
	}
	prefault(buf)
	if missing := pagesNotInMemory(t, buf); missing > 0 {
		t.Fatalf("after prefault, %d of %d pages are not in memory", missing, pages)
	}
}

// pagesNotInMemory counts the pages of page-aligned buf that mincore says
// are not resident.
func pagesNotInMemory(t *testing.T, buf []byte) int {
	t.Helper()
	vec := make([]byte, len(buf)/syscall.Getpagesize())
	if _, _, e := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatalf("mincore: %v", e)
	}
	missing := 0
	for _, v := range vec {
		if v&1 == 0 {
			missing++
		}
	}
	return missing
}
