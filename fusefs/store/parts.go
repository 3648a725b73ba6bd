package store

import "fmt"

// MinPartSize is S3's lower bound for every multipart part but the last.
const MinPartSize = 5 << 20

// MaxPartSize is S3's upper bound for one part.
const MaxPartSize = 5 << 30

// MaxParts is S3's upper bound on the number of parts of one upload.
const MaxParts = 10000

// MaxObjectSize is the largest object every S3 server takes: MinIO's
// limit, and AWS's until it raised its own to 48.8 TiB.
const MaxObjectSize = 5 << 40

// PartSizeFor is the part size for an upload of size bytes known in
// advance: base, or more when size would need more than maxParts parts of
// base, rounded up to whole MiB. A staged file of any size S3 takes can
// then be uploaded, whatever --part-size-mib says.
func PartSizeFor(size int64, maxParts int, base int64) (int64, error) {
	const mib = 1 << 20
	if size > MaxObjectSize {
		return 0, fmt.Errorf("%d bytes, above S3's largest object (%d): %w", size, int64(MaxObjectSize), ErrTooLarge)
	}
	ps := max(base, (size+int64(maxParts)-1)/int64(maxParts))
	ps = (ps + mib - 1) / mib * mib
	if ps > MaxPartSize {
		return 0, fmt.Errorf("%d bytes need parts of %d bytes, above S3's %d: %w", size, ps, int64(MaxPartSize), ErrTooLarge)
	}
	return ps, nil
}

// GrowingPartSize is the size of part number (from 1) of an upload whose
// size is not known while it goes up, a file streamed as it is written.
// The first nine tenths of maxParts are base; the last tenth doubles in ten
// steps, up to largest (and never above MaxPartSize). With 8 MiB parts,
// files up to 70 GiB keep one part size, and with parts up to 1 GiB a
// stream can grow to about 570 GiB instead of stopping at 78 GiB (10,000
// parts of 8 MiB).
func GrowingPartSize(number, maxParts int, base, largest int64) int64 {
	fixed := maxParts - maxParts/10
	if number <= fixed {
		return base
	}
	step := max(1, maxParts/100)
	doublings := min((number-fixed-1)/step+1, 30)
	return max(base, min(base<<doublings, largest, MaxPartSize))
}
