package fusefs

import (
	"slices"
	"strings"
	"sync"

	"github.com/hanwen/go-fuse/v2/fs"
)

// keyGate keeps a directory rename and this mount's changes under the
// directory from overlapping. S3 has no rename: a directory moves by
// copying every object under it and then deleting them all, and a file
// written and closed between its copy and its delete would be uploaded
// under the old name and then deleted, a file created meanwhile would
// land under the old name, and a file removed meanwhile would come back
// under the new one. So every change enters the gate for the keys it
// touches (enter), and a directory rename (move) waits for the changes
// under its prefix to end and holds new ones back until the directory's
// inode has moved, so that they take their keys from its new name.
//
// A change never waits for the gate while inside it (no nesting), and a
// move waits for nothing a change holds: neither can deadlock the other.
type keyGate struct {
	mu      sync.Mutex
	changed *sync.Cond
	inside  map[string]int // key → changes in flight that touch it
	moving  []string       // prefixes being moved
	waiting int            // changes held back by a move
}

func newKeyGate() *keyGate {
	g := &keyGate{inside: map[string]int{}}
	g.changed = sync.NewCond(&g.mu)
	return g
}

// enter waits until no move covers any of keys, and counts a change to
// them in flight until the returned leave is called.
func (g *keyGate) enter(keys ...string) (leave func()) {
	g.mu.Lock()
	for g.anyMoving(keys) {
		g.waiting++
		g.changed.Wait()
		g.waiting--
	}
	for _, k := range keys {
		g.inside[k]++
	}
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		for _, k := range keys {
			if g.inside[k]--; g.inside[k] == 0 {
				delete(g.inside, k)
			}
		}
		g.changed.Broadcast()
		g.mu.Unlock()
	}
}

// enterAt enters the gate for the key keyOf gives, as it stands once
// inside: a key computed before a move that held the change back names
// the old place.
func (g *keyGate) enterAt(keyOf func() (string, error)) (key string, leave func(), err error) {
	for {
		key, err := keyOf()
		if err != nil {
			return "", nil, err
		}
		leave := g.enter(key)
		if now, err := keyOf(); err != nil || now != key {
			leave()
			continue
		}
		return key, leave, nil
	}
}

// move waits until no change under prefix (a directory's, ending in "/",
// or a file's key) is in flight and no other move overlaps it, then holds
// back every change under prefix until the returned done is called.
//
// A rename moves its source and fences its destination in one call, so
// that two renames in opposite directions cannot each hold one.
func (g *keyGate) move(prefixes ...string) (done func()) {
	g.mu.Lock()
	for slices.ContainsFunc(prefixes, g.busyUnder) {
		g.changed.Wait()
	}
	g.moving = append(g.moving, prefixes...)
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		for _, prefix := range prefixes {
			if i := slices.Index(g.moving, prefix); i >= 0 {
				g.moving = slices.Delete(g.moving, i, i+1)
			}
		}
		g.changed.Broadcast()
		g.mu.Unlock()
	}
}

// anyMoving reports whether a move covers any of keys.
func (g *keyGate) anyMoving(keys []string) bool {
	for _, p := range g.moving {
		for _, k := range keys {
			if covers(p, k) {
				return true
			}
		}
	}
	return false
}

// covers reports whether a move of p (a directory's prefix, ending in
// "/", or a file's key) moves key.
func covers(p, key string) bool {
	return key == p || strings.HasSuffix(p, "/") && strings.HasPrefix(key, p)
}

// busyUnder reports a change in flight under prefix, or a move of a
// prefix that contains it or lies within it.
func (g *keyGate) busyUnder(prefix string) bool {
	for k := range g.inside {
		if covers(prefix, k) {
			return true
		}
	}
	for _, p := range g.moving {
		if covers(p, prefix) || covers(prefix, p) {
			return true
		}
	}
	return false
}

// heldBack counts the changes waiting for a move: for tests.
func (g *keyGate) heldBack() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}

// placement is where a rename put an inode: go-fuse moves the inode in
// its tree only after Rename returns, and changes the move held back
// must take their keys from the new place, not the old one.
type placement struct {
	parent *fs.Inode
	name   string
}

// place records that in now lives at name in parent, until go-fuse's
// tree says so too (pathOf) or in is removed (unplace).
func (f *FS) place(in *fs.Inode, parent *fs.Inode, name string) {
	if _, had := f.placed.Swap(in, placement{parent, name}); !had {
		f.placing.Add(1)
	}
}

// placeRemoved records that in has no name any more, until go-fuse's
// tree says so too.
func (f *FS) placeRemoved(in *fs.Inode) { f.place(in, nil, "") }

func (f *FS) unplace(in *fs.Inode) {
	if _, had := f.placed.LoadAndDelete(in); had {
		f.placing.Add(-1)
	}
}

// parentOf is in's name and parent: go-fuse's, or where a rename put it
// if go-fuse has not moved it yet.
func (f *FS) parentOf(in *fs.Inode) (string, *fs.Inode) {
	name, parent := in.Parent()
	if f.placing.Load() == 0 {
		return name, parent
	}
	v, ok := f.placed.Load(in)
	if !ok {
		return name, parent
	}
	pl := v.(placement)
	if parent == pl.parent && name == pl.name {
		f.unplace(in) // go-fuse has caught up
	}
	return pl.name, pl.parent
}
