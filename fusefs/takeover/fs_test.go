package takeover

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// serve is an FS in front of a fake over tr, taking over prev (nil: a
// new connection). It checks, when the test ends, that the fake was
// sent only numbers it gave out and that the journal says what the
// tables say.
func serve(t *testing.T, tr *tree, prev *Saved) (*FS, *fake) {
	t.Helper()
	inner := newFake(tr)
	tfs, err := New(filepath.Join(t.TempDir(), "journal"), prev, slog.New(slog.NewTextHandler(t.Output(), nil)),
		func(fs.ServerCallbacks) fuse.RawFileSystem { return inner })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		inner.mu.Lock()
		for _, e := range inner.errs {
			t.Errorf("inner filesystem: %s", e)
		}
		inner.mu.Unlock()
		checkTables(t, tfs)
		tfs.Close()
	})
	return tfs, inner
}

// checkTables checks that the journal holds what the tables do, that
// every named node is its parent's child by that name and the other way
// round, and that byInner points at nodes with that inner id.
func checkTables(t *testing.T, tfs *FS) {
	t.Helper()
	tfs.mu.Lock()
	defer tfs.mu.Unlock()
	if !tfs.broken { // else there is no journal, on purpose
		saved, err := Load(tfs.journal.path)
		if err != nil {
			t.Fatal(err)
		}
		if want := tfs.snapshot(); !reflect.DeepEqual(saved, want) {
			t.Errorf("the journal says\n%+v\nthe tables\n%+v", saved, want)
		}
	}
	for k, id := range tfs.children {
		if n, ok := tfs.place(id); !ok || (childKey{n.Parent, n.Name}) != k {
			t.Errorf("children[%v] = node %d, at %+v", k, id, n)
		}
	}
	named := func(id uint64, n SavedNode) {
		if n.Parent != 0 && tfs.children[childKey{n.Parent, n.Name}] != id {
			t.Errorf("node %d at %d/%q is not its child", id, n.Parent, n.Name)
		}
	}
	for id, n := range tfs.nodes {
		named(id, n.SavedNode)
		if _, old := tfs.old.Nodes[id]; old {
			t.Errorf("node %d is live and a predecessor's", id)
		}
	}
	for id, n := range tfs.old.Nodes {
		named(id, n)
	}
	for inner, id := range tfs.byInner {
		if n, ok := tfs.nodes[id]; !ok || n.inner != inner {
			t.Errorf("byInner[%d] = %d, which is %+v", inner, id, n)
		}
	}
}

func lookup(t *testing.T, tfs *FS, parent uint64, name string) fuse.EntryOut {
	t.Helper()
	var out fuse.EntryOut
	if st := tfs.Lookup(nil, &fuse.InHeader{NodeId: parent}, name, &out); !st.Ok() {
		t.Fatalf("lookup %d/%q: %v", parent, name, st)
	}
	return out
}

func open(t *testing.T, tfs *FS, id uint64, flags uint32) uint64 {
	t.Helper()
	var out fuse.OpenOut
	if st := tfs.Open(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: id}, Flags: flags}, &out); !st.Ok() {
		t.Fatalf("open %d: %v", id, st)
	}
	return out.Fh
}

func getattr(tfs *FS, id uint64) (uint64, fuse.Status) {
	var out fuse.AttrOut
	st := tfs.GetAttr(nil, &fuse.GetAttrIn{InHeader: fuse.InHeader{NodeId: id}}, &out)
	return out.Ino, st
}

func wantStatus(t *testing.T, what string, got, want fuse.Status) {
	t.Helper()
	if got != want {
		t.Errorf("%s: %v, want %v", what, got, want)
	}
}

// The fake takes a forgotten number back into use; FS never does: a
// number the kernel was given means one file for the connection's life.
func TestNodeIDsNeverReused(t *testing.T) {
	tr := newTree()
	a, b := tr.add(1, "a", syscall.S_IFREG), tr.add(1, "b", syscall.S_IFREG)
	tfs, inner := serve(t, tr, nil)
	ea := lookup(t, tfs, rootID, "a")
	innerA := inner.idOf[a]
	tfs.Forget(ea.NodeId, 1)
	eb := lookup(t, tfs, rootID, "b")
	if inner.idOf[b] != innerA {
		t.Fatalf("the fake did not reuse inner id %d: the test shows nothing", innerA)
	}
	if eb.NodeId <= ea.NodeId {
		t.Errorf("b got node id %d after a's %d was forgotten", eb.NodeId, ea.NodeId)
	}
	if ino, st := getattr(tfs, eb.NodeId); !st.Ok() || ino != b {
		t.Errorf("getattr b: ino %d, %v; want %d", ino, st, b)
	}
	if _, st := getattr(tfs, ea.NodeId); st.Ok() {
		t.Errorf("getattr of forgotten a reached a file")
	}
	for i := range 50 {
		id := lookup(t, tfs, rootID, "a").NodeId
		if id <= eb.NodeId+uint64(i) {
			t.Fatalf("lookup %d gave node id %d, given out before", i, id)
		}
		tfs.Forget(id, 1)
	}
}

// FORGET gives back at most what FS holds, and at zero the node is
// gone, in the journal too.
func TestForgetForwardsWhatItHolds(t *testing.T) {
	tr := newTree()
	tr.add(1, "a", syscall.S_IFREG)
	tfs, inner := serve(t, tr, nil)
	var id uint64
	for range 3 {
		id = lookup(t, tfs, rootID, "a").NodeId
	}
	innerID := inner.idOf[tr.names[childKey{1, "a"}]]
	tfs.Forget(id, 2)
	tfs.Forget(id, 5) // more than it holds: 1 goes in
	tfs.Forget(id, 1) // unknown by now: nothing goes in
	if want := [][2]uint64{{innerID, 2}, {innerID, 1}}; !reflect.DeepEqual(inner.forgets, want) {
		t.Errorf("the inner filesystem was told to forget %v, want %v", inner.forgets, want)
	}
	if _, ok := tfs.nodes[id]; ok {
		t.Error("a node forgotten to zero is still in the table")
	}
	saved, err := Load(tfs.journal.path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := saved.Nodes[id]; ok {
		t.Error("a node forgotten to zero is still in the journal")
	}
}

// predecessor is what a process left: it looked up /d and /d/f, opened f
// for writing with O_TRUNC and flushed it (clean), created /d/g (dirty:
// not uploaded) and opened /d as a directory; then it died.
type predecessor struct {
	tr                *tree
	saved             *Saved
	d, f              uint64 // node ids
	clean, dirty, dir uint64 // handles
	inoF              uint64
}

func runPredecessor(t *testing.T) predecessor {
	t.Helper()
	p := predecessor{tr: newTree()}
	dino := p.tr.add(1, "d", syscall.S_IFDIR)
	p.inoF = p.tr.add(dino, "f", syscall.S_IFREG)
	tfs, _ := serve(t, p.tr, nil)
	p.d = lookup(t, tfs, rootID, "d").NodeId
	p.f = lookup(t, tfs, p.d, "f").NodeId
	p.clean = open(t, tfs, p.f, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL|syscall.O_TRUNC)
	if st := tfs.Flush(nil, &fuse.FlushIn{InHeader: fuse.InHeader{NodeId: p.f}, Fh: p.clean}); !st.Ok() {
		t.Fatal(st)
	}
	var cout fuse.CreateOut
	if st := tfs.Create(nil, &fuse.CreateIn{InHeader: fuse.InHeader{NodeId: p.d}, Flags: syscall.O_WRONLY}, "g", &cout); !st.Ok() {
		t.Fatal(st)
	}
	p.dirty = cout.Fh
	var dout fuse.OpenOut
	if st := tfs.OpenDir(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: p.d}}, &dout); !st.Ok() {
		t.Fatal(st)
	}
	p.dir = dout.Fh
	saved, err := Load(tfs.journal.path)
	if err != nil {
		t.Fatal(err)
	}
	p.saved = saved
	return p
}

// A successor revives a node the kernel sends by looking its name up
// again, parent first, and holds one lookup on it.
func TestReviveNodeByName(t *testing.T) {
	p := runPredecessor(t)
	tfs, inner := serve(t, p.tr, p.saved)
	if ino, st := getattr(tfs, p.f); !st.Ok() || ino != p.inoF {
		t.Fatalf("getattr of a predecessor's node: ino %d, %v; want %d", ino, st, p.inoF)
	}
	if want := []string{"d", "f"}; !reflect.DeepEqual(inner.lookups, want) {
		t.Errorf("revival looked up %q, want %q", inner.lookups, want)
	}
	if n := tfs.Stats().RevivedNodes.Load(); n != 2 {
		t.Errorf("%d nodes revived, want 2", n)
	}
	// The kernel holds lookups from before; the successor holds one.
	tfs.Forget(p.f, 7)
	if want := [][2]uint64{{inner.idOf[p.inoF], 1}}; len(inner.forgets) != 1 || inner.forgets[0][1] != 1 {
		t.Errorf("forgets %v, want %v", inner.forgets, want)
	}
}

// After a crash the kernel looks every name up again (a new epoch), and
// drops the old dentry as it does: the FORGET of the predecessor's inode
// can reach the successor after the LOOKUP that gave the kernel the same
// id again, while the kernel makes a new inode of that reply. The id
// must stay known: the next request on it is the new inode's.
func TestAForgetCrossingALookupKeepsTheID(t *testing.T) {
	p := runPredecessor(t)
	tfs, _ := serve(t, p.tr, p.saved)
	if id := lookup(t, tfs, rootID, "d").NodeId; id != p.d {
		t.Fatalf("lookup of d gave node id %d, want the predecessor's %d", id, p.d)
	}
	tfs.Forget(p.d, 1) // the predecessor's one lookup, from the evicted inode
	if _, st := getattr(tfs, p.d); !st.Ok() {
		t.Fatalf("getattr of the adopted node after the old inode's FORGET: %v", st)
	}
	if id := lookup(t, tfs, p.d, "f").NodeId; id != p.f {
		t.Errorf("lookup of d/f gave node id %d, want the predecessor's %d", id, p.f)
	}

	// The same for a node revived on use (an open file's) whose id a
	// lookup then gives out again.
	p = runPredecessor(t)
	tfs, _ = serve(t, p.tr, p.saved)
	if _, st := getattr(tfs, p.f); !st.Ok() {
		t.Fatal(st)
	}
	if id := lookup(t, tfs, p.d, "f").NodeId; id != p.f {
		t.Fatalf("lookup of d/f gave node id %d, want %d", id, p.f)
	}
	tfs.Forget(p.f, 2) // the predecessor's lookup and this one, from the evicted inode
	if _, st := getattr(tfs, p.f); !st.Ok() {
		t.Fatalf("getattr of a revived node after the old inode's FORGET: %v", st)
	}
}

// A clean handle is opened again as it was, less O_CREAT, O_EXCL and
// O_TRUNC: the file exists now and holds what was flushed.
func TestReviveCleanHandle(t *testing.T) {
	p := runPredecessor(t)
	tfs, inner := serve(t, p.tr, p.saved)
	if _, st := tfs.Read(nil, &fuse.ReadIn{InHeader: fuse.InHeader{NodeId: p.f}, Fh: p.clean}, nil); !st.Ok() {
		t.Fatalf("read on a predecessor's clean handle: %v", st)
	}
	if want := []uint32{syscall.O_RDWR}; !reflect.DeepEqual(inner.opens, want) {
		t.Errorf("reopened with flags %#o, want %#o", inner.opens, want)
	}
	if _, st := tfs.Write(nil, &fuse.WriteIn{InHeader: fuse.InHeader{NodeId: p.f}, Fh: p.clean}, []byte("x")); !st.Ok() {
		t.Errorf("write: %v", st)
	}
	var dl = fuse.NewDirEntryList(make([]byte, 4096), 0)
	if st := tfs.ReadDirPlus(nil, &fuse.ReadIn{InHeader: fuse.InHeader{NodeId: p.d}, Fh: p.dir}, dl); !st.Ok() {
		t.Errorf("readdirplus on a predecessor's directory handle: %v", st)
	}
	tfs.Release(nil, &fuse.ReleaseIn{InHeader: fuse.InHeader{NodeId: p.f}, Fh: p.clean})
	tfs.ReleaseDir(&fuse.ReleaseIn{InHeader: fuse.InHeader{NodeId: p.d}, Fh: p.dir})
	wantReleasedInside(t, inner, 2)
	wantCount(t, "handles revived", tfs.Stats().RevivedHandles.Load(), 2)
}

// A handle whose writes died with the predecessor is opened again, as a
// clean one is, and its next call fails with EIO, once (as a failed
// writeback is reported once); the journal then says it is clean, so
// that a successor of this process does not fail it again.
func TestDirtyHandleFailsOnce(t *testing.T) {
	p := runPredecessor(t)
	tfs, inner := serve(t, p.tr, p.saved)
	g := lookup(t, tfs, p.d, "g").NodeId
	in := fuse.InHeader{NodeId: g}
	_, st := tfs.Write(nil, &fuse.WriteIn{InHeader: in, Fh: p.dirty}, []byte("x"))
	wantStatus(t, "first write", st, fuse.EIO)
	saved, err := Load(tfs.journal.path)
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := saved.Handles[p.dirty]; !ok || h.Dirty {
		t.Errorf("after its failure was told, the journal has the handle as %+v (present %v), want clean", h, ok)
	}
	_, st = tfs.Write(nil, &fuse.WriteIn{InHeader: in, Fh: p.dirty}, []byte("x"))
	wantStatus(t, "write after the failure", st, fuse.OK)
	wantStatus(t, "flush", tfs.Flush(nil, &fuse.FlushIn{InHeader: in, Fh: p.dirty}), fuse.OK)
	wantStatus(t, "fsync", tfs.Fsync(nil, &fuse.FsyncIn{InHeader: in, Fh: p.dirty}), fuse.OK)
	if want := []uint32{syscall.O_WRONLY}; !reflect.DeepEqual(inner.opens, want) {
		t.Errorf("reopened with flags %#o, want %#o", inner.opens, want)
	}
	tfs.Release(nil, &fuse.ReleaseIn{InHeader: in, Fh: p.dirty})
	wantReleasedInside(t, inner, 1)
	wantCount(t, "lost handles", tfs.Stats().LostHandles.Load(), 1)
}

// wantReleasedInside checks that n releases reached the inner filesystem
// and that it has nothing left open.
func wantReleasedInside(t *testing.T, inner *fake, n int) {
	t.Helper()
	if inner.release != n || len(inner.fhs) != 0 {
		t.Errorf("%d releases reached the inner filesystem, %d handles left open there; want %d, 0", inner.release, len(inner.fhs), n)
	}
}

func wantCount(t *testing.T, what string, got, want int64) {
	t.Helper()
	if got != want {
		t.Errorf("%d %s, want %d", got, what, want)
	}
}

// A dirty handle of a file that cannot be opened again (created and
// never uploaded: it is not there) fails every call with EIO until
// released; its release goes nowhere: nothing is open inside.
func TestDirtyHandleOfFileGoneIsLost(t *testing.T) {
	p := runPredecessor(t)
	p.tr.mu.Lock()
	delete(p.tr.names, childKey{p.tr.names[childKey{1, "d"}], "g"})
	p.tr.mu.Unlock()
	tfs, inner := serve(t, p.tr, p.saved)
	in := fuse.InHeader{NodeId: p.f} // g's node was never looked up: the handle alone is enough
	for range 2 {
		_, st := tfs.Write(nil, &fuse.WriteIn{InHeader: in, Fh: p.dirty}, []byte("x"))
		wantStatus(t, "write", st, fuse.EIO)
	}
	wantStatus(t, "flush", tfs.Flush(nil, &fuse.FlushIn{InHeader: in, Fh: p.dirty}), fuse.EIO)
	wantStatus(t, "fsync", tfs.Fsync(nil, &fuse.FsyncIn{InHeader: in, Fh: p.dirty}), fuse.EIO)
	_, st := tfs.Read(nil, &fuse.ReadIn{InHeader: in, Fh: p.dirty}, nil)
	wantStatus(t, "read", st, fuse.EIO)
	tfs.Release(nil, &fuse.ReleaseIn{InHeader: in, Fh: p.dirty})
	if inner.release != 0 || len(inner.opens) != 0 {
		t.Errorf("a lost handle reached the inner filesystem: %d opens, %d releases", len(inner.opens), inner.release)
	}
	_, st = tfs.Write(nil, &fuse.WriteIn{InHeader: in, Fh: p.dirty}, []byte("x"))
	wantStatus(t, "write after release", st, fuse.Status(syscall.EBADF))
	wantCount(t, "lost handles", tfs.Stats().LostHandles.Load(), 1)
}

// A node whose name now holds another type, is gone, or was unlinked
// before the takeover is stale; a number never given out is EIO.
func TestReviveStale(t *testing.T) {
	tr := newTree()
	tr.add(1, "now-a-dir", syscall.S_IFDIR)
	tr.add(1, "file", syscall.S_IFREG)
	prev := &Saved{Nodes: map[uint64]SavedNode{
		5: {Parent: 1, Name: "now-a-dir", Type: syscall.S_IFREG},
		6: {Parent: 1, Name: "file", Type: syscall.S_IFREG},
		7: {Type: syscall.S_IFREG}, // unlinked
		8: {Parent: 1, Name: "gone", Type: syscall.S_IFREG},
		9: {Parent: 5, Name: "under-stale", Type: syscall.S_IFREG},
	}, Handles: map[uint64]SavedHandle{}, NextNode: 10, NextHandle: 1}
	tfs, inner := serve(t, tr, prev)
	for _, id := range []uint64{5, 7, 8, 9} {
		_, st := getattr(tfs, id)
		wantStatus(t, fmt.Sprintf("node %d", id), st, fuse.Status(syscall.ESTALE))
	}
	if _, st := getattr(tfs, 6); !st.Ok() {
		t.Errorf("node 6: %v", st)
	}
	_, st := getattr(tfs, 99)
	wantStatus(t, "node never given out", st, fuse.EIO)
	if held := inner.held(); len(held) != 1 {
		t.Errorf("the inner filesystem holds %v; want only node 6's lookup (a wrong type's given back)", held)
	}
	if n := tfs.Stats().Stale.Load(); n != 4 { // 9 is stale as its parent 5 is
		t.Errorf("%d stale, want 4", n)
	}
}

// READDIRPLUS entries carry inner node ids until FS numbers them, in
// place: the same numbers a LOOKUP of each name gives.
func TestReadDirPlusTranslated(t *testing.T) {
	tr := newTree()
	names := []string{"a", "eight-ch", "new\nline", strings.Repeat("long", 60), "x y"}
	for i, name := range names {
		tr.add(1, name, []uint32{syscall.S_IFREG, syscall.S_IFDIR}[i%2])
	}
	tfs, inner := serve(t, tr, nil)
	var out fuse.OpenOut
	if st := tfs.OpenDir(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: rootID}}, &out); !st.Ok() {
		t.Fatal(st)
	}
	readdir := func() map[string]uint64 {
		dl := fuse.NewDirEntryList(make([]byte, 64<<10), 0)
		if st := tfs.ReadDirPlus(nil, &fuse.ReadIn{InHeader: fuse.InHeader{NodeId: rootID}, Fh: out.Fh}, dl); !st.Ok() {
			t.Fatal(st)
		}
		ids := map[string]uint64{}
		for name, e := range inner.dirplus {
			ids[name] = e.NodeId
		}
		return ids
	}
	first := readdir()
	for _, dot := range []string{".", ".."} {
		if first[dot] != 0 {
			t.Errorf("%q got node id %d", dot, first[dot])
		}
	}
	for _, name := range names {
		if id := lookup(t, tfs, rootID, name).NodeId; first[name] != id || id < firstNode || id >= 1000 {
			t.Errorf("%q: readdirplus gave %d, lookup %d", name, first[name], id)
		}
	}
	if again := readdir(); !reflect.DeepEqual(again, first) {
		t.Errorf("a second readdirplus gave %v, the first %v", again, first)
	}
	for _, name := range names {
		tfs.Forget(first[name], 3)
	}
	if held := inner.held(); len(held) != 0 {
		t.Errorf("after every lookup was forgotten the inner filesystem holds %v", held)
	}

	// A reply cut short translates what it holds whole and stops.
	dl := fuse.NewDirEntryList(make([]byte, 64<<10), 0)
	tfs.ReadDirPlus(nil, &fuse.ReadIn{InHeader: fuse.InHeader{NodeId: rootID}, Fh: out.Fh}, dl)
	for cut := range len(dl.Bytes()) {
		tfs.enteredAll(rootID, append([]byte(nil), dl.Bytes()[:cut]...))
	}
}

// Renames and unlinks keep the children index and the journal right:
// a name moves, replaces, swaps (RENAME_EXCHANGE), goes.
func TestRenameBookkeeping(t *testing.T) {
	tr := newTree()
	for _, name := range []string{"a", "b", "c"} {
		tr.add(1, name, syscall.S_IFREG)
	}
	tr.add(1, "d", syscall.S_IFDIR)
	tfs, _ := serve(t, tr, nil)
	id := map[string]uint64{}
	for _, name := range []string{"a", "b", "c", "d"} {
		id[name] = lookup(t, tfs, rootID, name).NodeId
	}
	rename := func(from uint64, oldName string, to uint64, newName string, flags uint32) {
		t.Helper()
		in := fuse.RenameIn{InHeader: fuse.InHeader{NodeId: from}, Newdir: to, Flags: flags}
		if st := tfs.Rename(nil, &in, oldName, newName); !st.Ok() {
			t.Fatalf("rename %q %q: %v", oldName, newName, st)
		}
	}
	at := func(step, name string, parent uint64, want string) {
		t.Helper()
		n := tfs.nodes[id[name]]
		if n.Parent != parent || n.Name != want {
			t.Errorf("after %s, %s is at %d/%q, want %d/%q", step, name, n.Parent, n.Name, parent, want)
		}
	}
	rename(rootID, "a", id["d"], "a2", 0)
	at("a moved", "a", id["d"], "a2")
	rename(rootID, "b", id["d"], "a2", 0)
	at("b replaced a", "b", id["d"], "a2")
	at("b replaced a", "a", 0, "")
	rename(rootID, "c", id["d"], "a2", renameExchange)
	at("c and b swapped", "c", id["d"], "a2")
	at("c and b swapped", "b", rootID, "c")
	checkTables(t, tfs)
	if st := tfs.Unlink(nil, &fuse.InHeader{NodeId: rootID}, "c"); !st.Ok() {
		t.Fatal(st)
	}
	at("unlink", "b", 0, "")
	if _, ok := tfs.children[childKey{rootID, "c"}]; ok {
		t.Error("an unlinked name is still a child")
	}
}

// A rename or unlink in a successor, of a name whose node the kernel
// holds from before and has not used since, moves or unnames that node:
// else its revival looks up whatever holds its old name by then.
func TestRenameBeforeRevival(t *testing.T) {
	tr := newTree()
	inoA := tr.add(1, "a", syscall.S_IFREG)
	tr.add(1, "u", syscall.S_IFREG)
	tr.add(1, "k", syscall.S_IFREG)
	tr.add(1, "t", syscall.S_IFREG)
	prev := &Saved{Nodes: map[uint64]SavedNode{
		5: {Parent: 1, Name: "a", Type: syscall.S_IFREG},
		6: {Parent: 1, Name: "u", Type: syscall.S_IFREG},
		7: {Parent: 1, Name: "k", Type: syscall.S_IFREG},
		8: {Parent: 1, Name: "t", Type: syscall.S_IFDIR},
	}, Handles: map[uint64]SavedHandle{}, NextNode: 9, NextHandle: 1}
	tfs, inner := serve(t, tr, prev)
	root := fuse.InHeader{NodeId: rootID}
	create := func(name string) {
		t.Helper()
		var out fuse.CreateOut
		if st := tfs.Create(nil, &fuse.CreateIn{InHeader: root, Flags: syscall.O_WRONLY}, name, &out); !st.Ok() {
			t.Fatalf("create %q: %v", name, st)
		}
		if out.NodeId < 9 {
			t.Errorf("create %q gave node id %d, a predecessor's", name, out.NodeId)
		}
	}
	if st := tfs.Rename(nil, &fuse.RenameIn{InHeader: root, Newdir: rootID}, "a", "b"); !st.Ok() {
		t.Fatal(st)
	}
	create("a")
	if ino, st := getattr(tfs, 5); !st.Ok() || ino != inoA {
		t.Errorf("node 5, renamed a→b then a made anew: ino %d, %v; want %d (b's)", ino, st, inoA)
	}
	if st := tfs.Unlink(nil, &root, "u"); !st.Ok() {
		t.Fatal(st)
	}
	create("u")
	_, st := getattr(tfs, 6)
	wantStatus(t, "node 6, unlinked then u made anew", st, fuse.Status(syscall.ESTALE))

	// A lookup of a name the predecessor gave out keeps its number.
	if got := lookup(t, tfs, rootID, "k").NodeId; got != 7 {
		t.Errorf("lookup of k: node id %d, want the predecessor's 7", got)
	}
	if ino, st := getattr(tfs, 7); !st.Ok() || ino != tr.names[childKey{1, "k"}] {
		t.Errorf("getattr 7 after its lookup: %d, %v", ino, st)
	}
	if got := lookup(t, tfs, rootID, "t").NodeId; got == 8 {
		t.Error("lookup of t, now a file, gave the predecessor's node id of a directory")
	}
	_, st = getattr(tfs, 8)
	wantStatus(t, "node 8 after its name came to hold a file", st, fuse.Status(syscall.ESTALE))
	tfs.Forget(7, 100)
	// b (node 5), the new a and u, t, and k: adopted, it keeps one
	// lookup for the connection's life (a FORGET of an adopted id may be
	// the predecessor's inode's); not t's lookup for 8.
	if held := inner.held(); len(held) != 5 || held[inner.idOf[tr.names[childKey{1, "k"}]]] != 1 {
		t.Errorf("the inner filesystem holds %v, want 5 nodes, k's once", held)
	}
}

// Lookups, forgets, opens, reads and releases from many goroutines while
// a predecessor's nodes and handles are revived: no race (go test
// -race), tables and journal consistent, and once the kernel has
// forgotten and released everything, nothing is held inside.
func TestConcurrentRevival(t *testing.T) {
	const dirs, files = 8, 16
	tr := newTree()
	prev := &Saved{Nodes: map[uint64]SavedNode{}, Handles: map[uint64]SavedHandle{}, NextHandle: 1}
	next := uint64(firstNode)
	var oldDirs, oldFiles, oldHandles []uint64
	for d := range dirs {
		dname := fmt.Sprintf("d%d", d)
		dino := tr.add(1, dname, syscall.S_IFDIR)
		did := next
		next++
		prev.Nodes[did] = SavedNode{Parent: rootID, Name: dname, Type: syscall.S_IFDIR}
		oldDirs = append(oldDirs, did)
		for f := range files {
			fname := fmt.Sprintf("f%d", f)
			tr.add(dino, fname, syscall.S_IFREG)
			prev.Nodes[next] = SavedNode{Parent: did, Name: fname, Type: syscall.S_IFREG}
			oldFiles = append(oldFiles, next)
			if f%4 == 0 {
				prev.Handles[prev.NextHandle] = SavedHandle{Node: next, Flags: syscall.O_RDONLY}
				oldHandles = append(oldHandles, prev.NextHandle)
				prev.NextHandle++
			}
			next++
		}
	}
	prev.NextNode = next
	tfs, inner := serve(t, tr, prev)

	// kernel counts the lookups the "kernel" holds on a predecessor's
	// nodes: like a real one, it forgets those all at once, at the end.
	var kmu sync.Mutex
	kernel := map[uint64]uint64{}
	for id := range prev.Nodes {
		kernel[id] = 1
	}
	took := func(id uint64) {
		if id < prev.NextNode {
			kmu.Lock()
			kernel[id]++
			kmu.Unlock()
		} else {
			tfs.Forget(id, 1)
		}
	}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 200 {
				d := oldDirs[(g+i)%dirs]
				name := fmt.Sprintf("f%d", (g*7+i)%files)
				switch g % 4 {
				case 0: // revive
					if _, st := getattr(tfs, oldFiles[(g*13+i)%len(oldFiles)]); !st.Ok() {
						t.Errorf("getattr: %v", st)
					}
				case 1: // read on a predecessor's handle
					fh := oldHandles[(g+i)%len(oldHandles)]
					if _, st := tfs.Read(nil, &fuse.ReadIn{Fh: fh, InHeader: fuse.InHeader{NodeId: prev.Handles[fh].Node}}, nil); !st.Ok() {
						t.Errorf("read: %v", st)
					}
				case 2: // look up and forget
					var out fuse.EntryOut
					if st := tfs.Lookup(nil, &fuse.InHeader{NodeId: d}, name, &out); !st.Ok() {
						t.Errorf("lookup: %v", st)
						continue
					}
					took(out.NodeId)
				case 3: // look up, open, read, release, forget
					var out fuse.EntryOut
					if st := tfs.Lookup(nil, &fuse.InHeader{NodeId: d}, name, &out); !st.Ok() {
						t.Errorf("lookup: %v", st)
						continue
					}
					var oo fuse.OpenOut
					in := fuse.InHeader{NodeId: out.NodeId}
					if st := tfs.Open(nil, &fuse.OpenIn{InHeader: in}, &oo); st.Ok() {
						tfs.Read(nil, &fuse.ReadIn{InHeader: in, Fh: oo.Fh}, nil)
						tfs.Release(nil, &fuse.ReleaseIn{InHeader: in, Fh: oo.Fh})
					} else {
						t.Errorf("open: %v", st)
					}
					took(out.NodeId)
				}
			}
		})
	}
	wg.Wait()
	checkTables(t, tfs)
	for _, fh := range oldHandles {
		tfs.Release(nil, &fuse.ReleaseIn{Fh: fh, InHeader: fuse.InHeader{NodeId: prev.Handles[fh].Node}})
	}
	for _, id := range oldFiles { // children first: a real kernel forgets a directory last
		tfs.Forget(id, kernel[id])
	}
	for _, id := range oldDirs {
		tfs.Forget(id, kernel[id])
	}
	// What is left is the pinned nodes (a lookup gave the kernel a
	// predecessor's id again), one inner lookup each: kept on purpose
	// (TestAForgetCrossingALookupKeepsTheID).
	pinned := map[uint64]uint64{}
	for id, n := range tfs.nodes {
		if id != rootID {
			if !n.pinned || n.count != 1 {
				t.Errorf("node %d (pinned %v) holds %d lookups after the kernel forgot everything", id, n.pinned, n.count)
			}
			pinned[n.inner] = 1
		}
	}
	if held := inner.held(); !reflect.DeepEqual(held, pinned) || len(inner.fhs) != 0 {
		t.Errorf("after the kernel forgot and released everything, the inner filesystem holds lookups %v and %d handles; want those of the pinned nodes, %v", held, len(inner.fhs), pinned)
	}
	if len(tfs.handles) != 0 || len(tfs.old.Nodes) != 0 || len(tfs.old.Handles) != 0 || len(tfs.children) != len(pinned) {
		t.Errorf("tables left: %d nodes, %d handles, %d old nodes, %d old handles, %d children",
			len(tfs.nodes), len(tfs.handles), len(tfs.old.Nodes), len(tfs.old.Handles), len(tfs.children))
	}
}

// A record that cannot be written leaves no journal that lies: the
// journal is removed, no successor can load it, and the FS says the
// connection cannot be taken over. Requests go on being answered.
func TestAJournalThatCannotBeWrittenIsGivenUp(t *testing.T) {
	tr := newTree()
	tr.add(1, "a", syscall.S_IFREG)
	tr.add(1, "b", syscall.S_IFREG)
	tfs, _ := serve(t, tr, nil)
	lookup(t, tfs, rootID, "a")
	if !tfs.Takeable() {
		t.Fatal("not takeable before any failure")
	}
	tfs.journal.f.Close() // the next write fails, as on a full volume
	lookup(t, tfs, rootID, "b")
	if tfs.Takeable() {
		t.Error("takeable after a record could not be written")
	}
	if _, err := Load(tfs.journal.path); err == nil {
		t.Error("a successor can still load the journal")
	}
	lookup(t, tfs, rootID, "b") // no more records, and no failure
}

// A flush clears a handle's Dirty only if it covers every change begun
// through it: a write under way as it began, or begun since, may not be
// in what it uploaded, and stays to fail after a crash.
func TestAFlushClearsOnlyTheChangesItCovers(t *testing.T) {
	tr := newTree()
	tr.add(1, "f", syscall.S_IFREG)
	tfs, _ := serve(t, tr, nil)
	f := lookup(t, tfs, rootID, "f").NodeId
	fh := open(t, tfs, f, syscall.O_WRONLY)
	h := tfs.handles[fh]
	dirtyInJournal := func() bool {
		t.Helper()
		s, err := Load(tfs.journal.path)
		if err != nil {
			t.Fatal(err)
		}
		return s.Handles[fh].Dirty
	}

	ended := tfs.dirty(fh, h) // a write under way ...
	mark := tfs.flushing(h)   // ... as a flush begins
	tfs.flushed(fh, h, mark)
	ended()
	if !dirtyInJournal() {
		t.Error("a flush that began while a write was under way marked the handle clean")
	}

	mark = tfs.flushing(h)
	tfs.dirty(fh, h)() // a write begun and ended after the flush began
	tfs.flushed(fh, h, mark)
	if !dirtyInJournal() {
		t.Error("a flush marked the handle clean over a write begun after it")
	}

	mark = tfs.flushing(h) // nothing under way, nothing since
	tfs.flushed(fh, h, mark)
	if dirtyInJournal() {
		t.Error("a flush covering every write left the handle dirty")
	}
}
