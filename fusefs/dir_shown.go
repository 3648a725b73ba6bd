package fusefs

import (
	"context"
	"errors"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"

	"github.com/objfuse/objfuse/fusefs/store"
)

// The kernel looks a directory up again once statTTL has passed, and
// readers walking paths through it do so at once (the kernel sends each
// its own LOOKUP): eight data loader readers, every second. Asked as a
// new name would be, each is a HEAD for a file of the name and a one-key
// LIST for a directory, and in a large directory MinIO's LIST is a walk
// of it: 10 to 20 ms of its CPU, about a fifth of what it spent in the
// data loader row. A name the mount knows as a directory stays one while
// it exists (a file of the same name is hidden: directoryWins), so less
// settles it: its marker object where it has one, which also brings its
// attributes, in one HEAD; without a marker, a key below it that a lookup
// or a listing found within statTTL, as fresh an answer as a cached one
// (the mount's default attributes have nothing in the store to refresh).

// noteShown records that the store showed a key below the directory now.
func (n *dirNode) noteShown() {
	n.shownAt.Store(time.Now().UnixNano())
}

// shownLately reports a key below the directory found in the store
// within statTTL.
func (n *dirNode) shownLately() bool {
	at := n.shownAt.Load()
	return at != 0 && time.Since(time.Unix(0, at)) <= n.fsys.opts.StatTTL
}

// directoryAgain is the child directory name, looked up again as above,
// or nil when that does not settle it: the name is then asked for as any
// other.
func (n *dirNode) directoryAgain(ctx context.Context, name string) *fs.Inode {
	ch := n.GetChild(name)
	if ch == nil {
		return nil
	}
	d, ok := ch.Operations().(*dirNode)
	if !ok {
		return nil
	}
	d.mu.Lock()
	marker := d.hasMarker
	d.mu.Unlock()
	if !marker {
		if d.shownLately() {
			return ch
		}
		return nil
	}
	o, err := n.fsys.store.Head(ctx, n.key()+name+"/")
	if errors.Is(err, store.ErrNotExist) {
		// Removed elsewhere: the directory may remain without it, and
		// needs a new one before its last child goes (keepAlive).
		d.mu.Lock()
		d.hasMarker = false
		d.mu.Unlock()
	}
	if err != nil {
		return nil
	}
	return n.childFor(ctx, dirEntry{name: name, isDir: true, obj: o})
}
