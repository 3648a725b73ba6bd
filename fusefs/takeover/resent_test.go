package takeover

import (
	"context"
	"reflect"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// hdr is a request header on node id; resend sets FUSE_UNIQUE_RESEND.
func hdr(id uint64, resend bool) fuse.InHeader {
	h := fuse.InHeader{NodeId: id, Unique: 42}
	if resend {
		h.Unique |= uniqueResend
	}
	return h
}

// A resent request that makes a name finds it made (the predecessor made
// it and died before answering): it is answered as done, with the node
// there. Sent once, or finding a node of another type, it is EEXIST.
func TestResentMakeFoundMadeIsDone(t *testing.T) {
	tr := newTree()
	tr.add(1, "file", syscall.S_IFREG)
	tfs, inner := serve(t, tr, nil)
	var out fuse.EntryOut
	if st := tfs.Mkdir(nil, &fuse.MkdirIn{InHeader: hdr(rootID, false)}, "d", &out); !st.Ok() {
		t.Fatal(st)
	}
	d := out.NodeId
	wantStatus(t, "mkdir sent once", tfs.Mkdir(nil, &fuse.MkdirIn{InHeader: hdr(rootID, false)}, "d", &out), eexist)
	out = fuse.EntryOut{}
	wantStatus(t, "mkdir resent", tfs.Mkdir(nil, &fuse.MkdirIn{InHeader: hdr(rootID, true)}, "d", &out), fuse.OK)
	if out.NodeId != d {
		t.Errorf("a resent mkdir answered node %d, want the directory's %d", out.NodeId, d)
	}
	wantStatus(t, "mkdir resent over a file", tfs.Mkdir(nil, &fuse.MkdirIn{InHeader: hdr(rootID, true)}, "file", &out), eexist)

	var cout fuse.CreateOut
	excl := uint32(syscall.O_WRONLY | syscall.O_CREAT | syscall.O_EXCL)
	wantStatus(t, "create O_EXCL sent once", tfs.Create(nil, &fuse.CreateIn{InHeader: hdr(rootID, false), Flags: excl}, "file", &cout), eexist)
	wantStatus(t, "create O_EXCL resent", tfs.Create(nil, &fuse.CreateIn{InHeader: hdr(rootID, true), Flags: excl}, "file", &cout), fuse.OK)
	if want := []uint32{syscall.O_WRONLY}; !reflect.DeepEqual(inner.opens, want) {
		t.Errorf("the file made before was opened with flags %#o, want %#o", inner.opens, want)
	}
	if _, st := tfs.Write(nil, &fuse.WriteIn{InHeader: hdr(cout.NodeId, false), Fh: cout.Fh}, []byte("x")); !st.Ok() {
		t.Errorf("write through the resent create's handle: %v", st)
	}
	wantStatus(t, "create O_EXCL resent over a directory", tfs.Create(nil, &fuse.CreateIn{InHeader: hdr(rootID, true), Flags: excl}, "d", &cout), eexist)
}

// A resent unlink or rename that finds its change made is done; sent
// once it is ENOENT, and a resent rename whose new name is not there
// either is ENOENT too.
func TestResentRemoveFoundDoneIsDone(t *testing.T) {
	tr := newTree()
	tr.add(1, "b", syscall.S_IFREG)
	tfs, _ := serve(t, tr, nil)
	wantStatus(t, "unlink sent once", tfs.Unlink(nil, ptr(hdr(rootID, false)), "gone"), fuse.ENOENT)
	wantStatus(t, "unlink resent", tfs.Unlink(nil, ptr(hdr(rootID, true)), "gone"), fuse.OK)
	rename := func(resend bool, from, to string) fuse.Status {
		return tfs.Rename(nil, &fuse.RenameIn{InHeader: hdr(rootID, resend), Newdir: rootID}, from, to)
	}
	wantStatus(t, "rename sent once", rename(false, "a", "b"), fuse.ENOENT)
	wantStatus(t, "rename resent", rename(true, "a", "b"), fuse.OK)
	wantStatus(t, "rename resent, the new name not there", rename(true, "a", "c"), fuse.ENOENT)
	lookup(t, tfs, rootID, "b")
}

func ptr[T any](v T) *T { return &v }

// After a hand-over the predecessor did none of the requests the kernel
// resends (it held them): a resent unlink of a name not there is ENOENT,
// as sent once. The successor's own journal does not say it handed over.
func TestResentAfterHandOverIsAsSentOnce(t *testing.T) {
	tr := newTree()
	tfs, _ := serve(t, tr, nil)
	if err := tfs.HandOver(context.Background(), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	saved, err := Load(tfs.journal.path)
	if err != nil {
		t.Fatal(err)
	}
	if !saved.HandedOver {
		t.Fatal("the journal of a process that handed over does not say so")
	}
	succ, _ := serve(t, tr, saved)
	wantStatus(t, "unlink resent after a hand-over", succ.Unlink(nil, ptr(hdr(rootID, true)), "gone"), fuse.ENOENT)
	if again, err := Load(succ.journal.path); err != nil || again.HandedOver {
		t.Errorf("the successor's journal: HandedOver %v (%v), want false", again.HandedOver, err)
	}
}

// A rename over a name a revival is looking up waits for the revival:
// the predecessor's node of the name is the file that had it, never the
// one renamed over it; after the rename it has no name.
func TestARenameOverANameBeingRevivedWaits(t *testing.T) {
	tr := newTree()
	dino := tr.add(1, "d", syscall.S_IFDIR)
	oldF := tr.add(dino, "f", syscall.S_IFREG)
	tr.add(dino, "tmp", syscall.S_IFREG)
	pred, _ := serve(t, tr, nil)
	d := lookup(t, pred, rootID, "d").NodeId
	f := lookup(t, pred, d, "f").NodeId
	saved, err := Load(pred.journal.path)
	if err != nil {
		t.Fatal(err)
	}
	succ, inner := serve(t, tr, saved)
	if _, st := getattr(succ, d); !st.Ok() { // d revived first
		t.Fatal(st)
	}
	renamed := make(chan fuse.Status, 1)
	var once sync.Once
	inner.beforeLookup = func(name string) {
		if name == "f" {
			once.Do(func() {
				go func() {
					renamed <- succ.Rename(nil, &fuse.RenameIn{InHeader: fuse.InHeader{NodeId: d}, Newdir: d}, "tmp", "f")
				}()
				// The rename, were it not held off, ends well within
				// this: the lookup would then find the new file.
				select {
				case st := <-renamed:
					renamed <- st
				case <-time.After(200 * time.Millisecond):
				}
			})
		}
	}
	ino, st := getattr(succ, f)
	if !st.Ok() || ino != oldF {
		t.Errorf("the predecessor's node of f answers ino %d (%v), want the file that had the name, %d", ino, st, oldF)
	}
	if st := <-renamed; !st.Ok() {
		t.Fatalf("rename: %v", st)
	}
	succ.mu.Lock()
	place, _ := succ.place(f)
	succ.mu.Unlock()
	if place.Parent != 0 {
		t.Errorf("after the rename over it, the old f is at %+v, want no name", place)
	}
}

// A FORGET during a hand-over is not held (the kernel never resends
// one): the journal the successor loads has the node forgotten.
func TestAForgetDuringAHandOverIsJournaled(t *testing.T) {
	tr := newTree()
	tr.add(1, "a", syscall.S_IFREG)
	tfs, _ := serve(t, tr, nil)
	a := lookup(t, tfs, rootID, "a").NodeId
	if err := tfs.HandOver(context.Background(), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { tfs.Forget(a, 1); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a FORGET during a hand-over is held")
	}
	saved, err := Load(tfs.journal.path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := saved.Nodes[a]; ok {
		t.Error("the successor's journal still has the node the kernel forgot during the hand-over")
	}
}
