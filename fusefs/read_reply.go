package fusefs

import "github.com/hanwen/go-fuse/v2/fuse"

// chunkReply is a READ's answer made of slices of readahead chunks (and
// possibly the tail of go-fuse's own buffer). go-fuse writes the slices
// to the kernel with writev, so the bytes are copied once, by the kernel,
// instead of first into a reply buffer: a tenth of the daemon's CPU on a
// long sequential read. The chunks stay allocated until Done.
type chunkReply struct {
	fsys   *FS
	slices [][]byte
	chunks []*chunk
}

var _ fuse.ReadResult = (*chunkReply)(nil)

// add appends part, a slice of c's buffer, and holds c until Done.
func (r *chunkReply) add(c *chunk, part []byte) {
	c.refs.Add(1)
	r.chunks = append(r.chunks, c)
	r.slices = append(r.slices, part)
}

// Slices is what go-fuse writes with writev (its withSlice interface).
func (r *chunkReply) Slices() ([][]byte, fuse.Status) { return r.slices, fuse.OK }

func (r *chunkReply) Size() int {
	n := 0
	for _, s := range r.slices {
		n += len(s)
	}
	return n
}

// Bytes is go-fuse's fallback when it cannot write slices: one copy.
func (r *chunkReply) Bytes(buf []byte) ([]byte, fuse.Status) {
	buf = buf[:0]
	for _, s := range r.slices {
		buf = append(buf, s...)
	}
	return buf, fuse.OK
}

// Done is called by go-fuse once the reply is written (or dropped).
func (r *chunkReply) Done() {
	for _, c := range r.chunks {
		c.unref(r.fsys)
	}
	r.chunks, r.slices = nil, nil
}

// sliceReply answers with bytes of our own. Unlike fuse.ReadResultData
// it has Slices, so go-fuse writes it at once instead of first trying
// (and failing) to splice it.
func sliceReply(b []byte) fuse.ReadResult { return &chunkReply{slices: [][]byte{b}} }
