package fuse

import (
	"syscall"
	"testing"
)

// countingPool is a RequestBufferPool that counts what it hands out and
// takes back.
type countingPool struct {
	gets, puts int
	out        map[*byte]bool
}

func (p *countingPool) Get(size int) []byte {
	p.gets++
	b := make([]byte, size)
	p.out[&b[0]] = true
	return b
}

func (p *countingPool) Put(buf []byte) {
	if !p.out[&buf[:1][0]] {
		panic("a buffer the pool did not hand out")
	}
	delete(p.out, &buf[:1][0])
	p.puts++
}

// With MountOptions.RequestBuffers, request buffers come from the given
// pool, the size a request is read into, and go back to it whole.
func TestRequestBuffersComeFromTheirPool(t *testing.T) {
	pool := &countingPool{out: map[*byte]bool{}}
	ms := &Server{opts: &MountOptions{MaxWrite: 1 << 20, RequestBuffers: pool}}
	var p [2]int
	if err := syscall.Pipe(p[:]); err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(p[1])
	fd, err := ms.newFuseFD(p[0]) // any descriptor: nothing is read
	if err != nil {
		t.Fatal(err)
	}
	defer fd.file.Close()
	size, _, _ := requestAccountingSizes(ms.opts.MaxWrite)
	a, b := fd.getReadBuf(), fd.getReadBuf()
	if len(a) != size || len(b) != size {
		t.Fatalf("buffers of %d and %d bytes, want %d", len(a), len(b), size)
	}
	fd.putReadBuf(a[:10]) // as a gobbled request gives it back: cut, same start
	fd.putReadBuf(b)
	if pool.gets != 2 || pool.puts != 2 || len(pool.out) != 0 {
		t.Fatalf("%d gets, %d puts, %d out; want 2, 2 and none", pool.gets, pool.puts, len(pool.out))
	}
}
