package takeover

import (
	"fmt"
	"log/slog"
	"maps"
	"path"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// FS is a fuse.RawFileSystem in front of another (go-fuse's node bridge)
// that numbers nodes and handles itself, journals them, and, in a
// successor, revives the numbers a predecessor gave out.
type FS struct {
	inner fuse.RawFileSystem
	log   *slog.Logger

	// server is the connection's server, for notifications (set by Init).
	server atomic.Pointer[fuse.Server]

	// mu guards the tables and the journal; it is never held across a
	// call into inner, which may wait on S3.
	mu      sync.Mutex
	journal *Journal
	nodes   map[uint64]*node  // kernel node id → node
	byInner map[uint64]uint64 // inner node id → kernel node id
	// children is (parent, name) → kernel node id, of live nodes and of
	// a predecessor's not yet revived alike: a rename or unlink must
	// move or unname a node the kernel holds but has not used since the
	// takeover, or its revival would look up whatever holds its old name.
	children map[childKey]uint64
	handles  map[uint64]*handle
	// old is what a predecessor gave out that the kernel has not used
	// since: revived on first use, dropped when forgotten or released.
	old        *Saved
	nextNode   uint64
	nextHandle uint64
	// handedOver: the predecessor handed the connection over (HandOver)
	// rather than died, so it did none of the requests the kernel resends.
	// handingOver: this process did.
	handedOver, handingOver bool

	// broken: a record could not be written; the journal is gone.
	broken bool

	// gate holds requests back during a hand-over (HandOver).
	gate gate

	// reviveMu makes revivals one at a time (two requests for one dead
	// number must not revive it twice) and keeps them from requests that
	// change names, which hold it shared (changingNames).
	reviveMu sync.RWMutex

	stats Stats
}

// Stats count what takeovers did.
type Stats struct {
	RevivedNodes   atomic.Int64
	RevivedHandles atomic.Int64
	// LostHandles are handles whose writes were in a dead predecessor's
	// memory: their writers get EIO, once.
	LostHandles atomic.Int64
	// Stale are numbers that could not be revived (their name is gone).
	Stale atomic.Int64
}

type node struct {
	inner uint64
	// count is the lookups this FS holds on the inner node for it; the
	// kernel's FORGET gives back at most that many.
	count uint64
	// revived: its id is a predecessor's, taken in on its use.
	revived bool
	// pinned: a lookup reply gave the kernel a predecessor's id again
	// (adopt, or a revived node found again), so the kernel's count for
	// it holds lookups this process cannot count, and a FORGET cannot
	// tell whether it ends the inode the kernel makes of this reply or
	// the one it made of the predecessor's and is evicting now (a dentry
	// of the old epoch dropped as the name is looked up again): the two
	// cross. The node keeps one inner lookup for the connection's life,
	// so that its id, and a handle opened on it, stay good while the
	// kernel may hold it. The cost is bounded by what the predecessor
	// gave out.
	pinned bool
	SavedNode
}

type childKey struct {
	parent uint64
	name   string
}

type handle struct {
	inner uint64
	SavedHandle
	// owes: its writes since its last flush died with a predecessor; the
	// next call on it fails with EIO, once, as a failed writeback is
	// reported once, and it is clean from then on (Dirty stays set until
	// the failure is told, so that a successor of this process tells it).
	owes bool
	// lost: it could not be opened again; every call fails with EIO.
	lost bool
	// changes counts the changes begun through it, changing those under
	// way (dirty), so that a flush clears Dirty only if it covers them
	// (flushing, flushed).
	changes  uint64
	changing int
}

// rootID is the root's node id, the same in every protocol and process.
const rootID = fuse.FUSE_ROOT_ID

// New returns an FS in front of the raw filesystem newInner makes, which
// must send its notifications through the callbacks it is given (go-fuse:
// fs.Options.ServerCallbacks), for they carry inner node ids. The journal
// starts afresh at journalPath with what prev holds (nil for a new
// connection; Load's result in a successor), which FS copies: the
// caller's stays as it was.
func New(journalPath string, prev *Saved, log *slog.Logger, newInner func(fs.ServerCallbacks) fuse.RawFileSystem) (*FS, error) {
	if prev == nil {
		prev = newSaved()
	}
	handedOver := prev.HandedOver // this process's journal starts without it
	prev = &Saved{Nodes: maps.Clone(prev.Nodes), Handles: maps.Clone(prev.Handles), NextNode: prev.NextNode, NextHandle: prev.NextHandle}
	if prev.Nodes == nil {
		prev.Nodes = map[uint64]SavedNode{}
	}
	if prev.Handles == nil {
		prev.Handles = map[uint64]SavedHandle{}
	}
	j, err := Create(journalPath, prev)
	if err != nil {
		return nil, err
	}
	t := &FS{
		log:        log,
		journal:    j,
		nodes:      map[uint64]*node{rootID: {inner: rootID, count: 1, SavedNode: SavedNode{Type: syscall.S_IFDIR}}},
		byInner:    map[uint64]uint64{rootID: rootID},
		children:   map[childKey]uint64{},
		handles:    map[uint64]*handle{},
		old:        prev,
		nextNode:   max(prev.NextNode, firstNode),
		nextHandle: max(prev.NextHandle, 1),
		handedOver: handedOver,
	}
	for id, n := range prev.Nodes {
		if n.Parent != 0 {
			t.children[childKey{n.Parent, n.Name}] = id
		}
	}
	t.inner = newInner(callbacks{t})
	return t, nil
}

// Stats are the counts of revivals and losses so far.
func (t *FS) Stats() *Stats { return &t.stats }

// Close closes the journal; Remove deletes it too (the connection ended).
func (t *FS) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.journal.Close()
}

// Remove deletes the journal: nothing will take this connection over.
func (t *FS) Remove() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.journal.Remove()
}

// record appends to the journal and compacts it when it has grown to
// several times what it describes. Called with mu held.
//
// A record that cannot be written (the staging volume full, an I/O
// error) would leave a successor a journal that lies: a node id the
// kernel holds given out again for another file, a handle with lost
// writes revived as clean. The journal is removed instead, and kept no
// more: no successor takes this connection over (it is repaired, as on a
// kernel that cannot resend), and Takeable says so.
func (t *FS) record(format string, args ...any) {
	if t.broken {
		return
	}
	err := t.journal.append(fmt.Sprintf(format, args...))
	live := len(t.nodes) + len(t.handles) + len(t.old.Nodes) + len(t.old.Handles)
	if err == nil && t.journal.records > 4*live+4096 {
		err = t.journal.rewrite(t.snapshot())
	}
	if err != nil {
		t.broken = true
		t.log.Error("the takeover journal cannot be written; no successor will take this connection over, it will be repaired instead", "err", err)
		if rerr := t.journal.Remove(); rerr != nil {
			t.log.Error("remove the takeover journal that cannot be kept", "err", rerr)
		}
	}
}

// Takeable says whether a successor can take the connection over: the
// journal holds everything the kernel was told.
func (t *FS) Takeable() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.broken
}

// snapshot is the tables as a journal would hold them. Called with mu held.
func (t *FS) snapshot() *Saved {
	s := &Saved{Nodes: map[uint64]SavedNode{}, Handles: map[uint64]SavedHandle{},
		NextNode: t.nextNode, NextHandle: t.nextHandle, HandedOver: t.handingOver}
	for id, n := range t.old.Nodes {
		s.Nodes[id] = n
	}
	for fh, h := range t.old.Handles {
		s.Handles[fh] = h
	}
	for id, n := range t.nodes {
		if id != rootID {
			s.Nodes[id] = n.SavedNode
		}
	}
	for fh, h := range t.handles {
		s.Handles[fh] = h.SavedHandle
	}
	return s
}

// innerNode is the inner node id for kernel node id, reviving it if a
// predecessor gave it out.
func (t *FS) innerNode(id uint64) (uint64, fuse.Status) {
	t.mu.Lock()
	n, ok := t.nodes[id]
	t.mu.Unlock()
	if ok {
		return n.inner, fuse.OK
	}
	t.reviveMu.Lock()
	defer t.reviveMu.Unlock()
	return t.reviveNode(id)
}

// changingNames holds revivals off while a request changes names (the
// returned func lets them go on): a revival looks a name up and takes in
// the node found as one step, which a rename over the name between the
// two would make another file's. Called after the request's node ids
// are translated, which may revive.
func (t *FS) changingNames() func() {
	t.reviveMu.RLock()
	return t.reviveMu.RUnlock
}

// reviveNode looks a predecessor's node up again by its name, its parent
// first. Called with reviveMu held.
func (t *FS) reviveNode(id uint64) (uint64, fuse.Status) {
	t.mu.Lock()
	n, live := t.nodes[id]
	saved, ok := t.old.Nodes[id]
	t.mu.Unlock()
	if live {
		return n.inner, fuse.OK
	}
	if !ok {
		t.log.Error("the kernel used a node id this mount never gave out", "node", id)
		return 0, fuse.EIO
	}
	if saved.Parent == 0 {
		return t.stale(id, "it has no name any more")
	}
	parent, st := t.reviveNode(saved.Parent)
	if !st.Ok() {
		return 0, st
	}
	var out fuse.EntryOut
	st = t.inner.Lookup(nil, &fuse.InHeader{NodeId: parent}, saved.Name, &out)
	if !st.Ok() || out.NodeId == 0 {
		return t.stale(id, fmt.Sprintf("looking %q up again: %v", saved.Name, st))
	}
	if out.Mode&syscall.S_IFMT != saved.Type {
		t.inner.Forget(out.NodeId, 1)
		return t.stale(id, fmt.Sprintf("%q is now another type of file", saved.Name))
	}
	t.mu.Lock()
	if n, ok := t.nodes[id]; ok {
		// A lookup of its name took it in meanwhile (adopt): this
		// lookup is one more on its inner node, or one to give back.
		same := n.inner == out.NodeId
		if same {
			n.count++
		}
		t.mu.Unlock()
		if !same {
			t.inner.Forget(out.NodeId, 1)
		}
		return n.inner, fuse.OK
	}
	if cur, ok := t.old.Nodes[id]; ok {
		saved = cur // renamed meanwhile
	}
	t.nodes[id] = &node{inner: out.NodeId, count: 1, revived: true, SavedNode: saved}
	if _, ok := t.byInner[out.NodeId]; !ok {
		t.byInner[out.NodeId] = id
	}
	delete(t.old.Nodes, id)
	t.mu.Unlock()
	t.stats.RevivedNodes.Add(1)
	return out.NodeId, fuse.OK
}

func (t *FS) stale(id uint64, why string) (uint64, fuse.Status) {
	t.stats.Stale.Add(1)
	t.log.Warn("a file the kernel held from before the mounter restarted cannot be found again; its users get ESTALE", "node", id, "why", why)
	return 0, fuse.Status(syscall.ESTALE)
}

// entered takes in a node the inner filesystem handed out under parent
// (a kernel id) and name, and gives out its kernel id in out. made: the
// request made the name (create, mkdir, link...); else it found it
// (lookup, READDIRPLUS).
func (t *FS) entered(parent uint64, name string, out *fuse.EntryOut, made bool) {
	if out.NodeId == 0 {
		return // a negative entry: nothing to number
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	id, ok := t.byInner[out.NodeId]
	if ok {
		n := t.nodes[id]
		n.count++
		n.pinned = n.pinned || n.revived
		if name != "" && (n.Parent != parent || n.Name != name) && id != rootID {
			// Known under another name (moved by another mount and
			// found again): its latest name is how it is found.
			t.rename(id, parent, name)
		}
		out.NodeId = id
		return
	}
	saved := SavedNode{Parent: parent, Name: name, Type: out.Mode & syscall.S_IFMT}
	if name == "" {
		saved.Parent = 0
	} else if id, ok := t.adopt(parent, name, out, made); ok {
		out.NodeId = id
		return
	}
	id = t.nextNode
	t.nextNode++
	t.nodes[id] = &node{inner: out.NodeId, count: 1, SavedNode: saved}
	t.byInner[out.NodeId] = id
	if saved.Parent != 0 {
		t.unname(parent, name)
		t.children[childKey{parent, name}] = id
	}
	t.record("%s", nodeRecord(id, saved))
	out.NodeId = id
}

// adopt takes in a node found at parent/name as the predecessor's node
// of that name and type, which the kernel may hold (its dentry found
// again): the kernel keeps its number for it. Called with mu held.
func (t *FS) adopt(parent uint64, name string, out *fuse.EntryOut, made bool) (uint64, bool) {
	id, ok := t.children[childKey{parent, name}]
	if !ok || made {
		return 0, false // made: the name was free, a predecessor's node of it is gone
	}
	saved, ok := t.old.Nodes[id]
	if !ok || saved.Type != out.Mode&syscall.S_IFMT {
		return 0, false
	}
	t.nodes[id] = &node{inner: out.NodeId, count: 1, pinned: true, SavedNode: saved}
	t.byInner[out.NodeId] = id
	delete(t.old.Nodes, id)
	t.stats.RevivedNodes.Add(1)
	return id, true
}

// place is node id's place in the tree, live or a predecessor's.
// Called with mu held.
func (t *FS) place(id uint64) (SavedNode, bool) {
	if n, ok := t.nodes[id]; ok {
		return n.SavedNode, true
	}
	s, ok := t.old.Nodes[id]
	return s, ok
}

// setPlace gives node id, live or a predecessor's, parent and name.
// Called with mu held.
func (t *FS) setPlace(id, parent uint64, name string) {
	if n, ok := t.nodes[id]; ok {
		n.Parent, n.Name = parent, name
	} else if s, ok := t.old.Nodes[id]; ok {
		s.Parent, s.Name = parent, name
		t.old.Nodes[id] = s
	}
}

// rename moves node id to parent/name. Called with mu held.
func (t *FS) rename(id, parent uint64, name string) {
	n, ok := t.place(id)
	if !ok {
		return
	}
	if k := (childKey{n.Parent, n.Name}); n.Parent != 0 && t.children[k] == id {
		delete(t.children, k)
	}
	t.unname(parent, name)
	t.setPlace(id, parent, name)
	t.children[childKey{parent, name}] = id
	t.record("m %d %d %s", id, parent, strconv.Quote(name))
}

// unname takes parent/name from whatever node had it. Called with mu held.
func (t *FS) unname(parent uint64, name string) {
	k := childKey{parent, name}
	id, ok := t.children[k]
	if !ok {
		return
	}
	delete(t.children, k)
	if _, ok := t.place(id); ok {
		t.setPlace(id, 0, "")
		t.record("u %d", id)
	}
}

// forget gives back up to nlookup of the lookups held for kernel node id
// and returns the inner id and how many to forget there.
func (t *FS) forget(id, nlookup uint64) (inner, count uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, ok := t.nodes[id]
	if !ok {
		if o, old := t.old.Nodes[id]; old {
			delete(t.old.Nodes, id)
			if k := (childKey{o.Parent, o.Name}); o.Parent != 0 && t.children[k] == id {
				delete(t.children, k)
			}
			t.record("f %d", id)
		}
		return 0, 0
	}
	// A revived node's count holds only this process's lookups; the
	// kernel's includes its predecessors'.
	count = min(nlookup, n.count)
	if n.pinned {
		count = min(nlookup, n.count-1)
	}
	n.count -= count
	if n.count == 0 && id != rootID {
		delete(t.nodes, id)
		if t.byInner[n.inner] == id {
			delete(t.byInner, n.inner)
		}
		if k := (childKey{n.Parent, n.Name}); t.children[k] == id {
			delete(t.children, k)
		}
		t.record("f %d", id)
	}
	return n.inner, count
}

// pathOf is a node's path for messages, as far as it is known.
func (t *FS) pathOf(id uint64) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var parts []string
	for range 256 {
		if id == rootID {
			break
		}
		var s SavedNode
		if n, ok := t.nodes[id]; ok {
			s = n.SavedNode
		} else if o, ok := t.old.Nodes[id]; ok {
			s = o
		} else {
			return fmt.Sprintf("node %d", id)
		}
		if s.Parent == 0 {
			return path.Join(append([]string{"(removed)"}, parts...)...)
		}
		parts = append([]string{s.Name}, parts...)
		id = s.Parent
	}
	return path.Join(append([]string{"/"}, parts...)...)
}
