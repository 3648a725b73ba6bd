package memstore

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"hash/fnv"
	"io"
)

// NewPatterned returns a store that keeps no object's bytes: every object
// holds its key's Pattern, which writes are checked against as they
// arrive (a write of other bytes fails) and reads are made from. Tests of
// a mount's own memory use it: a store holding gigabytes in the same
// heap would hide what the mount holds.
func NewPatterned() *Store {
	s := New()
	s.patterned = true
	return s
}

// Pattern fills p with the bytes at off of the object key holds in a
// patterned store: every position's byte differs from its neighbours' and
// depends on the key, so misplaced or mixed-up bytes show.
func Pattern(key string, off int64, p []byte) {
	h := fnv.New64a()
	h.Write([]byte(key))
	seed := h.Sum64()
	for i := range p {
		x := (uint64(off+int64(i)) + seed) * 0x9E3779B97F4A7C15
		p[i] = byte(x >> 56)
	}
}

// PatternFrom reads key's Pattern from off on, without end.
func PatternFrom(key string, off int64) io.Reader { return &patternReader{key: key, off: off} }

// patternReader reads key's Pattern from off on, without end.
type patternReader struct {
	key string
	off int64
}

func (r *patternReader) Read(p []byte) (int, error) {
	Pattern(r.key, r.off, p)
	r.off += int64(len(p))
	return len(p), nil
}

// checkPattern reads r to its end and reports how many bytes it held, or
// an error where they stop being key's Pattern from off on.
func checkPattern(key string, off int64, r io.Reader) (int64, error) {
	buf, want := make([]byte, 64<<10), make([]byte, 64<<10)
	var n int64
	for {
		k, err := r.Read(buf)
		Pattern(key, off+n, want[:k])
		if !bytes.Equal(buf[:k], want[:k]) {
			return n, fmt.Errorf("the bytes at %d are not the key's pattern", off+n)
		}
		n += int64(k)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// partSum stands for a patterned store's part until the upload completes.
type partSum struct {
	size int64
	sum  [sha256.Size]byte
}

func digest(r io.Reader) ([sha256.Size]byte, error) {
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return [sha256.Size]byte{}, err
	}
	return [sha256.Size]byte(h.Sum(nil)), nil
}
