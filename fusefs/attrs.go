package fusefs

import (
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/objfuse/objfuse/fusefs/store"
)

// Metadata names, as s3fs writes them (x-amz-meta-mode and so on). mode is
// the decimal st_mode including the file type bits.
const (
	metaMode  = "mode"
	metaUID   = "uid"
	metaGID   = "gid"
	metaMtime = "mtime"
)

// dirContentType marks directory objects the way s3fs does.
const dirContentType = "application/x-directory"

// attrs are the POSIX attributes of one node.
type attrs struct {
	mode     uint32 // with type bits
	uid, gid uint32
	size     int64
	mtime    time.Time
	etag     string
}

// attrsOf derives attributes from an object, falling back to the mount's
// defaults for anything the metadata does not say. kind is the type bits
// the caller already knows (directory or not); a file's metadata may
// refine it to a symlink.
func (f *FS) attrsOf(o store.Object, kind uint32) attrs {
	a := attrs{size: o.Size, mtime: o.LastModified, etag: o.ETag, uid: f.opts.UID, gid: f.opts.GID}
	if kind == syscall.S_IFDIR {
		a.mode = syscall.S_IFDIR | uint32(f.opts.DirMode)
		a.size = 0
	} else {
		a.mode = syscall.S_IFREG | uint32(f.opts.FileMode)
	}
	if v, ok := o.Metadata[metaMode]; ok {
		if m, err := strconv.ParseUint(v, 10, 32); err == nil {
			m := uint32(m)
			switch typ := m & syscall.S_IFMT; {
			case kind == syscall.S_IFDIR:
				a.mode = syscall.S_IFDIR | m&07777
			case typ == syscall.S_IFLNK:
				a.mode = syscall.S_IFLNK | m&07777
			default:
				a.mode = syscall.S_IFREG | m&07777
			}
		}
	}
	if v, ok := o.Metadata[metaUID]; ok {
		if n, err := strconv.ParseUint(v, 10, 32); err == nil {
			a.uid = uint32(n)
		}
	}
	if v, ok := o.Metadata[metaGID]; ok {
		if n, err := strconv.ParseUint(v, 10, 32); err == nil {
			a.gid = uint32(n)
		}
	}
	if v, ok := o.Metadata[metaMtime]; ok {
		if t, ok := parseMtime(v); ok {
			a.mtime = t
		}
	}
	if a.mtime.IsZero() {
		a.mtime = f.mountTime
	}
	return a
}

// parseMtime reads s3fs's mtime: seconds, optionally with a fraction.
func parseMtime(v string) (time.Time, bool) {
	sec, frac, _ := strings.Cut(v, ".")
	s, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	var ns int64
	if frac != "" {
		frac = (frac + "000000000")[:9]
		if ns, err = strconv.ParseInt(frac, 10, 64); err != nil {
			return time.Time{}, false
		}
	}
	return time.Unix(s, ns), true
}

// metadata encodes attributes as object metadata.
func (a attrs) metadata() map[string]string {
	m := map[string]string{
		metaMode:  strconv.FormatUint(uint64(a.mode), 10),
		metaUID:   strconv.FormatUint(uint64(a.uid), 10),
		metaGID:   strconv.FormatUint(uint64(a.gid), 10),
		metaMtime: strconv.FormatInt(a.mtime.Unix(), 10),
	}
	if a.mode&syscall.S_IFMT == syscall.S_IFDIR {
		m["content-type"] = dirContentType
	}
	return m
}

// fill copies the attributes into a FUSE attribute reply.
// fill tells the kernel a: with a mount group (SetMountGroup), as that
// group's, a directory set-group-ID; the store keeps what its object says.
func (f *FS) fill(a attrs, out *fuse.Attr) {
	a.fill(out)
	if f.groupFixed {
		out.Gid = f.opts.GID
		if a.mode&syscall.S_IFMT == syscall.S_IFDIR {
			out.Mode |= syscall.S_ISGID
		}
	}
}

func (a attrs) fill(out *fuse.Attr) {
	out.Mode = a.mode
	out.Uid = a.uid
	out.Gid = a.gid
	out.Size = uint64(a.size)
	out.Blksize = 1 << 20
	out.Blocks = (uint64(a.size) + 511) / 512
	out.Nlink = 1
	if a.mode&syscall.S_IFMT == syscall.S_IFDIR {
		out.Nlink = 2
	}
	out.SetTimes(&a.mtime, &a.mtime, &a.mtime)
}

// applySetattr changes a as a SETATTR request asks (not size). With a
// mount group every file's group is that group, and a change of group is
// ignored, as on a CIFS mount with gid= (an error would fail `cp -a`, tar
// and rsync run as root for no gain).
func (f *FS) applySetattr(a *attrs, in *fuse.SetAttrIn) (changed bool) {
	if f.groupFixed {
		in.Valid &^= fuse.FATTR_GID
	}
	return a.applySetattr(in)
}

// applySetattr changes attributes as a SETATTR request asks (not size).
func (a *attrs) applySetattr(in *fuse.SetAttrIn) (changed bool) {
	if m, ok := in.GetMode(); ok {
		a.mode = a.mode&syscall.S_IFMT | m&07777
		changed = true
	}
	if u, ok := in.GetUID(); ok {
		a.uid = u
		changed = true
	}
	if g, ok := in.GetGID(); ok {
		a.gid = g
		changed = true
	}
	if t, ok := in.GetMTime(); ok {
		a.mtime = t
		changed = true
	}
	return changed
}
