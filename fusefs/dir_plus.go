package fusefs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

var _ fs.FileLookuper = (*dirStream)(nil)

// plusShare is the part of MaxInodes that READDIRPLUS may fill with
// inodes of entries it lists.
const plusShare = 0.5

// Lookup is READDIRPLUS's lookup of the entry just listed. An entry gets
// an inode (and the kernel its attributes with the name, sparing the
// LOOKUP that ls -l would send) while the inode table is below
// plusShare of its bound; past it, the name goes to the kernel alone
// (the kernel makes no inode of an entry without a node id), and a
// program that wants the file looks it up by name. Listing a directory of
// a million names would otherwise make an inode of each, a kilobyte a
// name that nothing may ever ask for, and fill the table (trimming what
// the programs at work use) on every listing.
func (s *dirStream) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n := s.n
	if n.GetChild(name) == nil && n.fsys.inodes.len() >= int(float64(n.fsys.opts.MaxInodes)*plusShare) {
		return nil, syscall.EAGAIN // go-fuse lists the name with node id 0
	}
	return n.Lookup(ctx, name, out)
}
