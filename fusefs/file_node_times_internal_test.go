package fusefs

import (
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Under the writeback cache, only what the kernel sends of its own
// (mtime and ctime, without atime, naming an open file, no size) with a
// time within the writing of content not uploaded yet is the writes'
// time; anything a program could have sent is a time set.
func TestKernelWriteTimesAreToldFromTimesSet(t *testing.T) {
	now := time.Now()
	at := func(valid uint32, mtime time.Time) *fuse.SetAttrIn {
		in := &fuse.SetAttrIn{}
		in.Valid = valid
		in.Mtime, in.Mtimensec = uint64(mtime.Unix()), uint32(mtime.Nanosecond())
		in.Ctime = uint64(now.Unix())
		return in
	}
	const kernel = fuse.FATTR_MTIME | fuse.FATTR_CTIME | fuse.FATTR_FH
	for _, c := range []struct {
		name      string
		writeback bool
		pending   bool
		in        *fuse.SetAttrIn
		want      bool
	}{
		{"the kernel's, within the writing", true, true, at(kernel, now), true},
		{"without the writeback cache", false, true, at(kernel, now), false},
		{"of content uploaded already", true, false, at(kernel, now), false},
		{"with an atime (cp -p, touch)", true, true, at(kernel|fuse.FATTR_ATIME, now), false},
		{"naming no file (utimensat, touch -m)", true, true, at(fuse.FATTR_MTIME|fuse.FATTR_CTIME, now), false},
		{"with a size (ftruncate)", true, true, at(kernel|fuse.FATTR_SIZE, now), false},
		{"before the writing", true, true, at(kernel, now.Add(-time.Hour)), false},
		{"after now", true, true, at(kernel, now.Add(time.Hour)), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := &fileNode{fsys: &FS{opts: Options{WritebackCache: c.writeback}}}
			if c.pending {
				n.upload.written()
			}
			if got := n.kernelWriteTimeLocked(c.in); got != c.want {
				t.Fatalf("taken as the kernel's write time: %v, want %v", got, c.want)
			}
		})
	}
}
