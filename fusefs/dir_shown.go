package fusefs

import (
	"context"
	"errors"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/objfuse/objfuse/fusefs/store"
)

// The kernel looks a directory up again once statTTL has passed, and
// readers walking paths through it do so at once (the kernel sends each
// its own LOOKUP): eight data loader readers, every second. Asked as a
// new name would be, each is a HEAD for a file of the name and a one-key
// LIST for a key below it, and in a large directory MinIO's LIST is a
// walk of it: 10 to 20 ms of its CPU, about a fifth of what it spent in
// the data loader row. A name the mount knows as a directory stays one
// while it exists (a file of the same name is hidden: directoryWins), so
// less settles it: a HEAD of its marker object, which brings its
// attributes when there is one (made here or elsewhere); when there is
// none, a key below it that a lookup or a listing found within statTTL.
// That answer is as old as the key's sighting, so the kernel keeps it
// only for what is left of statTTL: no other mount's removal goes unseen
// for longer than a cached answer would.

// noteShown records that the store showed a key below the directory now.
func (n *dirNode) noteShown() {
	n.shownAt.Store(time.Now().UnixNano())
}

// shownWithin is how long ago the store last showed a key below the
// directory, and whether that was within d.
func (n *dirNode) shownWithin(d time.Duration) (time.Duration, bool) {
	at := n.shownAt.Load()
	if at == 0 {
		return 0, false
	}
	age := time.Since(time.Unix(0, at))
	return age, age < d
}

// directoryAgain is the child directory name, looked up again as above,
// with out's entry timeout set where the answer is older than the
// lookup; or nil when that does not settle it: the name is then asked
// for as any other.
func (n *dirNode) directoryAgain(ctx context.Context, name string, out *fuse.EntryOut) *fs.Inode {
	ch := n.GetChild(name)
	if ch == nil {
		return nil
	}
	d, ok := ch.Operations().(*dirNode)
	if !ok {
		return nil
	}
	d.mu.Lock()
	seq := d.markerSeq
	d.mu.Unlock()
	o, err := n.fsys.store.Head(ctx, n.key()+name+"/")
	if err == nil {
		return n.childFor(ctx, dirEntry{name: name, isDir: true, obj: o})
	}
	if !errors.Is(err, store.ErrNotExist) {
		return nil // the full question will say what fails
	}
	// No marker, or none any more: the directory needs one before its
	// last child goes (keepAlive). One made meanwhile stays known.
	d.mu.Lock()
	if d.markerSeq == seq {
		d.hasMarker = false
	}
	d.mu.Unlock()
	ttl := n.fsys.opts.StatTTL
	age, lately := d.shownWithin(ttl)
	if !lately {
		return nil
	}
	n.fsys.inodes.touch(ch)
	out.SetEntryTimeout(ttl - age)
	return ch
}
