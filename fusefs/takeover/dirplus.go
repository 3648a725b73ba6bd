package takeover

import (
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// A READDIRPLUS reply is, per entry, a fuse_entry_out, a fuse_dirent
// (ino, off, namelen, type) and the name, padded to 8 bytes. Its node
// ids are the inner filesystem's until enteredAll translates them in
// place.
const (
	entryOutSize  = int(unsafe.Sizeof(fuse.EntryOut{}))
	direntSize    = 24
	direntNameLen = 16 // offset of namelen in fuse_dirent
)

// enteredAll gives out kernel ids for the entries of a READDIRPLUS reply
// in buf, listed in the directory with kernel id parent.
func (t *FS) enteredAll(parent uint64, buf []byte) {
	for len(buf) >= entryOutSize+direntSize {
		out := (*fuse.EntryOut)(unsafe.Pointer(&buf[0]))
		d := buf[entryOutSize:]
		nameLen := int(*(*uint32)(unsafe.Pointer(&d[direntNameLen])))
		end := direntSize + nameLen
		if end > len(d) {
			t.log.Error("a READDIRPLUS reply cut short; its node ids stay untranslated", "bytes", len(buf))
			return
		}
		name := string(d[direntSize:end])
		if name != "." && name != ".." {
			t.entered(parent, name, out, false)
		}
		next := entryOutSize + (end+7)&^7
		if next > len(buf) {
			return
		}
		buf = buf[next:]
	}
}
