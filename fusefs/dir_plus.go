package fusefs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

var _ fs.FileLookuper = (*dirStream)(nil)

// plusShare is the part of MaxInodes one listing (READDIRPLUS) may fill
// with inodes of the entries it lists.
const plusShare = 0.5

// Lookup is READDIRPLUS's lookup of the entry just listed. It gives the
// kernel the entry's inode and attributes with its name, sparing the
// LOOKUP ls -l would send, when the directory's listing holds the entry
// and this listing has made fewer than plusShare of MaxInodes new inodes.
// Otherwise the name goes to the kernel alone (an entry without a node
// id: the kernel makes no inode of it), and a program that wants the
// file looks it up by name:
//   - a directory of a million names would make an inode of each, a
//     kilobyte a name that nothing may ever ask for, and trim from the
//     table what the programs at work use;
//   - a listing too large to keep answers no lookup, and asking the
//     store by name here would cost a HEAD per name, one after another,
//     inside the READDIRPLUS.
func (s *dirStream) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n := s.n
	if n.GetChild(name) != nil {
		return n.Lookup(ctx, name, out)
	}
	// The entry is taken as the listing gives it now: asking again in
	// n.Lookup could find the listing dropped meanwhile (it outgrew what
	// a listing keeps) and ask the store.
	e, found, known := n.cached(name)
	if !found || s.madeInodes.Load() >= int64(float64(n.fsys.opts.MaxInodes)*plusShare) {
		return nil, syscall.EAGAIN // go-fuse lists the name with node id 0
	}
	s.madeInodes.Add(1)
	if !known { // listed without its metadata: the fetch dir_listmeta runs
		return n.Lookup(ctx, name, out)
	}
	ch := n.childFor(ctx, e)
	return ch, fillEntry(ctx, ch, out)
}
