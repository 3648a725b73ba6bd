package store_test

import (
	"errors"
	"testing"

	"github.com/objfuse/objfuse/fusefs/store"
)

const mib = 1 << 20

func TestPartSizeFor(t *testing.T) {
	tests := []struct {
		name string
		size int64
		want int64
		err  error
	}{
		{"fits in parts of the base", 10000 * 8 * mib, 8 * mib, nil},
		{"one byte more grows to the next MiB", 10000*8*mib + 1, 9 * mib, nil},
		{"5 TiB, S3's largest object", 5 << 40, 525 * mib, nil},
		{"beyond 5 TiB", store.MaxObjectSize + 1, 0, store.ErrTooLarge},
	}
	for _, tc := range tests {
		got, err := store.PartSizeFor(tc.size, store.MaxParts, 8*mib)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("%s: PartSizeFor(%d) = %d, %v; want %d, %v", tc.name, tc.size, got, err, tc.want, tc.err)
		}
	}
}

// Parts keep the base size for nine tenths of the count, then double in
// ten steps up to the largest allowed (S3's 5 GiB at most); in all they
// hold far more than the 78 GiB of 10,000 parts of 8 MiB.
func TestGrowingPartSize(t *testing.T) {
	for _, tc := range []struct {
		number  int
		largest int64
		want    int64
	}{
		{1, 1 << 40, 8 * mib}, {9000, 1 << 40, 8 * mib}, {9001, 1 << 40, 16 * mib}, {9100, 1 << 40, 16 * mib},
		{9101, 1 << 40, 32 * mib}, {9900, 1 << 40, 4096 * mib}, {9901, 1 << 40, store.MaxPartSize},
		{10000, 1 << 40, store.MaxPartSize}, {9900, 1024 * mib, 1024 * mib}, {9001, 4 * mib, 8 * mib},
	} {
		if got := store.GrowingPartSize(tc.number, store.MaxParts, 8*mib, tc.largest); got != tc.want {
			t.Errorf("part %d, at most %d: %d bytes, want %d", tc.number, tc.largest, got, tc.want)
		}
	}
	var total int64
	for n := 1; n <= store.MaxParts; n++ {
		total += store.GrowingPartSize(n, store.MaxParts, 8*mib, 1024*mib)
	}
	if want := int64(582400 * mib); total != want {
		t.Errorf("10,000 parts growing to 1 GiB hold %d bytes, want %d (569 GiB)", total, want)
	}
}
