package fusefs

import (
	"context"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/objfuse/objfuse/fusefs/store"
)

// symlinkNode is a symbolic link: an object whose content is the target
// and whose mode metadata says S_IFLNK, as s3fs stores them.
type symlinkNode struct {
	fs.Inode
	fsys *FS

	mu         sync.Mutex
	attr       attrs
	attrAt     time.Time
	target     string
	haveTarget bool
}

var (
	_ fs.NodeReadlinker = (*symlinkNode)(nil)
	_ fs.NodeGetattrer  = (*symlinkNode)(nil)
	_ fs.NodeSetattrer  = (*symlinkNode)(nil)
)

// maxSymlinkTarget is PATH_MAX: a longer "target" is not a symlink we made.
const maxSymlinkTarget = 4096

func (n *symlinkNode) refresh(a attrs) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if a.etag != n.attr.etag {
		n.haveTarget = false
	}
	n.attr, n.attrAt = a, time.Now()
}

func (n *symlinkNode) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	n.mu.Lock()
	if n.haveTarget {
		t := n.target
		n.mu.Unlock()
		return []byte(t), 0
	}
	n.mu.Unlock()
	ctx, cancel := n.fsys.patient(ctx)
	defer cancel()
	body, err := n.fsys.store.Get(ctx, n.fsys.keyOf(&n.Inode), store.AnyVersion, 0, maxSymlinkTarget)
	if err != nil {
		return nil, errno(err)
	}
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, maxSymlinkTarget))
	if err != nil {
		return nil, syscall.EIO
	}
	n.mu.Lock()
	n.target, n.haveTarget = string(b), true
	n.mu.Unlock()
	return b, 0
}

func (n *symlinkNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.fsys.fill(n.attr, &out.Attr)
	return 0
}

func (n *symlinkNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	ctx = uninterruptible(ctx) // a change half made must be finished
	if n.fsys.opts.ReadOnly {
		return syscall.EROFS
	}
	n.mu.Lock()
	a := n.attr
	n.mu.Unlock()
	if n.fsys.applySetattr(&a, in) {
		key := n.fsys.keyOf(&n.Inode)
		o, err := n.fsys.store.Copy(ctx, key, store.AnyVersion, key, a.metadata())
		if err != nil {
			return errno(err)
		}
		o.Key, o.Size, o.Metadata = key, a.size, a.metadata() // a copy's reply carries neither
		noteInParent(&n.Inode, dirEntry{obj: o})
	}
	n.mu.Lock()
	n.attr = a
	n.fsys.fill(n.attr, &out.Attr)
	n.mu.Unlock()
	return 0
}
