package fusefs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
)

// handle is one open file description.
type handle struct {
	node     *fileNode
	writable bool
	append   bool // opened with O_APPEND
	r        reader
	pin      pin // under node.mu
}

var (
	_ fs.FileReader   = (*handle)(nil)
	_ fs.FileWriter   = (*handle)(nil)
	_ fs.FileFlusher  = (*handle)(nil)
	_ fs.FileFsyncer  = (*handle)(nil)
	_ fs.FileReleaser = (*handle)(nil)
)

func (h *handle) Release(ctx context.Context) syscall.Errno {
	h.r.close()
	h.node.release(h)
	return 0
}
